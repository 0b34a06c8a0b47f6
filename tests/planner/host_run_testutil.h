// Test helper for the planner: HostRun, a plain interpreter of a TransferPlan on host byte arrays
// (one per source buffer, destination buffer and staging slot), running the ops in op order: a
// Send's or Forward's bytes wait by message for their Recv, copies and conversions (with their
// pairs' element functions) run through core/runtime/strided_copy, and a Quantize op runs the CPU
// reference (core/base/fp8_block.h).
// Failures are gtest assertion failures of the calling test.
#pragma once

#include <cstdint>
#include <vector>

#include "core/plan/plan.h"

namespace ferry::testing {

struct HostRun {
  std::vector<std::vector<uint8_t>> source, destination, slots;

  // Zeroed buffers and slots of the sizes `plan` gives.
  explicit HostRun(const TransferPlan& plan);
  uint8_t* At(Space space, int buffer, int64_t offset);
  // Runs every op of `plan` (the plan the buffers were sized for).
  void Run(const TransferPlan& plan);
};

}  // namespace ferry::testing
