// The module definition of ferry._ferry, the error type and the Config conversion shared by the
// binding files (bindings.h).
#include <pybind11/stl.h>

#include <cctype>
#include <string>

#include "core/refit/config.h"
#include "python/src/bindings.h"

namespace py = pybind11;

namespace ferry::python {
namespace {
PyObject* ferry_error = nullptr;  // ferry.FerryError, set once at import, owned by the module
PyObject* invalid_argument_error = nullptr;  // ferry.InvalidArgumentError, likewise

// The caller's input is at fault: Python's ValueError as well as ferry's own error.
bool IsCallersInput(StatusCode code) {
  return code == StatusCode::kInvalidArgument || code == StatusCode::kOutOfRange ||
         code == StatusCode::kNotFound;
}

// "invalid_argument" for StatusCode::kInvalidArgument: the `code` attribute of the exception.
std::string PythonCodeName(StatusCode code) {
  std::string name(StatusCodeName(code));
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return name;
}
}  // namespace

void ThrowIfError(const Status& status) {
  if (status.ok()) return;
  PyObject* type = IsCallersInput(status.code()) ? invalid_argument_error : ferry_error;
  py::object error = py::reinterpret_borrow<py::object>(type)(status.message());
  error.attr("code") = PythonCodeName(status.code());
  PyErr_SetObject(type, error.ptr());
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
  error.doc() =
      "An error from ferry (a RuntimeError): its message is ferry's, naming what is wrong; "
      "`code` is the kind of failure ('invalid_argument', 'deadline_exceeded', 'aborted', "
      "'unavailable', 'io_error', ...).";
  py::tuple bases = py::make_tuple(error, py::reinterpret_borrow<py::object>(PyExc_ValueError));
  invalid_argument_error = PyErr_NewExceptionWithDoc(
      "ferry._ferry.InvalidArgumentError",
      "ferry refused the caller's input (a layout, a spec, an option, a name): both a "
      "FerryError and a ValueError.",
      bases.ptr(), nullptr);
  if (invalid_argument_error == nullptr) throw py::error_already_set();
  m.add_object("InvalidArgumentError", py::reinterpret_borrow<py::object>(invalid_argument_error));
  m.def("describe_config",
        [](const py::object& config) {
          Config parsed = ConfigFrom(config);
          ThrowIfError(CheckConfig(parsed));
          return parsed.Describe();
        },
        py::arg("config") = py::none(),
        "Every option with its value, default, FERRY_* variable and help (as `ferry config`); "
        "raises InvalidArgumentError naming a planner, executor or deadline value that a plan or "
        "session would refuse.");
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
