// ParallelFor: runs independent work items of `ferry run`'s pattern fill and check on a few threads
// of their own, each thread taking the next item, for sizes where one thread takes minutes (33 GiB
// of sources to fill, 17 GiB of fp8 to check).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <thread>
#include <vector>

namespace ferry::cli {

// Calls body(i) once for every i in [0, n), on up to min(n, max_threads, the machine's hardware
// threads) threads (the caller's among them); returns when every call has returned. Calls may run
// concurrently and in any order: `body` must only touch what item i owns. Blocks.
template <typename Body>
void ParallelFor(size_t n, size_t max_threads, Body&& body) {
  const size_t hardware = std::max<size_t>(1, std::thread::hardware_concurrency());
  const size_t threads = std::min({n, max_threads, hardware});
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < n; i = next++) body(i);
  };
  std::vector<std::thread> pool;
  for (size_t k = 1; k < threads; ++k) pool.emplace_back(work);
  work();
  for (std::thread& thread : pool) thread.join();
}

}  // namespace ferry::cli
