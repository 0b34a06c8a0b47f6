// NcclLibrary: the NCCL entry points ferry uses, resolved by name from a libnccl loaded with dlopen
// at run time, so that one ferry binary runs on the CUDA toolkit's NCCL, the nvidia-nccl-cu13
// wheel's or a cluster's own build (option nccl.library). The types come from the toolkit's nccl.h
// (NCCL's src/nccl.h.in); nothing links libnccl at build time.
//
// Ownership: Load returns a shared handle; the library stays loaded while any handle lives (a
// detached ncclCommAbort keeps one). Thread-safety: the handle is immutable; NCCL's own rules
// apply to the calls.
#pragma once

#include <memory>
#include <string>

#include <nccl.h>

#include "core/base/status.h"

namespace ferry {

// The oldest NCCL with non-blocking communicators: ncclConfig_t, ncclCommInitRankConfig and the
// ncclInProgress state arrived in NCCL 2.14 (NCCL's src/nccl.h.in and its 2.14.3 release notes).
inline constexpr int kMinNcclVersion = 21403;

struct NcclLibrary {
  // Loads `path` (a file name searched like dlopen does, or a path), resolves every entry point
  // below and checks ncclGetVersion against kMinNcclVersion. Errors name the path and what is
  // missing: "nccl.library 'libnccl.so.2': cannot load (...)", "... has NCCL 2.12.12; ferry
  // needs 2.14.3 or newer (non-blocking communicators)".
  static Result<std::shared_ptr<const NcclLibrary>> Load(const std::string& path);
  ~NcclLibrary();

  // "2.28.9" for the NCCL_VERSION_CODE 22809.
  static std::string VersionName(int code);

  std::string path;
  int version = 0;  // ncclGetVersion's code
  void* handle = nullptr;

  decltype(&::ncclGetVersion) GetVersion = nullptr;
  decltype(&::ncclGetUniqueId) GetUniqueId = nullptr;
  decltype(&::ncclCommInitRankConfig) CommInitRankConfig = nullptr;
  decltype(&::ncclCommGetAsyncError) CommGetAsyncError = nullptr;
  decltype(&::ncclCommAbort) CommAbort = nullptr;
  decltype(&::ncclGetErrorString) GetErrorString = nullptr;
  decltype(&::ncclGroupStart) GroupStart = nullptr;
  decltype(&::ncclGroupEnd) GroupEnd = nullptr;
  decltype(&::ncclSend) Send = nullptr;
  decltype(&::ncclRecv) Recv = nullptr;

  // "ncclSend: unhandled cuda error (...)" for a failed call `what`.
  std::string Describe(const char* what, ncclResult_t result) const;
};

}  // namespace ferry
