// StoreInterrupt: a latched signal that ends store waits at once. A caller that may have to give
// up a wait early (the Communicator: a peer died, the epoch aborted) hands one to Store::Get and
// Store::WaitAtLeast; firing it makes every such call given it, pending or later, return the
// reason it was fired with, within milliseconds, instead of waiting out its deadline. Unlike
// Store::Close it ends only the calls given this interrupt, and the store stays usable.
//
// Stores learn of the firing through a Listener: a callback registered for the length of one
// wait (InMemoryStore: wakes its condition variable; TcpStoreClient: wakes its poll()).
//
// Thread-safety: Fire, fired and reason may be called from any thread, concurrently with each
// other and with listeners coming and going. Fire runs the listeners' callbacks on its own thread,
// under the interrupt's lock: a callback must be short, must not block on anything that may wait
// for a store call to return, and must not touch this interrupt. A Listener is destroyed only
// after any callback of it in progress has returned.
#pragma once

#include <atomic>
#include <functional>
#include <list>
#include <mutex>

#include "core/base/status.h"

namespace ferry {

class StoreInterrupt {
 public:
  StoreInterrupt() = default;
  StoreInterrupt(const StoreInterrupt&) = delete;
  StoreInterrupt& operator=(const StoreInterrupt&) = delete;

  // Latches `reason` (an OK reason reads as kAborted "store wait interrupted"; the first reason
  // wins) and calls every registered listener once. Idempotent.
  void Fire(const Status& reason);
  // Lock-free.
  bool fired() const { return fired_.load(std::memory_order_acquire); }
  // OK before Fire; afterwards the status a wait it ended returns.
  Status reason() const;

  // Calls `wake` when the interrupt fires while this Listener lives (not when it had already
  // fired: check fired() after registering). `interrupt` may be null (no listener).
  class Listener {
   public:
    Listener(StoreInterrupt* interrupt, std::function<void()> wake);
    ~Listener();
    Listener(const Listener&) = delete;
    Listener& operator=(const Listener&) = delete;

   private:
    StoreInterrupt* interrupt_;
    std::list<std::function<void()>>::iterator entry_;
  };

 private:
  mutable std::mutex mu_;  // guards reason_ and wakes_; held while the callbacks run
  std::atomic<bool> fired_{false};
  Status reason_;
  std::list<std::function<void()>> wakes_;
};

}  // namespace ferry
