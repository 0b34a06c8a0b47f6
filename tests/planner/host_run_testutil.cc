// HostRun: see host_run_testutil.h.
#include "tests/planner/host_run_testutil.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>

#include "core/base/fp8_block.h"
#include "core/runtime/strided_copy.h"

namespace ferry::testing {

HostRun::HostRun(const TransferPlan& plan) {
  for (const auto& b : plan.source_buffers) source.emplace_back(b.bytes);
  for (const auto& b : plan.destination_buffers) destination.emplace_back(b.bytes);
  for (const StagingSlot& s : plan.slots) slots.emplace_back(s.bytes);
}

uint8_t* HostRun::At(Space space, int buffer, int64_t offset) {
  auto& list = space == Space::kSource ? source : space == Space::kDestination ? destination : slots;
  return list[static_cast<size_t>(buffer)].data() + offset;
}

void HostRun::Run(const TransferPlan& plan) {
  std::map<int, std::vector<uint8_t>> sent;
  for (const Op& op : plan.ops) {
    if (op.kind == OpKind::kSend || op.kind == OpKind::kForward) {
      const uint8_t* p = At(op.data.space, op.data.buffer, op.data.offset);
      sent[op.message].assign(p, p + op.bytes);
    } else if (op.kind == OpKind::kRecv) {
      ASSERT_EQ(sent.count(op.message), 1u);
      std::memcpy(At(op.data.space, op.data.buffer, op.data.offset), sent[op.message].data(),
                  static_cast<size_t>(op.bytes));
    } else if (op.kind == OpKind::kQuantize) {
      const CopyPair c = plan.Copy(op.copies_begin);
      const QuantizeShape q = QuantizeShapeOf(c.from);
      Fp8BlockQuantizeMatrices(c.from.dtype, At(c.from.space, c.from.buffer, c.from.offset), q.matrices,
                               q.rows, q.cols, At(c.to.space, c.to.buffer, c.to.offset),
                               reinterpret_cast<float*>(At(op.data.space, op.data.buffer, op.data.offset)),
                               op.scale_fmt);
    } else {
      for (const CopyPair& c : plan.Copies(op)) {
        Result<CopyGeometry> g = MakeCopyGeometry(c.from, c.to, c.fn);
        ASSERT_TRUE(g.ok()) << g.status().ToString();
        const char* from = reinterpret_cast<const char*>(At(c.from.space, c.from.buffer, c.from.offset));
        char* to = reinterpret_cast<char*>(At(c.to.space, c.to.buffer, c.to.offset));
        ASSERT_TRUE(RunCopySlice(*g, WholeCopy(*g), from, to).ok());
      }
    }
  }
}

}  // namespace ferry::testing
