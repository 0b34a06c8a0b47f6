// The module definition of ferry._ferry, the error type and the Config conversion shared by the
// binding files (bindings.h).
#include <pybind11/stl.h>

#include "core/refit/config.h"
#include "python/src/bindings.h"

namespace py = pybind11;

namespace ferry::python {
namespace {
PyObject* ferry_error = nullptr;  // ferry.FerryError, set once at import, owned by the module
}  // namespace

void ThrowIfError(const Status& status) {
  if (status.ok()) return;
  PyErr_SetString(ferry_error, status.ToString().c_str());
  throw py::error_already_set();
}

Config ConfigFrom(const py::object& source) {
  Config config = DefaultConfig();
  if (py::isinstance<py::str>(source)) {
    ThrowIfError(config.LoadYamlFile(source.cast<std::string>()));
  } else if (!source.is_none() && !py::isinstance<py::dict>(source)) {
    throw py::type_error("config must be None, a YAML file path (str) or a dict of option names");
  }
  ThrowIfError(config.ApplyProcessEnvironment());
  if (py::isinstance<py::dict>(source)) {
    for (auto [name, value] : source.cast<py::dict>()) {
      std::string text = py::isinstance<py::bool_>(value) ? (value.cast<bool>() ? "true" : "false")
                                                          : py::str(value).cast<std::string>();
      ThrowIfError(config.Set(py::str(name).cast<std::string>(), text)
                       .WithContext("config[" + py::str(name).cast<std::string>() + "]"));
    }
  }
  return config;
}

void BindErrors(py::module_& m) {
  static py::exception<std::runtime_error> error(m, "FerryError", PyExc_RuntimeError);
  ferry_error = error.ptr();
  m.def("describe_config", [](const py::object& config) { return ConfigFrom(config).Describe(); },
        py::arg("config") = py::none(),
        "Every option with its value, default, FERRY_* variable and help (as `ferry config`).");
}

}  // namespace ferry::python

PYBIND11_MODULE(_ferry, m) {
  m.doc() = "ferry's compiled core: layouts, plans, sessions and refits (use the ferry package).";
  ferry::python::BindErrors(m);
  ferry::python::BindLayout(m);
  ferry::python::BindMemory(m);
  ferry::python::BindPlan(m);
  ferry::python::BindSession(m);
}
