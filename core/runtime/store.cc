// InMemoryStore and the store Barrier.
#include "core/runtime/store.h"

#include "core/base/hmac.h"

#include <string>

namespace ferry {

namespace {

// Waits on `cv` until `ready()` or the deadline; the lock is held on return.
template <typename Ready>
bool WaitUntil(std::condition_variable& cv, std::unique_lock<std::mutex>& lock, Deadline deadline,
               Ready ready) {
  if (deadline.when() == Deadline::Clock::time_point::max()) {
    cv.wait(lock, ready);
    return true;
  }
  return cv.wait_until(lock, deadline.when(), ready);
}

bool Fired(const StoreInterrupt* interrupt) { return interrupt != nullptr && interrupt->fired(); }

}  // namespace

std::string InMemoryStore::RandomSecret() {
  const std::array<uint8_t, 16> nonce = RandomNonce();
  return std::string(nonce.begin(), nonce.end());
}

Status InMemoryStore::Set(std::string_view key, std::span<const uint8_t> value, Deadline) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return Aborted("store closed");
    values_[std::string(key)] = Bytes(value.begin(), value.end());
  }
  changed_.notify_all();
  return Status::Ok();
}

void InMemoryStore::WakeAll() {
  { std::lock_guard<std::mutex> lock(mu_); }  // a waiter between its check and its wait has it
  changed_.notify_all();
}

Result<Bytes> InMemoryStore::Get(std::string_view key, Deadline deadline, StoreInterrupt* interrupt) {
  // Registered before mu_ is taken: the interrupt's lock comes before mu_ (Fire wakes us).
  StoreInterrupt::Listener listener(interrupt, [this] { WakeAll(); });
  std::unique_lock<std::mutex> lock(mu_);
  auto set = [&] { return values_.find(key) != values_.end(); };
  bool ready = WaitUntil(changed_, lock, deadline,
                         [&] { return closed_ || set() || Fired(interrupt); });
  if (closed_) return Aborted("store closed while waiting for key '" + std::string(key) + "'");
  if (set()) return values_.find(key)->second;
  lock.unlock();
  if (ready) return interrupt->reason();
  return DeadlineExceeded("store key '" + std::string(key) + "' was never set");
}

Result<int64_t> InMemoryStore::Add(std::string_view key, int64_t delta, Deadline) {
  int64_t value = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return Aborted("store closed");
    auto it = counters_.find(key);
    if (it == counters_.end()) it = counters_.emplace(std::string(key), 0).first;
    it->second += delta;
    value = it->second;
  }
  changed_.notify_all();
  return value;
}

Status InMemoryStore::WaitAtLeast(std::string_view key, int64_t target, Deadline deadline,
                                  StoreInterrupt* interrupt) {
  StoreInterrupt::Listener listener(interrupt, [this] { WakeAll(); });
  std::unique_lock<std::mutex> lock(mu_);
  auto value = [&]() -> int64_t {
    auto it = counters_.find(key);
    return it == counters_.end() ? 0 : it->second;
  };
  auto reached = [&] {
    auto it = counters_.find(key);
    return it != counters_.end() && it->second >= target;
  };
  bool ready = WaitUntil(changed_, lock, deadline,
                         [&] { return closed_ || reached() || Fired(interrupt); });
  if (closed_) return Aborted("store closed while waiting for counter '" + std::string(key) + "'");
  if (reached()) return Status::Ok();
  const int64_t now = value();
  lock.unlock();
  if (ready) return interrupt->reason();
  return DeadlineExceeded("store counter '" + std::string(key) + "' reached " + std::to_string(now) +
                          " of " + std::to_string(target));
}

void InMemoryStore::Close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
  }
  changed_.notify_all();
}

Status Barrier(Store& store, std::string_view name, int size, Deadline deadline) {
  std::string key = "barrier/" + std::string(name);
  auto arrived = store.Add(key, 1, deadline);
  if (!arrived.ok()) return arrived.status().WithContext("barrier '" + std::string(name) + "'");
  Status status = store.WaitAtLeast(key, size, deadline);
  if (!status.ok()) return std::move(status).WithContext("barrier '" + std::string(name) + "'");
  return Status::Ok();
}

Status FinalBarrier(Store& store, std::string_view name, int rank, int size, int host_rank,
                    Deadline deadline) {
  FERRY_RETURN_IF_ERROR(Barrier(store, name, size, deadline));
  std::string left = "final/" + std::string(name);
  if (rank != host_rank) {
    // Only our Add must reach the host; its answer may be cut short by the host exiting.
    (void)store.Add(left, 1, deadline);
    return Status::Ok();
  }
  // Alone, the host has nobody to wait for (and no Add ever creates the counter).
  if (size == 1) return Status::Ok();
  return store.WaitAtLeast(left, size - 1, deadline).WithContext("final barrier '" + std::string(name) + "'");
}

}  // namespace ferry
