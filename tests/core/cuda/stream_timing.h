// Timing for the GPU kernel benchmarks: the mean seconds one launch takes on the default stream,
// after 3 warm-up launches, by the host clock around `iterations` launches and one synchronize.
// Thread-safety: none; benchmarks call it from their one thread.
#pragma once

#include <chrono>
#include <cstdio>

#include "core/base/status.h"
#include "core/cuda/batched_copy.h"

namespace ferry::cuda {

// `launch` enqueues one launch and returns its Status; -1 (the error printed) when a launch or the
// synchronize failed.
template <typename Launch>
double TimeSeconds(const Launch& launch, int iterations) {
  for (int i = 0; i < 3; ++i) (void)launch();
  (void)SynchronizeStream(nullptr);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iterations; ++i) {
    const Status s = launch();
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", s.ToString().c_str());
      return -1;
    }
  }
  const Status s = SynchronizeStream(nullptr);
  const auto end = std::chrono::steady_clock::now();
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return -1;
  }
  return std::chrono::duration<double>(end - start).count() / iterations;
}

}  // namespace ferry::cuda
