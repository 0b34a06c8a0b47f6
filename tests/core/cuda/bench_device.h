// What the GPU kernel benchmarks share besides their launch timing (stream_timing.h): the check
// that there is a device to measure, and the bf16 values they convert and quantize.
// Thread-safety: none; benchmarks call these from their one thread.
#pragma once

#include <cstdint>
#include <cstdio>
#include <vector>

#include "core/cuda/batched_copy.h"

namespace ferry::cuda {

// True, with the device's name printed, when there is a CUDA device; otherwise prints that
// `bench` measured nothing and returns false (the benchmark then exits 0).
inline bool FoundDevice(const char* bench) {
  if (DeviceCount() == 0) {
    std::printf("%s: no CUDA device, nothing measured\n", bench);
    return false;
  }
  std::printf("device: %s\n", DeviceName(0).c_str());
  return true;
}

// `count` finite bf16 values of varied magnitude (sign, exponent 0x70..0x8f, any mantissa) from a
// fixed generator, so that every block of a quantization has its own scale and a cast does real
// work. Read as fp32, consecutive pairs are finite too (their high half is such a bf16).
inline std::vector<uint16_t> VariedBf16(size_t count) {
  std::vector<uint16_t> values(count);
  uint32_t x = 12345;
  for (uint16_t& v : values) {
    x = x * 1664525u + 1013904223u;
    v = static_cast<uint16_t>(((x >> 16) & 0x8000) | ((0x70 + (x >> 27)) << 7) | ((x >> 8) & 0x7f));
  }
  return values;
}

}  // namespace ferry::cuda
