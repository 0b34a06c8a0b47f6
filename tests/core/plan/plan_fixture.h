// Hand-made plans for tests: a tiny two-rank plan (rank 0 sends 16 bytes of its source buffer to
// rank 1, which unpacks them into its destination buffer), and a region builder for fp32 matrices.
#pragma once

#include "core/layout/layout.h"
#include "core/plan/plan.h"

namespace ferry {

// A [rows, cols] fp32 block at byte `offset_bytes` of a buffer, rows `row_stride` elements apart.
inline Region Fp32Matrix(Space space, int buffer, int64_t offset_bytes, int64_t rows, int64_t cols,
                         int64_t row_stride) {
  Region r;
  r.space = space;
  r.buffer = buffer;
  r.offset = offset_bytes;
  r.dtype = DType::kFP32;
  r.ndim = 2;
  r.shape[0] = rows;
  r.shape[1] = cols;
  r.strides[0] = row_stride;
  r.strides[1] = 1;
  return r;
}

struct TinyPlan {
  Layout source, destination;
  TransferPlan plan;
  int send = 0, recv = 0, unpack = 0;
};

inline TinyPlan MakeTinyPlan() {
  TinyPlan t;
  int a = t.source.AddTensor({"a", {4}, DType::kFP32}).value();
  t.source.AppendFragment(a, Box::FromShape({4}), 0, "a");
  int b = t.destination.AddTensor({"a", {4}, DType::kFP32}).value();
  t.destination.AppendFragment(b, Box::FromShape({4}), 1, "a");
  t.plan.num_ranks = 2;
  t.plan.source_buffers = t.source.buffers;
  t.plan.destination_buffers = t.destination.buffers;
  int slot = t.plan.AddSlot(1, 16);
  Op send;
  send.kind = OpKind::kSend;
  send.rank = 0;
  send.peer = 1;
  send.message = 0;
  send.bytes = 16;
  send.link = LinkClass::kNetwork;
  send.SetData(ByteRange(Space::kSource, 0, 0, 16));
  t.send = t.plan.AddOp(send);
  Op recv = send;
  recv.kind = OpKind::kRecv;
  recv.rank = 1;
  recv.peer = 0;
  recv.SetData(ByteRange(Space::kStaging, slot, 0, 16));
  t.recv = t.plan.AddOp(recv);
  Op unpack;
  unpack.kind = OpKind::kUnpack;
  unpack.rank = 1;
  unpack.bytes = 16;
  t.unpack = t.plan.AddOp(unpack, {t.recv},
                          {{Region::Bytes(Space::kStaging, slot, 0, 16),
                            Region::Bytes(Space::kDestination, 0, 0, 16)}});
  return t;
}

}  // namespace ferry
