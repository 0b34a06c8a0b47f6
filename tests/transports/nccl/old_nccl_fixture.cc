// A shared library that answers like an NCCL older than ferry supports: it exports the entry points
// NcclLibrary resolves and reports version 2.12.12 from ncclGetVersion. Only ncclGetVersion and
// ncclGetErrorString are ever called (by the version check); the rest exist to be resolved.
#include <nccl.h>

extern "C" {

ncclResult_t ncclGetVersion(int* version) {
  *version = 21212;  // NCCL_VERSION(2, 12, 12)
  return ncclSuccess;
}
const char* ncclGetErrorString(ncclResult_t) { return "fixture error"; }
ncclResult_t ncclGetUniqueId(ncclUniqueId*) { return ncclInvalidUsage; }
ncclResult_t ncclCommInitRankConfig(ncclComm_t*, int, ncclUniqueId, int, ncclConfig_t*) {
  return ncclInvalidUsage;
}
ncclResult_t ncclCommGetAsyncError(ncclComm_t, ncclResult_t*) { return ncclInvalidUsage; }
ncclResult_t ncclCommAbort(ncclComm_t) { return ncclInvalidUsage; }
ncclResult_t ncclGroupStart() { return ncclInvalidUsage; }
ncclResult_t ncclGroupEnd() { return ncclInvalidUsage; }
ncclResult_t ncclSend(const void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) {
  return ncclInvalidUsage;
}
ncclResult_t ncclRecv(void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) {
  return ncclInvalidUsage;
}

}  // extern "C"
