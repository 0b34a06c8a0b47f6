// AbortState: see abort_state.h.
#include "core/runtime/abort_state.h"

#include <utility>

namespace ferry {

AbortState::AbortState(std::string transport) : transport_(std::move(transport)) {}

bool AbortState::Abort(const Status& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  if (aborted_.load(std::memory_order_relaxed)) return false;
  reason_ = reason.ok() ? Aborted("abort requested") : reason;
  aborted_.store(true, std::memory_order_release);
  return true;
}

Status AbortState::status() const {
  if (!aborted()) return Status::Ok();
  std::lock_guard<std::mutex> lock(mu_);
  return Aborted(transport_ + " transport aborted: " + reason_.ToString());
}

bool AbortState::TakeDrain() {
  if (!aborted()) return false;
  return !drained_.exchange(true, std::memory_order_acq_rel);
}

}  // namespace ferry
