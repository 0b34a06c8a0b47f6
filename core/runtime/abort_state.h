// AbortState: the abort bookkeeping every Transport needs, in one place. It records the first
// reason given to Transport::Abort (later ones are ignored), answers "aborted?" without a lock,
// builds the kAborted status that pending and later calls fail with, and says exactly once when
// the transport should drain its pending requests with that status.
//
// A transport holds one AbortState, calls Abort() from its Abort() (any thread), checks aborted()
// or status() at the top of its calls, and in Poll, on the thread that drives it, runs its drain
// when TakeDrain() returns true.
//
// Thread-safety: every method may be called from any thread, concurrently with the others.
// Nothing blocks beyond a short internal lock.
#pragma once

#include <atomic>
#include <mutex>
#include <string>

#include "core/base/status.h"

namespace ferry {

class AbortState {
 public:
  // `transport` names the transport in the statuses ("tcp" -> "tcp transport aborted: ...").
  explicit AbortState(std::string transport);

  AbortState(const AbortState&) = delete;
  AbortState& operator=(const AbortState&) = delete;

  // Records `reason` (an OK reason reads as "abort requested") and returns true when this call
  // aborted; returns false, changing nothing, when an earlier call already did (first reason wins).
  bool Abort(const Status& reason);

  // Whether Abort has been called. Lock-free.
  bool aborted() const { return aborted_.load(std::memory_order_acquire); }

  // OK before Abort; afterwards kAborted "<transport> transport aborted: <first reason>".
  Status status() const;

  // True exactly once after Abort, to the caller that must now complete every pending request
  // with status(); false before Abort and on every later call.
  bool TakeDrain();

 private:
  const std::string transport_;
  std::atomic<bool> aborted_{false};
  std::atomic<bool> drained_{false};
  mutable std::mutex mu_;
  Status reason_;  // guarded by mu_; set once, before aborted_
};

}  // namespace ferry
