// Store: the small key/value service ranks use to rendezvous — exchange transport endpoint info and
// remote keys, and meet at barriers. The TCP implementation (tcp_store.h) is hosted by rank 0 or by
// a process of its own (`ferry store`, a launcher) and requires a shared token; InMemoryStore serves ranks that live in one process (tests, `local`).
//
// Keys are plain strings; callers namespace them by epoch and transport ("e3/tcp/ep/5") so that a
// recreated communicator never reads values of an older epoch. Values are opaque bytes.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/deadline.h"
#include "core/base/status.h"
#include "core/runtime/store_interrupt.h"

namespace ferry {

using Bytes = std::vector<uint8_t>;

// Contract for every implementation:
// - Thread-safe: any method may be called from any thread concurrently.
// - Blocking: every method returns by `deadline` (kDeadlineExceeded) or when the store fails
//   (kUnavailable: the host died or the connection broke; kAborted: Close() was called).
// - Interruptible: Get and WaitAtLeast given a StoreInterrupt return its reason within
//   milliseconds once it fires (or at once when it already has), and the store stays usable for
//   later calls. A null interrupt: the call is ended only by its deadline, the store or Close().
// - Values are copied in and out; the store owns nothing of the caller's.
class Store {
 public:
  virtual ~Store() = default;

  // Sets `key` to `value`, replacing any previous value. Wakes every Get waiting on `key`.
  virtual Status Set(std::string_view key, std::span<const uint8_t> value, Deadline deadline) = 0;

  // Returns the value of `key`, waiting until some rank sets it, `deadline` passes or `interrupt`
  // fires.
  virtual Result<Bytes> Get(std::string_view key, Deadline deadline, StoreInterrupt* interrupt) = 0;
  Result<Bytes> Get(std::string_view key, Deadline deadline) { return Get(key, deadline, nullptr); }

  // Adds `delta` to the integer counter `key` (created at 0) and returns the new value. Counters
  // and Set/Get values live in separate namespaces.
  virtual Result<int64_t> Add(std::string_view key, int64_t delta, Deadline deadline) = 0;

  // Waits until counter `key` is at least `target`, `deadline` passes or `interrupt` fires.
  virtual Status WaitAtLeast(std::string_view key, int64_t target, Deadline deadline,
                             StoreInterrupt* interrupt) = 0;
  Status WaitAtLeast(std::string_view key, int64_t target, Deadline deadline) {
    return WaitAtLeast(key, target, deadline, nullptr);
  }

  // Makes every pending and future call fail with kAborted promptly. Idempotent; any thread.
  virtual void Close() = 0;

  // A secret every member of this store holds and that never crosses the wire (TcpStoreClient:
  // derived from the token; InMemoryStore: random per store). Ranks key their per-epoch secrets
  // with it, so whoever reads the store's traffic learns none of them. Any thread.
  virtual const std::string& JobSecret() const = 0;
};

// Every rank calls Barrier(store, name, size, deadline) with the same `name` (unique per use, e.g.
// "e2/connected"); it returns when all `size` ranks arrived, or fails at the deadline.
Status Barrier(Store& store, std::string_view name, int size, Deadline deadline);

// The last barrier before processes exit. Like Barrier, and in addition `host_rank` (the rank whose
// process hosts the store; -1 when none does) returns only after every other rank has received
// its answer, so the host exiting cannot cut another rank's barrier short.
Status FinalBarrier(Store& store, std::string_view name, int rank, int size, int host_rank,
                    Deadline deadline);

// A Store in this process's memory, shared by ranks that are threads of one process (tests, the
// `local` transport). Thread-safe. Also the data structure the TCP store host serves.
class InMemoryStore final : public Store {
 public:
  using Store::Get;
  using Store::WaitAtLeast;
  Status Set(std::string_view key, std::span<const uint8_t> value, Deadline deadline) override;
  Result<Bytes> Get(std::string_view key, Deadline deadline, StoreInterrupt* interrupt) override;
  Result<int64_t> Add(std::string_view key, int64_t delta, Deadline deadline) override;
  Status WaitAtLeast(std::string_view key, int64_t target, Deadline deadline,
                     StoreInterrupt* interrupt) override;
  void Close() override;
  const std::string& JobSecret() const override { return secret_; }

 private:
  // Wakes the waiters of changed_ (an interrupt fired); takes mu_.
  void WakeAll();
  const std::string secret_ = RandomSecret();
  static std::string RandomSecret();
  std::mutex mu_;
  std::condition_variable changed_;
  bool closed_ = false;
  std::map<std::string, Bytes, std::less<>> values_;
  std::map<std::string, int64_t, std::less<>> counters_;
};

}  // namespace ferry
