// StoreInterrupt: see store_interrupt.h.
#include "core/runtime/store_interrupt.h"

#include <utility>

namespace ferry {

void StoreInterrupt::Fire(const Status& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  if (fired_.load(std::memory_order_relaxed)) return;
  reason_ = reason.ok() ? Aborted("store wait interrupted") : reason;
  fired_.store(true, std::memory_order_release);
  for (const auto& wake : wakes_) wake();
}

Status StoreInterrupt::reason() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reason_;
}

StoreInterrupt::Listener::Listener(StoreInterrupt* interrupt, std::function<void()> wake)
    : interrupt_(interrupt) {
  if (interrupt_ == nullptr) return;
  std::lock_guard<std::mutex> lock(interrupt_->mu_);
  entry_ = interrupt_->wakes_.insert(interrupt_->wakes_.end(), std::move(wake));
}

StoreInterrupt::Listener::~Listener() {
  if (interrupt_ == nullptr) return;
  std::lock_guard<std::mutex> lock(interrupt_->mu_);
  interrupt_->wakes_.erase(entry_);
}

}  // namespace ferry
