// TransferPlan: the transport-agnostic DAG the planner emits and the executor runs.
//
// A plan is a list of per-rank ops. Ops on one rank are ordered by their deps (ids of ops on the same
// rank); across ranks, a Send/Forward is matched with the Recv that carries the same `message`.
// Memory is named, never addressed: a Region points into a source-layout buffer, a
// destination-layout buffer, or a staging slot, by index; the executor maps those to real memory
// (host or CUDA) and to transport registrations.
//
//   Copy     rank-local strided copy(s) from source buffers to destination buffers
//   Pack     strided regions of source buffers -> one contiguous staging slot
//   Send     contiguous bytes (a staging slot or a contiguous user region) -> peer
//   Recv     peer -> contiguous bytes (a staging slot or a contiguous destination region)
//   Unpack   one staging slot -> strided regions of destination buffers
//   Convert  like Copy/Unpack, with a dtype change (from.dtype != to.dtype)
//   Forward  relays a received staging slot to the next peer (a Send whose data came by Recv)
//
// Storage is flat: an op's deps and copy pairs are ranges of the plan-wide `dep_list` and
// `copy_list` (read them with Deps(op) and Copies(op)), so a plan of a million ops is a handful of
// allocations rather than two per op.
//
// Plans are plain values; building one is single-threaded, reading one is thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/base/dtype.h"
#include "core/base/status.h"
#include "core/layout/box.h"
#include "core/layout/layout.h"
#include "core/layout/topology.h"

namespace ferry {

enum class OpKind : uint8_t { kCopy, kPack, kSend, kRecv, kUnpack, kConvert, kForward };
std::string_view OpKindName(OpKind kind);  // "copy", "pack", ...

enum class Space : uint8_t {
  kSource,       // Region::buffer indexes TransferPlan::source_buffers
  kDestination,  // Region::buffer indexes TransferPlan::destination_buffers
  kStaging,      // Region::buffer indexes TransferPlan::slots
};
std::string_view SpaceName(Space space);

// A strided block of elements inside one buffer: element i (0 <= i[d] < shape[d]) lives at byte
//   offset + sum_d i[d] * strides[d] * DTypeSize(dtype).
struct Region {
  Space space = Space::kStaging;
  int buffer = 0;
  int64_t offset = 0;  // bytes
  DType dtype = DType::kUInt8;
  int ndim = 1;
  std::array<int64_t, kMaxDims> shape{};
  std::array<int64_t, kMaxDims> strides{};  // elements

  int64_t NumElements() const;
  int64_t NumBytes() const { return NumElements() * DTypeSize(dtype); }
  // True when the elements occupy [offset, offset + NumBytes()) densely in row-major order.
  bool IsContiguous() const;
  // A contiguous 1-D byte region.
  static Region Bytes(Space space, int buffer, int64_t offset, int64_t bytes);
};

struct CopyPair {
  Region from;
  Region to;  // same shape (element count per dim) as `from`
};

// A contiguous scratch buffer on one rank, used by Pack/Send/Recv/Forward/Unpack. The executor
// allocates it when the first op using it starts and frees it after the last one finishes.
struct StagingSlot {
  int rank = 0;
  int64_t bytes = 0;
};

struct Op {
  int id = 0;  // index in TransferPlan::ops
  OpKind kind = OpKind::kCopy;
  int rank = 0;                         // the rank that executes it
  int peer = -1;                        // Send/Recv/Forward: the other rank
  int64_t message = -1;                 // Send/Forward/Recv: pairs a sender with its receiver
  int64_t bytes = 0;                    // payload bytes moved by this op
  LinkClass link = LinkClass::kSameRank;
  int round = 0;                        // scheduling round (lower first)
  // Ops on the same rank that must complete first: TransferPlan::dep_list[deps_begin, deps_end).
  int deps_begin = 0, deps_end = 0;
  // Copy/Pack/Unpack/Convert: TransferPlan::copy_list[copies_begin, copies_end).
  int copies_begin = 0, copies_end = 0;
  Region data;                          // Send/Forward: what is sent; Recv: where it lands

  int NumDeps() const { return deps_end - deps_begin; }
  int NumCopies() const { return copies_end - copies_begin; }
};

struct TransferPlan {
  std::string strategy;  // "reshard" or "gather-broadcast"
  int num_ranks = 0;     // ranks are 0..num_ranks-1
  std::vector<BufferSpec> source_buffers;
  std::vector<BufferSpec> destination_buffers;
  std::vector<StagingSlot> slots;
  std::vector<Op> ops;
  std::vector<int> dep_list;        // every op's deps, each op's a range (Op::deps_begin/end)
  std::vector<CopyPair> copy_list;  // every op's copy pairs, each op's a range

  // An op's deps and copy pairs. The spans stay valid until the lists grow.
  std::span<const int> Deps(const Op& op) const {
    return {dep_list.data() + op.deps_begin, dep_list.data() + op.deps_end};
  }
  std::span<const CopyPair> Copies(const Op& op) const {
    return {copy_list.data() + op.copies_begin, copy_list.data() + op.copies_end};
  }
  std::span<CopyPair> MutableCopies(const Op& op) {
    return {copy_list.data() + op.copies_begin, copy_list.data() + op.copies_end};
  }

  // Appends an op, assigning its id; its dep and copy ranges are taken as set (the caller
  // appended them to dep_list / copy_list).
  int AddOp(Op op);
  // Appends an op with these deps and copy pairs (appended to the lists), assigning its id.
  int AddOp(Op op, const std::vector<int>& deps, const std::vector<CopyPair>& copies = {});
  // Replaces op `id`'s deps or copy pairs (the new ones are appended; the old entries stay in
  // the lists, unreferenced). For tools and tests that edit a plan.
  void SetDeps(int id, const std::vector<int>& deps);
  void SetCopies(int id, const std::vector<CopyPair>& copies);
  // Appends a staging slot on `rank`; returns its index.
  int AddSlot(int rank, int64_t bytes);
  // Op ids executed by `rank`, in plan order (which respects deps).
  std::vector<int> OpsOfRank(int rank) const;
  // (sender op id, receiver op id) for every Send/Forward whose message has a Recv, ordered by
  // message id. A message with several senders or receivers pairs the first of each (ValidatePlan
  // reports that as an error).
  std::vector<std::pair<int, int>> MatchedMessages() const;
};

}  // namespace ferry
