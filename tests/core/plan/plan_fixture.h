// Hand-made plans for tests: a tiny two-rank plan (rank 0 sends 16 bytes of its source buffer to
// rank 1, which unpacks them into its destination buffer), a packed two-rank plan (Pack, Send,
// Recv, Unpack of a matrix's two halves), a same-node message into a block-scaled matrix's bf16
// twin, and a region builder for fp32 matrices.
#pragma once

#include "core/layout/layout.h"
#include "core/plan/plan.h"

namespace ferry {

// A [rows, cols] block of `dtype` at byte `offset_bytes` of a buffer, rows `row_stride` elements
// apart.
inline Region Matrix(DType dtype, Space space, int buffer, int64_t offset_bytes, int64_t rows,
                     int64_t cols, int64_t row_stride) {
  Region r;
  r.space = space;
  r.buffer = buffer;
  r.offset = offset_bytes;
  r.dtype = dtype;
  r.ndim = 2;
  r.shape[0] = rows;
  r.shape[1] = cols;
  r.strides[0] = row_stride;
  r.strides[1] = 1;
  return r;
}

inline Region Fp32Matrix(Space space, int buffer, int64_t offset_bytes, int64_t rows, int64_t cols,
                         int64_t row_stride) {
  return Matrix(DType::kFP32, space, buffer, offset_bytes, rows, cols, row_stride);
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

// Rank 0's source buffer 0 holds a [4, 8] fp32 matrix; rank 1 receives its left and right halves
// (packed one after the other) into destination buffers 0 and 1, unpacking them in reverse order.
// With `delivered` other than fp32 the Pack is a Convert (as the planner narrows on the sender)
// and the message, the staging slots and the destinations hold `delivered`.
inline TransferPlan MakePackedPlan(LinkClass link, DType delivered = DType::kFP32) {
  const int64_t e = DTypeSize(delivered), half = 16 * e;
  TransferPlan plan;
  plan.num_ranks = 2;
  plan.source_buffers = {{0, "w", 4 * 8 * 4}};
  plan.destination_buffers = {{1, "left", half}, {1, "right", half}};
  const int send_slot = plan.AddSlot(0, 2 * half), recv_slot = plan.AddSlot(1, 2 * half);
  auto staged = [delivered](int slot, int64_t offset) {
    return Matrix(delivered, Space::kStaging, slot, offset, 4, 4, 4);
  };
  Op pack;
  pack.kind = delivered == DType::kFP32 ? OpKind::kPack : OpKind::kConvert;
  pack.bytes = 2 * half;
  const int pack_id = plan.AddOp(
      pack, {},
      {{Fp32Matrix(Space::kSource, 0, 0, 4, 4, 8), staged(send_slot, 0)},
       {Fp32Matrix(Space::kSource, 0, 16, 4, 4, 8), staged(send_slot, half)}});
  Op send;
  send.kind = OpKind::kSend;
  send.link = link;
  send.peer = 1;
  send.message = 7;
  send.bytes = 2 * half;
  send.SetData(ByteRange(Space::kStaging, send_slot, 0, 2 * half));
  plan.AddOp(send, {pack_id});
  Op recv;
  recv.kind = OpKind::kRecv;
  recv.link = link;
  recv.rank = 1;
  recv.peer = 0;
  recv.message = 7;
  recv.bytes = 2 * half;
  recv.SetData(ByteRange(Space::kStaging, recv_slot, 0, 2 * half));
  const int recv_id = plan.AddOp(recv);
  Op unpack;
  unpack.kind = OpKind::kUnpack;
  unpack.rank = 1;
  unpack.bytes = 2 * half;
  plan.AddOp(unpack, {recv_id},
             {{staged(recv_slot, half), Matrix(delivered, Space::kDestination, 1, 0, 4, 4, 4)},
              {staged(recv_slot, 0), Matrix(delivered, Space::kDestination, 0, 0, 4, 4, 4)}});
  return plan;
}

// Rank 0's source buffer 0 holds a [rows, cols] bf16 matrix; it sends bytes [offset, offset +
// bytes) of it as message `message` over a same-node link into the same bytes of rank 1's staging
// slot 0, the bf16 twin of the matrix, which a Quantize op turns into destination buffer 0 (fp8
// e4m3) and its float32 scales, buffer 1. Ops: 0 the Send, 1 the Recv, 2 the Quantize.
inline TransferPlan MakeTwinReadPlan(int64_t rows, int64_t cols, int64_t offset, int64_t bytes,
                                     int64_t message) {
  TransferPlan plan;
  plan.num_ranks = 2;
  const int64_t elements = rows * cols;
  plan.source_buffers = {{0, "w", 2 * elements}};
  plan.destination_buffers = {{1, "w_fp8", elements},
                              {1, "w_scale", QuantizeShape{1, rows, cols}.ScaleBytes(Fp8ScaleFormat::kFloat32)}};
  const int twin = plan.AddSlot(1, 2 * elements);
  Op send;
  send.kind = OpKind::kSend;
  send.link = LinkClass::kSameNode;
  send.peer = 1;
  send.message = message;
  send.bytes = bytes;
  send.SetData(ByteRange(Space::kSource, 0, offset, bytes));
  plan.AddOp(send, {});
  Op recv;
  recv.kind = OpKind::kRecv;
  recv.link = LinkClass::kSameNode;
  recv.rank = 1;
  recv.peer = 0;
  recv.message = message;
  recv.bytes = bytes;
  recv.SetData(ByteRange(Space::kStaging, twin, offset, bytes));
  const int recv_id = plan.AddOp(recv, {});
  Op quantize;
  quantize.kind = OpKind::kQuantize;
  quantize.rank = 1;
  quantize.bytes = elements;
  quantize.data = {Space::kDestination, 1, 0};
  plan.AddOp(quantize, {recv_id},
             {{Matrix(DType::kBF16, Space::kStaging, twin, 0, rows, cols, cols),
               Matrix(DType::kFP8E4M3, Space::kDestination, 0, 0, rows, cols, cols)}});
  return plan;
}

}  // namespace ferry
