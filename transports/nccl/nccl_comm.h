// NcclComm: one non-blocking NCCL communicator and the lock that makes aborting it safe from any
// thread. The transport drives it on one thread through Call(); AbortAsync() runs ncclCommAbort
// on a detached thread that shares ownership, so an abort that never returns holds no caller and
// the communicator is simply leaked with it.
//
// Lifetime: shared (std::shared_ptr) between the transport and the abort thread. Thread-safety:
// every method may be called from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>

#include <nccl.h>

#include "core/base/deadline.h"
#include "core/base/status.h"
#include "core/runtime/store.h"
#include "transports/nccl/nccl_library.h"

namespace ferry {

class NcclComm {
 public:
  // What Init needs: who this rank is and where the unique id travels.
  struct Setup {
    int rank = 0;
    int size = 1;
    Store* store = nullptr;
    std::string id_key;  // "e<epoch>/nccl/unique_id"
  };

  explicit NcclComm(std::shared_ptr<const NcclLibrary> library) : library_(std::move(library)) {}

  // Exchanges the unique id through the store (rank 0 creates it) and starts a non-blocking
  // ncclCommInitRankConfig on the current CUDA device, then polls ncclCommGetAsyncError until the
  // communicator is ready. Returns kDeadlineExceeded naming the rank when it is not ready by
  // `deadline` (a rank that never joins, or is stopped), kAborted when AbortAsync ran meanwhile.
  // Blocks at most until `deadline`; call once.
  Status Init(const Setup& setup, Deadline deadline);

  // Runs `call(comm)` under the communicator's lock, unless it was aborted (then kAborted).
  // Only non-blocking NCCL calls belong here.
  template <typename Fn>
  Result<ncclResult_t> Call(Fn&& call) {
    std::lock_guard<std::mutex> lock(mu_);
    if (dead_ || comm_ == nullptr) return Aborted("nccl communicator aborted");
    return call(comm_);
  }

  // The communicator's state: ncclSuccess, ncclInProgress or the error that broke it.
  Result<ncclResult_t> AsyncState();

  // Starts ncclCommAbort on a detached thread, once (later calls do nothing). Returns at once.
  static void AbortAsync(const std::shared_ptr<NcclComm>& comm);
  // Waits up to `deadline` for the abort thread to return from ncclCommAbort; true when it did
  // (or there was nothing to abort).
  bool AwaitAbort(Deadline deadline);

  const NcclLibrary& library() const { return *library_; }

 private:
  Result<ncclUniqueId> ExchangeId(const Setup& setup, Deadline deadline);

  const std::shared_ptr<const NcclLibrary> library_;
  std::mutex mu_;           // held by every NCCL call on comm_ and by the abort thread
  ncclComm_t comm_ = nullptr;  // guarded by mu_
  bool dead_ = false;          // guarded by mu_: ncclCommAbort has started
  std::atomic<bool> abort_started_{false};
  std::mutex done_mu_;
  std::condition_variable done_cv_;
  bool abort_returned_ = false;  // guarded by done_mu_
};

}  // namespace ferry
