// A tiny two-rank plan used by the core/plan tests: rank 0 sends 16 bytes of its source buffer to
// rank 1, which unpacks them into its destination buffer.
#pragma once

#include "core/layout/layout.h"
#include "core/plan/plan.h"

namespace ferry {

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
  send.data = ByteRange(Space::kSource, 0, 0, 16);
  t.send = t.plan.AddOp(send);
  Op recv = send;
  recv.kind = OpKind::kRecv;
  recv.rank = 1;
  recv.peer = 0;
  recv.data = ByteRange(Space::kStaging, slot, 0, 16);
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
