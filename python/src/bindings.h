// The compiled module ferry._ferry: the pieces each binding file contributes, and the helpers they
// share (ferry errors as Python exceptions, a Config from what Python passes). Every class here
// wraps the library facade (core/refit, core/layout, tools/models); none reimplements it.
//
// GIL: bindings hold the GIL except where a call can block on other processes or compute for long
// (joining a session, gathering, planning, running a refit, recreating, finishing), which release
// it for the duration and touch no Python object meanwhile.
#pragma once

#include <pybind11/pybind11.h>

#include <string>

#include "core/base/config.h"
#include "core/base/status.h"

namespace ferry::python {

// Raises ferry.FerryError carrying the status's code and message when `status` is not OK.
void ThrowIfError(const Status& status);
template <typename T>
T Unwrap(Result<T> result) {
  ThrowIfError(result.status());
  return std::move(result).value();
}

// ferry's whole configuration (core/refit/config.h), then `source` over it: None (defaults),
// a str (a YAML file), or a dict (option name -> value, as --set). FERRY_* variables are applied
// after a file and before a dict, the CLI's order (defaults, file, environment, --set).
Config ConfigFrom(const pybind11::object& source);

void BindErrors(pybind11::module_& m);
void BindLayout(pybind11::module_& m);
void BindMemory(pybind11::module_& m);
void BindPlan(pybind11::module_& m);
void BindSession(pybind11::module_& m);

}  // namespace ferry::python
