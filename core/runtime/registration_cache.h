// RegistrationCache: the transport registrations an executor keeps across runs of one
// communicator epoch (the staging arena's always; user buffers' when
// executor.cache_registrations is on), so that a refit repeated every step does not pin and
// unpin the same memory each time.
//
// Ownership: the cache holds handles, not memory; the caller keeps each block alive while it is
// cached (Release before freeing it). Entries of an older epoch are dropped without
// deregistering: their transports died with that epoch.
// Thread-safety: none; it belongs to the executor thread.
#pragma once

#include <cstdint>
#include <vector>

#include "core/runtime/transport.h"

namespace ferry {

class RegistrationCache {
 public:
  // Forgets every entry (without deregistering) when `epoch` is not the epoch they belong to, and
  // makes `epoch` the current one.
  void SetEpoch(uint64_t epoch);
  uint64_t epoch() const { return epoch_; }

  // The handle registered for exactly (transport, base, bytes), or an invalid handle.
  MemoryHandle Find(const Transport* transport, const void* base, int64_t bytes) const;

  // Remembers a registration made by the caller; the cache deregisters it from now on.
  void Add(Transport* transport, const void* base, int64_t bytes, MemoryHandle handle);

  // Deregisters and forgets every registration of the block at `base`.
  void Release(const void* base);

  // Forgets every entry, deregistering them first when `deregister` (their transports still live).
  void Clear(bool deregister);

 private:
  struct Entry {
    Transport* transport;
    const void* base;
    int64_t bytes;
    MemoryHandle handle;
  };
  std::vector<Entry> entries_;  // valid for epoch_ only
  uint64_t epoch_ = 0;
};

}  // namespace ferry
