// NcclComm: see nccl_comm.h.
#include "transports/nccl/nccl_comm.h"

#include <chrono>
#include <cstring>
#include <thread>

namespace ferry {

Result<ncclUniqueId> NcclComm::ExchangeId(const Setup& setup, Deadline deadline) {
  ncclUniqueId id;
  if (setup.rank == 0) {
    if (ncclResult_t r = library_->GetUniqueId(&id); r != ncclSuccess) {
      return Unavailable("nccl: " + library_->Describe("ncclGetUniqueId", r));
    }
    Bytes value(sizeof(id));
    std::memcpy(value.data(), &id, sizeof(id));
    FERRY_RETURN_IF_ERROR(
        setup.store->Set(setup.id_key, value, deadline).WithContext("nccl: publishing the unique id"));
    return id;
  }
  FERRY_ASSIGN_OR_RETURN(Bytes value, setup.store->Get(setup.id_key, deadline));
  if (value.size() != sizeof(id)) {
    return InvalidArgument("nccl: the unique id under '" + setup.id_key + "' has " +
                           std::to_string(value.size()) + " bytes, NCCL's has " +
                           std::to_string(sizeof(id)));
  }
  std::memcpy(&id, value.data(), sizeof(id));
  return id;
}

Status NcclComm::Init(const Setup& setup, Deadline deadline) {
  if (setup.store == nullptr) return FailedPrecondition("nccl: needs the rendezvous store");
  FERRY_ASSIGN_OR_RETURN(ncclUniqueId id, ExchangeId(setup, deadline));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // every call returns at once; the state comes from ncclCommGetAsyncError
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (dead_) return Aborted("nccl communicator aborted before its init");
    ncclResult_t r = library_->CommInitRankConfig(&comm_, setup.size, id, setup.rank, &config);
    if (r != ncclSuccess && r != ncclInProgress) {
      return Unavailable("nccl: " + library_->Describe("ncclCommInitRankConfig", r) + " on rank " +
                         std::to_string(setup.rank) + " of " + std::to_string(setup.size));
    }
  }
  while (true) {
    FERRY_ASSIGN_OR_RETURN(ncclResult_t state, AsyncState());
    if (state == ncclSuccess) return Status::Ok();
    if (state != ncclInProgress) {
      return Unavailable("nccl: communicator init on rank " + std::to_string(setup.rank) +
                         " failed: " + library_->Describe("ncclCommGetAsyncError", state));
    }
    if (deadline.Expired()) {
      return DeadlineExceeded("nccl: communicator of " + std::to_string(setup.size) +
                              " ranks not ready on rank " + std::to_string(setup.rank) +
                              " by the deadline (a rank that has not joined, or is stopped?)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

Result<ncclResult_t> NcclComm::AsyncState() {
  ncclResult_t state = ncclSuccess;
  FERRY_ASSIGN_OR_RETURN(ncclResult_t r, Call([&](ncclComm_t c) {
                           return library_->CommGetAsyncError(c, &state);
                         }));
  if (r != ncclSuccess) return Unavailable("nccl: " + library_->Describe("ncclCommGetAsyncError", r));
  return state;
}

void NcclComm::AbortAsync(const std::shared_ptr<NcclComm>& comm) {
  if (comm->abort_started_.exchange(true)) return;
  std::thread([comm] {
    {
      std::lock_guard<std::mutex> lock(comm->mu_);
      comm->dead_ = true;
      if (comm->comm_ != nullptr) (void)comm->library_->CommAbort(comm->comm_);
    }
    std::lock_guard<std::mutex> lock(comm->done_mu_);
    comm->abort_returned_ = true;
    comm->done_cv_.notify_all();
  }).detach();
}

bool NcclComm::AwaitAbort(Deadline deadline) {
  if (!abort_started_.load()) return true;
  std::unique_lock<std::mutex> lock(done_mu_);
  return done_cv_.wait_until(lock, deadline.when(), [&] { return abort_returned_; });
}

}  // namespace ferry
