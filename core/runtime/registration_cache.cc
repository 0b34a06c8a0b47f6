// RegistrationCache: see registration_cache.h.
#include "core/runtime/registration_cache.h"

namespace ferry {

void RegistrationCache::SetEpoch(uint64_t epoch) {
  if (epoch == epoch_) return;
  entries_.clear();  // those transports are gone, and their registrations with them
  epoch_ = epoch;
}

MemoryHandle RegistrationCache::Find(const Transport* transport, const void* base,
                                     int64_t bytes) const {
  for (const Entry& e : entries_) {
    if (e.transport == transport && e.base == base && e.bytes == bytes) return e.handle;
  }
  return MemoryHandle{};
}

void RegistrationCache::Add(Transport* transport, const void* base, int64_t bytes,
                            MemoryHandle handle) {
  entries_.push_back({transport, base, bytes, handle});
}

void RegistrationCache::Release(const void* base) {
  std::erase_if(entries_, [&](const Entry& e) {
    if (e.base != base) return false;
    (void)e.transport->DeregisterMemory(e.handle);
    return true;
  });
}

void RegistrationCache::Clear(bool deregister) {
  if (deregister) {
    for (const Entry& e : entries_) (void)e.transport->DeregisterMemory(e.handle);
  }
  entries_.clear();
}

}  // namespace ferry
