// NcclLibrary: see nccl_library.h.
#include "transports/nccl/nccl_library.h"

#include <dlfcn.h>

namespace ferry {
namespace {

// Resolves `name` from `handle` into `slot`; the error names the symbol and the library.
template <typename Fn>
Status Resolve(void* handle, const std::string& path, const char* name, Fn& slot) {
  void* symbol = dlsym(handle, name);
  if (symbol == nullptr) {
    return Unimplemented("nccl.library '" + path + "' has no " + name +
                         " (not an NCCL library, or older than " +
                         NcclLibrary::VersionName(kMinNcclVersion) + ")");
  }
  slot = reinterpret_cast<Fn>(symbol);
  return Status::Ok();
}

}  // namespace

std::string NcclLibrary::VersionName(int code) {
  // NCCL_VERSION in nccl.h: X*1000+Y*100+Z up to 2.8, X*10000+Y*100+Z from 2.9 on.
  const int major = code >= 10000 ? code / 10000 : code / 1000;
  const int minor = code >= 10000 ? code / 100 % 100 : code / 100 % 10;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(code % 100);
}

Result<std::shared_ptr<const NcclLibrary>> NcclLibrary::Load(const std::string& path) {
  if (path.empty()) return InvalidArgument("nccl.library is empty: name a libnccl.so.2 to load");
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    return Unavailable("nccl.library '" + path + "': cannot load (" +
                       (why != nullptr ? why : "unknown dlopen error") +
                       "); set nccl.library to the libnccl.so.2 of this machine");
  }
  auto library = std::make_shared<NcclLibrary>();
  library->path = path;
  library->handle = handle;
  NcclLibrary& l = *library;
  for (Status s : {Resolve(handle, path, "ncclGetVersion", l.GetVersion),
                   Resolve(handle, path, "ncclGetUniqueId", l.GetUniqueId),
                   Resolve(handle, path, "ncclCommInitRankConfig", l.CommInitRankConfig),
                   Resolve(handle, path, "ncclCommGetAsyncError", l.CommGetAsyncError),
                   Resolve(handle, path, "ncclCommAbort", l.CommAbort),
                   Resolve(handle, path, "ncclGetErrorString", l.GetErrorString),
                   Resolve(handle, path, "ncclGroupStart", l.GroupStart),
                   Resolve(handle, path, "ncclGroupEnd", l.GroupEnd),
                   Resolve(handle, path, "ncclSend", l.Send),
                   Resolve(handle, path, "ncclRecv", l.Recv)}) {
    if (!s.ok()) return s;
  }
  if (ncclResult_t r = l.GetVersion(&l.version); r != ncclSuccess) {
    return Unavailable("nccl.library '" + path + "': " + l.Describe("ncclGetVersion", r));
  }
  if (l.version < kMinNcclVersion) {
    return Unimplemented("nccl.library '" + path + "' has NCCL " + VersionName(l.version) +
                         "; ferry needs " + VersionName(kMinNcclVersion) +
                         " or newer (non-blocking communicators)");
  }
  return std::shared_ptr<const NcclLibrary>(std::move(library));
}

NcclLibrary::~NcclLibrary() {
  if (handle != nullptr) dlclose(handle);
}

std::string NcclLibrary::Describe(const char* what, ncclResult_t result) const {
  const char* text = GetErrorString != nullptr ? GetErrorString(result) : nullptr;
  return std::string(what) + ": " + (text != nullptr ? text : "NCCL error") + " (" +
         std::to_string(static_cast<int>(result)) + ")";
}

}  // namespace ferry
