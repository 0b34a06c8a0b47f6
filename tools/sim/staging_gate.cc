// The staging budget in the simulator (see staging_gate.h).
#include "tools/sim/staging_gate.h"

#include <functional>
#include <string>

#include "core/runtime/quantizing_read.h"

namespace ferry::sim {
namespace {

// Rebuilds `r`'s op slots: op `local`'s become what append(local, slots) appends to `slots` (it may
// read the op's old slots, r.SlotsOf(local)).
void RewriteSlots(RankStagingOps& r, const std::function<void(int, std::vector<int>&)>& append) {
  std::vector<int> begin{0}, slots;
  for (size_t local = 0; local < r.ids.size(); ++local) {
    append(static_cast<int>(local), slots);
    begin.push_back(static_cast<int>(slots.size()));
  }
  r.slots_begin = std::move(begin);
  r.slots = std::move(slots);
}

constexpr int kKeep = -1, kNone = -2, kDataSlot = -3;

// By op, how the direct reads stage it: kKeep (its own slots), kNone, kDataSlot (the slot its
// data region names) or the index of the direct read its Recv is.
std::vector<int> ReadStagingOf(const TransferPlan& plan, const std::vector<DirectRead>& direct_reads) {
  std::vector<int> read_of(plan.ops.size(), kKeep);
  for (size_t i = 0; i < direct_reads.size(); ++i) {
    const DirectRead& d = direct_reads[i];
    for (int op : {d.send_op, d.pack_op, d.unpack_op}) {
      if (op >= 0) read_of[static_cast<size_t>(op)] = kNone;
    }
    read_of[static_cast<size_t>(d.recv_op)] = static_cast<int>(i);
    if (!d.packed.empty()) {  // the Pack runs staged; the Send holds its slot until the read
      read_of[static_cast<size_t>(d.pack_op)] = kKeep;
      read_of[static_cast<size_t>(d.send_op)] = kDataSlot;
    }
  }
  return read_of;
}

// Rewrites each rank's op slots for the messages carried as direct reads: none for their Send,
// Pack and Unpack, the Unpack's written slots (to_slots) for their Recv; for a packed one its Pack
// keeps its slots and its Send holds the slot it sends from.
void StageAsDirectReads(const TransferPlan& plan, const std::vector<DirectRead>& direct_reads,
                        std::vector<RankStagingOps>& ranks) {
  if (direct_reads.empty()) return;
  const std::vector<int> read_of = ReadStagingOf(plan, direct_reads);
  for (RankStagingOps& r : ranks) {
    RewriteSlots(r, [&](int local, std::vector<int>& slots) {
      const int id = r.ids[static_cast<size_t>(local)];
      const int how = read_of[static_cast<size_t>(id)];
      if (how == kKeep) {
        const std::span<const int> own = r.SlotsOf(local);
        slots.insert(slots.end(), own.begin(), own.end());
      } else if (how == kDataSlot) {
        slots.push_back(plan.ops[static_cast<size_t>(id)].data.buffer);
      } else if (how >= 0) {
        const std::vector<int>& to = direct_reads[static_cast<size_t>(how)].to_slots;
        slots.insert(slots.end(), to.begin(), to.end());
      }
    });
  }
}

// By slot: the bf16 twins the executor leaves out of staging (core/runtime/rank_run.cc,
// ElideQuantizedTwins): the staging source of a Quantize op whose blocks the quantizing direct
// reads landing in it cover whole, held (once the ops are staged as direct reads) by nothing but
// that op and those reads. Reads that cover every block copy nothing into the twin.
std::vector<char> ElidedTwins(const TransferPlan& plan, const std::vector<DirectRead>& direct_reads,
                              const std::vector<RankStagingOps>& ranks) {
  std::vector<char> quantizing_recv(plan.ops.size(), 0);
  std::vector<std::vector<BlockRect>> blocks(plan.ops.size());  // by Quantize op
  for (const DirectRead& d : direct_reads) {
    if (!d.quantizing.quantizes()) continue;
    quantizing_recv[static_cast<size_t>(d.recv_op)] = 1;
    for (const QuantizingSplit::Rect& r : d.quantizing.rects) blocks[static_cast<size_t>(r.quantize)].push_back(r.blocks);
  }
  std::vector<char> covered(plan.ops.size(), 0), elided(plan.slots.size(), 0);
  for (const Op& op : plan.ops) {
    if (op.kind != OpKind::kQuantize || op.NumCopies() != 1 || blocks[static_cast<size_t>(op.id)].empty()) continue;
    const Region from = plan.Copy(op.copies_begin).from;
    if (from.space != Space::kStaging) continue;
    if (!UnquantizedBlocks(QuantizeShapeOf(from), blocks[static_cast<size_t>(op.id)]).empty()) continue;
    covered[static_cast<size_t>(op.id)] = 1;
    elided[static_cast<size_t>(from.buffer)] = 1;
  }
  for (const RankStagingOps& r : ranks) {
    for (size_t local = 0; local < r.ids.size(); ++local) {
      const size_t id = static_cast<size_t>(r.ids[local]);
      if (covered[id] || quantizing_recv[id]) continue;
      for (int slot : r.SlotsOf(static_cast<int>(local))) elided[static_cast<size_t>(slot)] = 0;
    }
  }
  return elided;
}

// Takes the slots marked in `elided` out of every op's slots.
void DropSlots(const std::vector<char>& elided, std::vector<RankStagingOps>& ranks) {
  for (RankStagingOps& r : ranks) {
    RewriteSlots(r, [&](int local, std::vector<int>& slots) {
      for (int slot : r.SlotsOf(local)) {
        if (!elided[static_cast<size_t>(slot)]) slots.push_back(slot);
      }
    });
  }
}

}  // namespace

Result<StagingGate> StagingGate::Make(const TransferPlan& plan, int64_t budget,
                                      const std::vector<DirectRead>& direct_reads, bool quantizing_reads) {
  StagingGate gate;
  gate.plan_ = &plan;
  gate.local_.assign(plan.ops.size(), -1);
  gate.uses_.assign(plan.slots.size(), 0);
  if (budget <= 0 || plan.slots.empty()) return gate;  // unlimited, or a plan that stages nothing
  FERRY_ASSIGN_OR_RETURN(std::vector<RankStagingOps> ops, StagingOpsByRank(plan));
  StageAsDirectReads(plan, direct_reads, ops);
  if (quantizing_reads) DropSlots(ElidedTwins(plan, direct_reads, ops), ops);
  const auto bytes = [&](int s) { return plan.slots[static_cast<size_t>(s)].bytes; };
  gate.ranks_.resize(ops.size());
  for (size_t rank = 0; rank < ops.size(); ++rank) {
    RankStagingOps& o = ops[rank];
    Rank& r = gate.ranks_[rank];
    int64_t total = 0;
    for (size_t i = 0; i < o.ids.size(); ++i) gate.local_[static_cast<size_t>(o.ids[i])] = static_cast<int>(i);
    for (int s : o.slots) {
      if (gate.uses_[static_cast<size_t>(s)]++ == 0) total += FirstFitAllocator::Granted(bytes(s));
    }
    // Loose (every slot fits at once): the executor never waits either.
    FERRY_ASSIGN_OR_RETURN(std::optional<StagingLayout> layout,
                           ChooseStagingLayout(static_cast<int>(rank), total, budget,
                                               [&] { return LayOutStagingInPlanOrder(o, bytes); }));
    if (!layout) {
      o = {};  // what the gate keeps of a rank is its own; the rest goes as soon as it is read
      continue;
    }
    r.tight = true;
    r.started.assign(o.ids.size(), 0);
    r.ids = std::move(o.ids);
    r.slot_begin = std::move(o.slots_begin);
    r.slot_list = std::move(o.slots);
    r.placement.ResetTight(std::move(*layout), budget);
    o = {};
  }
  return gate;
}

std::span<const int> StagingGate::SlotsOf(const Rank& r, int local) {
  const int first = r.slot_begin[static_cast<size_t>(local)];
  const int last = r.slot_begin[static_cast<size_t>(local) + 1];
  return std::span<const int>(r.slot_list.data() + first, static_cast<size_t>(last - first));
}

int StagingGate::FirstUnstarted(Rank& r) {
  const std::vector<int>& order = r.placement.order();
  while (r.first_unstarted < order.size() && r.started[static_cast<size_t>(order[r.first_unstarted])]) {
    ++r.first_unstarted;
  }
  return r.first_unstarted < order.size() ? order[r.first_unstarted] : -1;
}

// Places op `local`'s slots as the executor would (core/runtime/rank_run.cc, GrantStaging): the
// op first in plan order at its layout offsets, any other first fit unless an earlier waiting op
// could not (`blocked`: no overtaking).
bool StagingGate::TryPlace(Rank& r, int local, bool blocked) {
  const auto bytes = [&](int s) { return plan_->slots[static_cast<size_t>(s)].bytes; };
  const std::span<const int> slots = SlotsOf(r, local);
  bool placed = true;
  for (int s : slots) placed &= r.placement.Placed(s);
  if (!placed) {
    if (FirstUnstarted(r) == local) {
      placed = r.placement.Place(slots, true, bytes);
    } else {
      placed = !blocked && r.placement.Place(slots, false, bytes);
    }
  }
  if (placed) r.started[static_cast<size_t>(local)] = 1;
  return placed;
}

bool StagingGate::Admit(int op) {
  const Op& o = plan_->ops[static_cast<size_t>(op)];
  if (ranks_.empty() || !ranks_[static_cast<size_t>(o.rank)].tight) return true;
  Rank& r = ranks_[static_cast<size_t>(o.rank)];
  const bool blocked = !r.waiting.empty() && *r.waiting.begin() < std::make_pair(o.round, op);
  if (TryPlace(r, local_[static_cast<size_t>(op)], blocked)) return true;
  r.waiting.insert({o.round, op});
  ++waits_;
  return false;
}

void StagingGate::Finish(int op, std::vector<int>& admitted) {
  const Op& o = plan_->ops[static_cast<size_t>(op)];
  if (ranks_.empty() || !ranks_[static_cast<size_t>(o.rank)].tight) return;
  Rank& r = ranks_[static_cast<size_t>(o.rank)];
  const size_t local = static_cast<size_t>(local_[static_cast<size_t>(op)]);
  for (int i = r.slot_begin[local]; i < r.slot_begin[local + 1]; ++i) {
    const int s = r.slot_list[static_cast<size_t>(i)];
    if (--uses_[static_cast<size_t>(s)] == 0) r.placement.Release(s);
  }
  while (!r.waiting.empty()) {  // in (round, id) order until one cannot start: no overtaking
    const int first = r.waiting.begin()->second;
    if (!TryPlace(r, local_[static_cast<size_t>(first)], false)) break;
    admitted.push_back(first);
    r.waiting.erase(r.waiting.begin());
  }
  for (int head = FirstUnstarted(r); head >= 0; head = FirstUnstarted(r)) {  // except the first in plan order
    const int op_id = r.ids[static_cast<size_t>(head)];
    const std::pair<int, int> key(plan_->ops[static_cast<size_t>(op_id)].round, op_id);
    if (r.waiting.count(key) == 0 || !TryPlace(r, head, true)) break;
    admitted.push_back(op_id);
    r.waiting.erase(key);
  }
}

bool StagingGate::Waiting(int op) const {
  const Op& o = plan_->ops[static_cast<size_t>(op)];
  if (ranks_.empty()) return false;
  return ranks_[static_cast<size_t>(o.rank)].waiting.count({o.round, op}) != 0;
}

}  // namespace ferry::sim
