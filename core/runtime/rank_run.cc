// RankRun: see rank_run.h.
#include "core/runtime/rank_run.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "core/base/fp8_block.h"
#include "core/base/strings.h"
#include "core/runtime/staging_memory.h"

namespace ferry {

RankRun::RankRun(const ExecutorResources& resources, const TransferPlan& plan,
                 const RankMemory& memory, Deadline deadline)
    : res_(resources),
      comm_(resources.comm),
      plan_(plan),
      memory_(memory),
      deadline_(deadline),
      rank_(resources.comm.rank()),
      started_(std::chrono::steady_clock::now()),
      offers_(memory.source, resources.comm.rank(), resources.cuda_exports, resources.offer_history),
      ready_sends_(ReadyOrder{&plan_, &ids_}),
      ready_recvs_(ReadyOrder{&plan_, &ids_}),
      ready_local_(ReadyOrder{&plan_, &ids_}) {}

Result<ExecutorStats> RankRun::Execute() {
  const int64_t set_up_began = res_.trace != nullptr ? RunTrace::Now() : 0;
  Status ready = SetUp();
  if (res_.trace != nullptr) {
    res_.trace->Span(RunTrace::Lane::kSetUp, "set-up", set_up_began, RunTrace::Now(),
                     "\"ops\": " + std::to_string(n_));
    op_began_.assign(static_cast<size_t>(n_), 0);
  }
  if (!ready.ok()) {
    // The peers wait for this rank's messages: abort, so that they fail now, naming this rank,
    // instead of at their deadlines.
    comm_.Abort(Status(ready.code(), "rank " + std::to_string(rank_) + " could not start the refit: " +
                                         ready.message()));
    return ready;
  }
  for (int i = 0; i < n_; ++i) {
    if (deps_left_[i] == 0) MakeReady(i);
  }
  items_.resize(n_);
  requests_left_.assign(n_, 0);
  offer_received_.assign(n_, 0);
  control_request_.assign(n_, 0);
  control_bytes_.assign(n_, 0);
  full_offer_.assign(n_, 0);
  ask_pack_.assign(n_, 0);
  gpu_next_.assign(n_, GpuNext::kComplete);
  Drive();
  if (!failure_.ok()) return AbortRun();
  return Finish();
}

// --- set-up -----------------------------------------------------------------------------------

Status RankRun::SetUp() {
  FERRY_RETURN_IF_ERROR(CheckRunnable());
  FERRY_RETURN_IF_ERROR(PrepareGpu());
  ids_ = plan_.OpsOfRank(rank_);
  n_ = static_cast<int>(ids_.size());
  for (int i = 0; i < n_; ++i) local_[ids_[i]] = i;
  FERRY_RETURN_IF_ERROR(AssignDirectRoles());
  FERRY_RETURN_IF_ERROR(BuildDependencies());
  FERRY_RETURN_IF_ERROR(ReserveStaging());
  Status registered = RegisterMemory();
  if (registered.ok()) registered = CountGroupedRounds();
  if (!registered.ok()) ReleaseRunRegistrations();
  return registered;
}

Status RankRun::CheckRunnable() const {
  if (plan_.num_ranks != comm_.size()) {
    return InvalidArgument("plan is for " + std::to_string(plan_.num_ranks) +
                           " ranks, the communicator has " + std::to_string(comm_.size()));
  }
  if (comm_.aborted()) {
    return comm_.abort_reason().WithContext("executor: communicator is aborted; recreate it first");
  }
  return Status::Ok();
}

// Same-node messages carried as one copy by the receiver: which of this rank's ops take part, and
// the control buffer their offers travel in.
Status RankRun::AssignDirectRoles() {
  directs_ = &res_.direct_reads.Find(plan_, rank_, res_.options.direct_intra_node);
  plan_generation_ = res_.direct_reads.generation();
  roles_ = DirectReadRoles::Assign(*directs_, rank_, local_, n_);
  if (static_cast<int64_t>(res_.control.size()) < roles_.control_bytes) {
    res_.control.resize(static_cast<size_t>(roles_.control_bytes));
  }
  const ConvertOnSender choice = res_.options.convert_on_sender;
  if (choice == ConvertOnSender::kNever) return Status::Ok();
  FERRY_ASSIGN_OR_RETURN(bool can_offer, CanOfferSlots());
  if (!can_offer) return Status::Ok();
  for (size_t k = 0; k < directs_->size(); ++k) {
    const DirectRead& d = (*directs_)[k];
    if (d.sender != rank_ || d.packed.empty()) continue;
    const int index = static_cast<int>(k);
    if (choice == ConvertOnSender::kAlways || offers_.PackRequested(plan_generation_, index)) {
      roles_.Pack(*directs_, index, local_);
    }
  }
  return Status::Ok();
}

// Whether this rank's staging slots can be offered for packed reads: its receivers read them as
// they read its buffers, so on a GPU rank the arena must be device memory, which it is when every
// transport its staged messages take moves CUDA memory (staging_memory.h). Every staged message
// counts, not only those StagesOnDevice sees (bounce slots are not known yet), so this may say no
// where the arena turns out device memory, never the reverse; a packed Send is no staged message,
// so the answer does not depend on which messages pack.
Result<bool> RankRun::CanOfferSlots() {
  if (!on_gpu_) return true;
  FERRY_ASSIGN_OR_RETURN(std::vector<StagingTransport> transports, StagedTransports(/*all=*/true));
  return std::all_of(transports.begin(), transports.end(), [](const StagingTransport& t) { return t.cuda_memory; });
}

// Op i's copies as the plan cache keeps them (op_copies.h), analysed on their first use.
Result<const OpCopies*> RankRun::CopiesOf(int i) {
  std::vector<std::unique_ptr<OpCopies>>& cached = res_.direct_reads.op_copies();
  if (cached.size() != static_cast<size_t>(n_)) cached.resize(static_cast<size_t>(n_));
  std::unique_ptr<OpCopies>& entry = cached[static_cast<size_t>(i)];
  if (entry == nullptr) {
    Result<OpCopies> analysed = AnalyseOpCopies(plan_, OpAt(i));
    if (!analysed.ok()) return analysed.status().WithContext(Describe(i));
    entry = std::make_unique<OpCopies>(std::move(*analysed));
    ++stats_.ops_analysed;
  }
  return entry.get();
}

// Counts each op's deps (which must be earlier ops of this rank) and the staging slots it uses
// (which must be this rank's), and checks that every op's slots fit the staging budget together.
Status RankRun::BuildDependencies() {
  deps_left_.assign(n_, 0);
  dependents_.resize(n_);
  slots_of_.resize(n_);
  bounce_of_.assign(n_, -1);
  for (int i = 0; i < n_; ++i) {
    const Op& op = OpAt(i);
    for (int dep : plan_.Deps(op)) {
      auto it = local_.find(dep);
      if (it == local_.end() || it->second >= i) {
        return InvalidArgument("op " + std::to_string(op.id) + " depends on op " +
                               std::to_string(dep) + ", which is not an earlier op of rank " +
                               std::to_string(rank_));
      }
      ++deps_left_[i];
      dependents_[it->second].push_back(i);
    }
    if (roles_.role[i] == DirectRole::kRead) {
      // A direct read lands in no slot of its own, but writes the slots its Unpack wrote.
      slots_of_[i] = (*directs_)[roles_.direct_of[i]].to_slots;
    } else if (roles_.role[i] == DirectRole::kOffer && roles_.packs[roles_.direct_of[i]]) {
      slots_of_[i] = {op.data.buffer};  // the packed message, read by the receiver
    } else if (roles_.role[i] != DirectRole::kStaged) {
      continue;  // the sender's offer and the elided Pack and Unpack use no staging
    } else {
      FERRY_ASSIGN_OR_RETURN(const OpCopies* copies, CopiesOf(i));
      slots_of_[i] = copies->slots;
      if (IsMessageKind(op.kind)) AddStagingSlot(op.Data(), slots_of_[i]);
    }
    for (int slot : slots_of_[i]) {
      if (slot < 0 || slot >= static_cast<int>(plan_.slots.size()) ||
          plan_.slots[slot].rank != rank_) {
        return InvalidArgument(Describe(i) + " uses staging slot " + std::to_string(slot) +
                               " that is not a slot of rank " + std::to_string(rank_));
      }
      ++slot_uses_[slot];
    }
    // A staged message between CUDA memory and a transport that cannot move it goes through a
    // bounce slot; a direct read moves its bytes with a kernel and needs none.
    if (roles_.role[i] == DirectRole::kStaged && IsMessageKind(op.kind) &&
        op.data.space != Space::kStaging && OnGpu(op.Data()) && !MovesCuda(op.peer)) {
      AddBounce(i);
    }
  }
  ElideQuantizedTwins();
  return CheckStagingFits();
}

// A twin of a block-scaled matrix whose every writer is a direct read that will quantize (this
// rank's memory is on the GPU, so its direct reads read CUDA memory: ReadMemoryKind refuses any
// other; and every Quantize op the read quantizes for writes CUDA memory, QueueQuantizingRead's
// condition), none of which copies into it, and whose reads' blocks cover the whole stack, is never
// written or read: it takes no staging (its slot leaves every op's slots), its reads' copies into
// it are bounds-checked but not addressed (ReadTargets::elided), and its Quantize op finds nothing
// left (StartQuantizeRest).
void RankRun::ElideQuantizedTwins() {
  elided_twin_.assign(plan_.slots.size(), 0);
  if (!on_gpu_ || !res_.options.quantizing_reads || directs_ == nullptr) return;
  struct Twin {
    int quantize = -1;  // local index
    bool ok = true;
    std::vector<BlockRect> blocks;
  };
  std::map<int, Twin> twins;  // by slot
  auto writes_gpu = [this](int quantize) {
    const Op& op = plan_.ops[quantize];
    const CopyPair pair = plan_.Copy(op.copies_begin);
    return OnGpu(pair.to) && OnGpu(QuantizeScales(op, pair.from));
  };
  for (int i = 0; i < n_; ++i) {
    const Op& op = OpAt(i);
    if (op.kind == OpKind::kQuantize && op.NumCopies() == 1) {
      const CopyPair pair = plan_.Copy(op.copies_begin);
      if (pair.from.space != Space::kStaging) continue;
      Twin& t = twins[pair.from.buffer];
      t.quantize = i;
      t.ok = t.ok && writes_gpu(op.id);
      continue;
    }
    if (roles_.role[i] != DirectRole::kRead) {
      for (int slot : slots_of_[i]) twins[slot].ok = false;  // written some other way
      continue;
    }
    const DirectRead& d = (*directs_)[roles_.direct_of[i]];
    const bool quantizes = d.quantizing.quantizes() &&
                           std::all_of(d.quantizing.rects.begin(), d.quantizing.rects.end(),
                                       [&](const QuantizingSplit::Rect& r) { return writes_gpu(r.quantize); });
    for (int slot : d.to_slots) twins[slot].ok = twins[slot].ok && quantizes;
    for (const QuantizingSplit::Piece& p : d.quantizing.pieces) {
      const int to_slot = d.reads[static_cast<size_t>(p.copy)].to_slot;
      if (to_slot >= 0) twins[d.to_slots[static_cast<size_t>(to_slot)]].ok = false;
    }
    for (const QuantizingSplit::Rect& r : d.quantizing.rects) {
      twins[plan_.Copy(plan_.ops[r.quantize].copies_begin).from.buffer].blocks.push_back(r.blocks);
    }
  }
  for (auto& [slot, t] : twins) {
    if (!t.ok || t.quantize < 0) continue;
    const QuantizeShape shape = QuantizeShapeOf(plan_.Copy(OpAt(t.quantize).copies_begin).from);
    if (!UnquantizedBlocks(shape, t.blocks).empty()) continue;
    elided_twin_[static_cast<size_t>(slot)] = 1;
    slot_uses_.erase(slot);
  }
  for (std::vector<int>& slots : slots_of_) {
    std::erase_if(slots, [this](int slot) { return ElidedTwin(slot); });
  }
}

// Every op's slots, as the arena grants them (FirstFitAllocator::Granted), must fit the staging
// budget at once (an op gets all its slots or waits). When the run's slots do not all fit the
// budget together, the budget must also hold their plan-order layout (staging_layout.h), which
// the placement then keeps for the op plan order waits for (core/plan/staging_placement.h);
// ranks that post on a grouped transport take space round by round instead, and are checked op
// by op only.
Status RankRun::CheckStagingFits() {
  const int64_t budget = res_.options.staging_budget;
  int64_t total = 0;
  for (const auto& [slot, uses] : slot_uses_) total += FirstFitAllocator::Granted(SlotBytes(slot));
  arena_needed_ = std::min(budget, total);
  tight_layout_.reset();
  for (int i = 0; i < n_; ++i) {
    int64_t need = 0;
    for (int slot : slots_of_[i]) need += FirstFitAllocator::Granted(SlotBytes(slot));
    if (need > budget) {
      return InvalidArgument(Describe(i) + " needs " + FormatBytesExactly(need) +
                             " of staging at once (its slots in 256-byte units), more than "
                             "executor.staging_budget (" + FormatBytesExactly(budget) + ")");
    }
  }
  if (total <= budget) return Status::Ok();
  for (int i = 0; i < n_; ++i) {
    if (!IsMessageKind(OpAt(i).kind)) continue;
    FERRY_ASSIGN_OR_RETURN(Transport * t, comm_.TransportFor(OpAt(i).peer));
    if (t->capabilities().grouped) return Status::Ok();
  }
  FERRY_ASSIGN_OR_RETURN(tight_layout_, ChooseStagingLayout(rank_, total, budget, [this] {
    std::vector<int> round(static_cast<size_t>(n_));
    for (int i = 0; i < n_; ++i) round[static_cast<size_t>(i)] = OpAt(i).round;
    return res_.staging_layouts.LayOut(round, dependents_, slots_of_,
                                       [this](int slot) { return SlotBytes(slot); });
  }));
  return Status::Ok();
}

// Grows the arena when this plan's slots need more than it has (dropping the old block's cached
// registrations first) and resets the allocator over it.
// The arena is device memory when StagesOnDevice, else pinned for runs that touch CUDA memory.
Status RankRun::ReserveStaging() {
  res_.registrations.SetEpoch(comm_.epoch());
  FERRY_ASSIGN_OR_RETURN(device_staging_, StagesOnDevice());
  const bool wrong_kind = device_staging_ ? !res_.arena.on_device()
                                          : res_.arena.on_device() || (on_gpu_ && !res_.arena.pinned());
  if (arena_needed_ > res_.arena.bytes() || wrong_kind) {
    res_.registrations.Release(res_.arena.data());
    const int64_t bytes = std::max(arena_needed_, res_.arena.bytes());
    Status allocated = device_staging_ ? res_.arena.ReallocateOnDevice(bytes, res_.gpu->device())
                                       : res_.arena.Reallocate(bytes, on_gpu_);
    FERRY_RETURN_IF_ERROR(std::move(allocated).WithContext("staging arena"));
  }
  stats_.staging_arena_bytes = res_.arena.bytes();
  if (tight_layout_) {
    placement_.ResetTight(std::move(*tight_layout_), res_.arena.bytes());
  } else {
    // Every slot fits at once (CheckStagingFits): side by side in slot order, at the same offsets
    // in every run. Not so for a grouped transport granted more than the budget round by round:
    // first fit then.
    std::unordered_map<int, int64_t> offsets;
    int64_t next = 0;
    for (const auto& [slot, uses] : slot_uses_) {
      offsets[slot] = next;
      next += FirstFitAllocator::Granted(SlotBytes(slot));
    }
    if (next <= res_.arena.bytes()) {
      placement_.ResetFixed(std::move(offsets));
    } else {
      placement_.ResetLoose(res_.arena.bytes());
    }
  }
  op_started_.assign(static_cast<size_t>(n_), 0);
  first_unstarted_ = 0;
  return Status::Ok();
}

// Whether this rank's staging is device memory: StageOnDevice of the transports its staged
// messages go through (staging_memory.h).
Result<bool> RankRun::StagesOnDevice() {
  if (!on_gpu_) return StageOnDevice(rank_, on_gpu_, {});
  FERRY_ASSIGN_OR_RETURN(std::vector<StagingTransport> transports, StagedTransports(/*all=*/false));
  return StageOnDevice(rank_, on_gpu_, transports);
}

// The transports this rank's staged messages take (repeats kept): of every staged message with
// `all`, else of those sent from or received into staging (a slot, or a bounce slot).
Result<std::vector<StagingTransport>> RankRun::StagedTransports(bool all) {
  std::vector<StagingTransport> transports;
  for (int i = 0; i < n_; ++i) {
    const Op& op = OpAt(i);
    if (!IsMessageKind(op.kind) || roles_.role[i] != DirectRole::kStaged) continue;
    if (!all && op.data.space != Space::kStaging && bounce_of_[i] < 0) continue;
    FERRY_ASSIGN_OR_RETURN(Transport * t, comm_.TransportFor(op.peer));
    const TransportCapabilities caps = t->capabilities();
    transports.push_back({std::string(t->name()), caps.host_memory, caps.cuda_memory});
  }
  return transports;
}

// Registers, with every transport this rank posts on, the memory its network ops send from or
// receive into: the control buffer for direct reads, the arena for staged data, user buffers.
Status RankRun::RegisterMemory() {
  transport_of_.assign(n_, nullptr);
  for (int i = 0; i < n_; ++i) {
    const Op& op = OpAt(i);
    if (!IsMessageKind(op.kind)) continue;
    auto t = comm_.TransportFor(op.peer);
    if (!t.ok()) return t.status().WithContext(Describe(i));
    used_transports_.insert(*t);
    transport_of_[i] = *t;
    Status registered;
    if (roles_.role[i] != DirectRole::kStaged) {
      registered = RegisterBlock(
          *t, {res_.control.data(), static_cast<int64_t>(res_.control.size()), MemoryKind::kHost, -1},
          /*cacheable=*/false);
    } else if (op.data.space == Space::kStaging || bounce_of_[i] >= 0) {
      if (res_.arena.bytes() > 0) {
        const MemoryKind kind = res_.arena.on_device() ? MemoryKind::kCuda : MemoryKind::kHost;
        registered = RegisterBlock(*t, {res_.arena.data(), res_.arena.bytes(), kind, res_.arena.device()},
                                   /*cacheable=*/true);
      }
    } else {
      const auto& table = op.data.space == Space::kSource ? memory_.source : memory_.destination;
      if (op.data.buffer < 0 || op.data.buffer >= static_cast<int>(table.size())) {
        return InvalidArgument(Describe(i) + ": buffer " + std::to_string(op.data.buffer) +
                               " has no memory");
      }
      registered = RegisterBlock(*t, table[op.data.buffer], res_.options.cache_registrations);
    }
    if (!registered.ok()) {
      return std::move(registered).WithContext(Describe(i) + ": registering memory");
    }
  }
  return Status::Ok();
}

// Registers `block` with `transport` once per run, reusing a cached registration; `cacheable`
// ones go to the cache, the others are released at the end of the run.
Status RankRun::RegisterBlock(Transport* transport, const MemoryDesc& block, bool cacheable) {
  void* const base = block.base;
  if (handle_of_.count({transport, base}) != 0) return Status::Ok();
  if (MemoryHandle cached = res_.registrations.Find(transport, base, block.bytes); cached.valid()) {
    handle_of_[{transport, base}] = cached;
    return Status::Ok();
  }
  FERRY_ASSIGN_OR_RETURN(MemoryHandle h, transport->RegisterMemory(block));
  handle_of_[{transport, base}] = h;
  if (cacheable) {
    res_.registrations.Add(transport, base, block.bytes, h);
  } else {
    run_registrations_.push_back({transport, h});
  }
  return Status::Ok();
}

bool RankRun::MovesCuda(int peer) {
  auto t = comm_.TransportFor(peer);
  return t.ok() && (*t)->capabilities().cuda_memory;
}

void RankRun::ReleaseRunRegistrations() {
  for (const RunRegistration& r : run_registrations_) (void)r.transport->DeregisterMemory(r.handle);
}

// --- scheduling -------------------------------------------------------------------------------

void RankRun::MakeReady(int i) {
  const OpKind kind = OpAt(i).kind;
  if (IsMessageKind(kind)) ReadyGrouped(i);
  (kind == OpKind::kRecv ? ready_recvs_ : IsMessageKind(kind) ? ready_sends_ : ready_local_).insert(i);
  ++readied_;
}

// Op i is done: frees the slots no later op uses and readies the ops that waited only for it.
void RankRun::Complete(int i) {
  TraceOp(i);
  ++completed_;
  completed_ids_.push_back(ids_[i]);
  for (int slot : slots_of_[i]) {
    if (--slot_uses_[slot] == 0) placement_.Release(slot);
  }
  for (int d : dependents_[i]) {
    if (--deps_left_[d] == 0) MakeReady(d);
  }
}

// Op i completed: its span from its start (or from the grant of its staging) in the trace.
void RankRun::TraceOp(int i) {
  if (res_.trace == nullptr) return;
  const Op& op = OpAt(i);
  std::string name = std::string(OpKindName(op.kind)) + " op " + std::to_string(op.id);
  if (IsMessageKind(op.kind)) name += (op.kind == OpKind::kRecv ? " from rank " : " to rank ") + std::to_string(op.peer);
  static constexpr const char* kRoles[] = {"staged", "elided by a direct read", "direct-read offer",
                                           "direct read"};
  res_.trace->Span(IsMessageKind(op.kind) ? RunTrace::Lane::kNetwork : RunTrace::Lane::kCopy, std::move(name),
                   op_began_[static_cast<size_t>(i)], RunTrace::Now(),
                   "\"bytes\": " + std::to_string(op.bytes) + ", \"path\": \"" +
                       kRoles[static_cast<int>(roles_.role[i])] + "\"");
}

// Starts ready ops in (round, id) order: receives and sends first (posting receives early keeps
// messages from arriving unexpected; sends up to executor.max_in_flight), then local copies.
// Staging is granted in that order too: once one op cannot get its slots, later ones needing slots
// wait (no overtaking), except the op first in plan order, which has its own place (GrantStaging).
Status RankRun::StartReady() {
  int64_t seen_readied = -1, seen_completed = -1;
  // Inline completions may ready more ops or free staging an op of this scan waited for: scan again.
  while (seen_readied != readied_ || seen_completed != completed_) {
    seen_readied = readied_;
    seen_completed = completed_;
    staging_blocked_ = false;
    FERRY_RETURN_IF_ERROR(StartGroupedRounds());
    FERRY_RETURN_IF_ERROR(StartReadyNetwork());
    for (auto it = ready_local_.begin(); it != ready_local_.end();) {
      int i = *it;
      it = ready_local_.erase(it);
      FERRY_ASSIGN_OR_RETURN(bool started, TryStart(i));
      if (!started) {
        ready_local_.insert(i);
        it = ready_local_.upper_bound(i);
      } else if (readied_ != seen_readied) {
        break;  // an inline copy readied ops (maybe earlier ones): rescan from the start
      }
    }
  }
  return Status::Ok();
}

Status RankRun::StartReadyNetwork() {
  const ReadyOrder before = ready_recvs_.key_comp();
  auto s = ready_sends_.begin();
  auto r = ready_recvs_.begin();
  while (true) {
    const bool sends_open = s != ready_sends_.end() && sends_in_flight_ < res_.options.max_in_flight;
    if (!sends_open && r == ready_recvs_.end()) return Status::Ok();
    const bool send = sends_open && (r == ready_recvs_.end() || before(*s, *r));
    std::set<int, ReadyOrder>& ready = send ? ready_sends_ : ready_recvs_;
    auto& it = send ? s : r;
    const int i = *it;
    if (Grouped(i)) {  // posted a whole round at a time, by StartGroupedRounds
      ++it;
      continue;
    }
    FERRY_ASSIGN_OR_RETURN(bool started, TryStart(i));
    it = started ? ready.erase(it) : std::next(it);
  }
}

bool RankRun::HoldsWindowSlot(int i) const {
  const OpKind kind = OpAt(i).kind;
  return IsSenderKind(kind);
}

// Starts op i if its staging slots can be granted; false when it must wait for space.
Result<bool> RankRun::TryStart(int i) {
  if (res_.trace != nullptr) op_began_[static_cast<size_t>(i)] = RunTrace::Now();
  if (roles_.role[i] == DirectRole::kElided) {  // a Pack or Unpack a direct read makes unnecessary
    op_started_[static_cast<size_t>(i)] = 1;
    Complete(i);
    return true;
  }
  if (!GrantStaging(i)) return false;
  op_started_[static_cast<size_t>(i)] = 1;
  const Op& op = OpAt(i);
  Status started = IsMessageKind(op.kind) ? StartNetwork(i) : StartCopy(i);
  if (!started.ok()) return started.WithContext(Describe(i));
  return true;
}

// Whether op i is the first op in plan order not started yet (tight placement only).
bool RankRun::FirstUnstarted(int i) {
  const std::vector<int>& order = placement_.order();
  while (first_unstarted_ < order.size() && op_started_[static_cast<size_t>(order[first_unstarted_])]) {
    ++first_unstarted_;
  }
  return first_unstarted_ < order.size() && order[first_unstarted_] == i;
}

// Allocates op i's slots that are not allocated yet, all or none: the first op in plan order not
// yet started at its plan-order offsets, any other first fit. Fails when there is no room now; a
// first-fit failure blocks later ops of this scan that need space (no overtaking).
bool RankRun::GrantStaging(int i) {
  const auto bytes = [this](int slot) { return SlotBytes(slot); };
  bool needs_space = false;
  for (int slot : slots_of_[i]) needs_space |= !placement_.Placed(slot);
  if (!needs_space) return true;
  if (placement_.tight() && FirstUnstarted(i)) {
    if (!placement_.Place(slots_of_[i], true, bytes)) return false;
  } else if (staging_blocked_ || AheadOfGroupedRounds(i)) {
    return false;
  } else if (!placement_.Place(slots_of_[i], false, bytes)) {
    staging_blocked_ = true;
    return false;
  }
  stats_.peak_staging_bytes = std::max(stats_.peak_staging_bytes, placement_.in_use());
  return true;
}

// A Copy, Pack, Unpack or Convert: its pairs' geometries and addresses, then the copies.
Status RankRun::StartCopy(int i) {
  const Op& op = OpAt(i);
  if (op.kind == OpKind::kQuantize) return StartQuantize(i);
  FERRY_ASSIGN_OR_RETURN(const OpCopies* copies, CopiesOf(i));
  std::vector<CopyEnds> ends;
  ends.reserve(copies->geometries.size());
  bool gpu = false, pageable = false;
  for (size_t c = 0; c < copies->geometries.size(); ++c) {
    const RegionPlace& from = copies->from[c];
    const RegionPlace& to = copies->to[c];
    FERRY_ASSIGN_OR_RETURN(char* from_at, AddressOf(from.space, from.buffer, from.offset, from.bytes));
    FERRY_ASSIGN_OR_RETURN(char* to_at, AddressOf(to.space, to.buffer, to.offset, to.bytes));
    ends.push_back({from_at, to_at, 0});
    const bool from_gpu = OnGpu(from.space, from.buffer), to_gpu = OnGpu(to.space, to.buffer);
    gpu |= from_gpu || to_gpu ||
           (device_staging_ && (from.space == Space::kStaging || to.space == Space::kStaging));
    pageable |= (from.space != Space::kStaging && !from_gpu) || (to.space != Space::kStaging && !to_gpu);
  }
  if (gpu) {
    if (pageable) {
      return Unimplemented("a copy between CUDA memory and pageable host memory (register host "
                           "buffers of a CUDA refit as CUDA or staging)");
    }
    stats_.bytes_copied += copies->bytes;
    return LaunchGpu(i, copies->geometries, ends, GpuNext::kComplete);
  }
  FERRY_ASSIGN_OR_RETURN(bool done, DispatchCopies(i, copies->geometries, ends, copies->bytes));
  if (done) Complete(i);
  return Status::Ok();
}

// What Quantize op `id` reads and writes, checked as StartQuantize needs it.
Result<RankRun::QuantizeTargets> RankRun::QuantizeTargetsOf(int id) const {
  const Op& op = plan_.ops[id];
  if (op.NumCopies() != 1) return InvalidArgument("a quantize op has one copy pair");
  const CopyPair pair = plan_.Copy(op.copies_begin);
  QuantizeTargets t;
  t.shape = QuantizeShapeOf(pair.from);
  const ByteRange scales = QuantizeScales(op, pair.from);
  if (t.shape.matrices < 1 || !pair.from.IsContiguous() || !pair.to.IsContiguous() ||
      pair.to.dtype != DType::kFP8E4M3 || pair.to.NumElements() != pair.from.NumElements()) {
    return InvalidArgument("a quantize op reads and writes dense matrices of one shape, into fp8_e4m3");
  }
  char* from = nullptr;  // an elided twin has no memory (ElideQuantizedTwins)
  if (pair.from.space != Space::kStaging || !ElidedTwin(pair.from.buffer)) {
    FERRY_ASSIGN_OR_RETURN(from, BaseOf(pair.from));
  }
  FERRY_ASSIGN_OR_RETURN(char* to, BaseOf(pair.to));
  FERRY_ASSIGN_OR_RETURN(char* scale_base, BaseOf(scales));
  if (reinterpret_cast<uintptr_t>(scale_base) % 4 != 0) {  // fp32 scales or packed int32 words
    return InvalidArgument("quantize scales not 4-byte aligned");
  }
  t.from = from;
  t.rect = {from, t.shape.cols * DTypeSize(pair.from.dtype), to, scale_base, pair.from.dtype,
            op.scale_fmt, t.shape.rows, t.shape.cols, 0, 0,
            (t.shape.rows + kFp8BlockSize - 1) / kFp8BlockSize, 0,
            (t.shape.cols + kFp8BlockSize - 1) / kFp8BlockSize};
  t.values_on_gpu = OnGpu(pair.to);
  t.scales_on_gpu = OnGpu(scales);
  return t;
}

// A Quantize: the block-scaled fp8 of its one matrix stack (core/base/fp8_block.h), on host
// memory as ranges of blocks on the copy pool (CopyPool::StartQuantize; one block inline), as one
// kernel (core/cuda/block_quantize.h) when a side lies in CUDA memory; only the blocks no
// quantizing read did (StartQuantizeRest).
Status RankRun::StartQuantize(int i) {
  const Op& op = OpAt(i);
  FERRY_ASSIGN_OR_RETURN(const QuantizeTargets t, QuantizeTargetsOf(op.id));
  const CopyPair pair = plan_.Copy(op.copies_begin);
  if (auto quantized = quantized_blocks_.find(op.id); quantized != quantized_blocks_.end()) {
    const std::vector<BlockRect> blocks = std::move(quantized->second);
    quantized_blocks_.erase(quantized);
    return StartQuantizeRest(i, t, blocks);
  }
  if (t.from == nullptr) {
    return Internal("the elided twin of " + Describe(i) + " was not quantized by its direct reads");
  }
  stats_.bytes_copied += pair.from.NumBytes();
  const bool staging_on_gpu = device_staging_ && pair.from.space == Space::kStaging;
  if (t.values_on_gpu || t.scales_on_gpu || OnGpu(pair.from) || staging_on_gpu) {
    if (!t.values_on_gpu || !t.scales_on_gpu) {
      return Unimplemented("a quantize op between CUDA memory and pageable host memory");
    }
    return QueueQuantize(i, {t.from, t.rect.dst, t.rect.scales, t.rect.src_dtype, t.shape.matrices,
                             t.shape.rows, t.shape.cols, op.scale_fmt});
  }
  if (pair.from.dtype != DType::kBF16 && pair.from.dtype != DType::kFP16 &&
      pair.from.dtype != DType::kFP32) {
    return InvalidArgument("no block quantization from " + std::string(DTypeName(pair.from.dtype)));
  }
  QuantizeWork& work = quantize_work_[i];
  work = {pair.from.dtype, reinterpret_cast<const unsigned char*>(t.from), t.shape.matrices,
          t.shape.rows, t.shape.cols, static_cast<unsigned char*>(t.rect.dst),
          static_cast<unsigned char*>(t.rect.scales), op.scale_fmt};
  if (res_.pool.StartQuantize(i, work, items_[i])) {
    Complete(i);
  } else {
    ++copies_running_;
  }
  return Status::Ok();
}

// A Quantize some of whose blocks direct reads already quantized (`quantized`): the rest, read
// from its twin, queued for FlushGpuWork, or nothing when none is left.
Status RankRun::StartQuantizeRest(int i, const QuantizeTargets& t, const std::vector<BlockRect>& quantized) {
  std::vector<cuda::BlockQuantizeRect> rects;
  const int64_t pitch = t.rect.src_pitch, elem = DTypeSize(t.rect.src_dtype);
  for (const BlockRect& blocks : UnquantizedBlocks(t.shape, quantized)) {
    const int64_t row = blocks.block_row * kFp8BlockSize, col = blocks.block_col * kFp8BlockSize;
    rects.push_back(t.RectOf(blocks, t.from + (blocks.matrix * t.shape.rows + row) * pitch + col * elem, pitch));
    stats_.bytes_copied += ElementsOf(blocks, t.shape) * elem;
  }
  if (rects.empty()) {
    Complete(i);
    return Status::Ok();
  }
  rects_queued_.insert(rects_queued_.end(), rects.begin(), rects.end());
  gpu_queued_.push_back(i);
  gpu_next_[i] = GpuNext::kComplete;
  return Status::Ok();
}

// Runs op i's copies inline or on the pool (CopyPool::Start); true when they already ran.
// `geometries` must outlive the op (the plan cache's OpCopies or DirectRead).
Result<bool> RankRun::DispatchCopies(int i, std::span<const CopyGeometry> geometries,
                                     std::span<const CopyEnds> ends, int64_t bytes) {
  stats_.bytes_copied += bytes;
  FERRY_ASSIGN_OR_RETURN(bool done, res_.pool.Start(i, geometries, ends, bytes, items_[i]));
  if (!done) ++copies_running_;
  return done;
}

// A staged Send, Forward or Recv: one post of its bytes; direct reads start their exchange.
Status RankRun::StartNetwork(int i) {
  if (roles_.role[i] == DirectRole::kOffer) return StartOffer(i);
  if (roles_.role[i] == DirectRole::kRead) return StartRead(i);
  if (bounce_of_[i] >= 0) return StartBounced(i);
  const Op& op = OpAt(i);
  FERRY_ASSIGN_OR_RETURN(char* at, BaseOf(op.Data()));
  const std::vector<MemoryDesc>& table =
      op.data.space == Space::kSource ? memory_.source : memory_.destination;
  const void* block = op.data.space == Space::kStaging ? static_cast<const void*>(res_.arena.data())
                                                       : table[op.data.buffer].base;
  return PostData(i, at, block);
}

// Posts op i's send or receive of its op.bytes at `at`, inside the registered `block`.
Status RankRun::PostData(int i, char* at, const void* block) {
  const Op& op = OpAt(i);
  FERRY_ASSIGN_OR_RETURN(Transport * t, comm_.TransportFor(op.peer));
  LocalBuffer buffer{handle_of_.at({t, block}), at - static_cast<const char*>(block), op.bytes};
  const uint64_t tag = comm_.Tag(op.message);
  Result<RequestId> id = op.kind == OpKind::kRecv ? t->PostRecv(op.peer, tag, buffer)
                                                  : t->PostSend(op.peer, tag, buffer);
  if (!id.ok()) return id.status();
  Track(i, t, *id);
  return Status::Ok();
}

// Request `request` on `transport` belongs to op i until it completes.
void RankRun::Track(int i, Transport* transport, RequestId request) {
  request_op_[{transport, request}] = i;
  ++pending_per_transport_[transport];
  ++in_flight_;
  if (HoldsWindowSlot(i)) ++sends_in_flight_;
}

// --- direct reads -----------------------------------------------------------------------------

// Posts a control message of op i's direct read: `bytes` at `offset` of the control buffer; a
// receive whose size matters is `remember`ed (control_request_).
Status RankRun::PostControl(int i, bool send, uint64_t tag, int64_t offset, int64_t bytes,
                            bool remember) {
  const Op& op = OpAt(i);
  FERRY_ASSIGN_OR_RETURN(Transport * t, comm_.TransportFor(op.peer));
  LocalBuffer buffer{handle_of_.at({t, res_.control.data()}), offset, bytes};
  Result<RequestId> id =
      send ? t->PostSend(op.peer, tag, buffer) : t->PostRecv(op.peer, tag, buffer);
  if (!id.ok()) return id.status();
  Track(i, t, *id);
  ++requests_left_[i];
  if (remember) {
    control_request_[i] = *id;
    control_bytes_[i] = 0;
  }
  return Status::Ok();
}

// Where direct read k's answer lies in the control buffer: just past its offer.
int64_t RankRun::AnswerOffset(int k) const {
  return roles_.control_offset[k] + LargestOfferBytes((*directs_)[k]);
}

// Sender: offer the source buffers the message reads (abbreviated when the receiver holds the
// offer from an earlier run, unless `full`), and wait for the receiver's answer.
Status RankRun::StartOffer(int i, bool full) {
  const int k = roles_.direct_of[i];
  const DirectRead& d = (*directs_)[k];
  const int64_t offset = roles_.control_offset[k];
  const bool packs = roles_.packs[k];
  std::optional<MemoryDesc> slot;
  if (packs) slot = SlotMemory(OpAt(i).data.buffer);
  FERRY_ASSIGN_OR_RETURN(int64_t offer_bytes,
                         offers_.Write(plan_generation_, k, d, full,
                                       std::span<uint8_t>(res_.control).subspan(static_cast<size_t>(offset)),
                                       slot ? &*slot : nullptr, res_.arena.serial()));
  full_offer_[i] = offer_bytes != AbbreviatedOfferBytes();
  stats_.packed_offers_sent += packs;
  stats_.offer_bytes_sent += offer_bytes;
  stats_.full_offers_sent += full_offer_[i];
  const int64_t message = OpAt(i).message;
  FERRY_RETURN_IF_ERROR(PostControl(i, false, comm_.AckTag(message), AnswerOffset(k), kAnswerBytes,
                                    /*remember=*/true));
  return PostControl(i, true, comm_.Tag(message), offset, offer_bytes);
}

// Sender, offer out and answer in: *done* completes the Send; a request for the full offer sends
// it, once.
Status RankRun::OnAnswer(int i) {
  const int k = roles_.direct_of[i];
  if (control_bytes_[i] == kFullOfferAnswer) {
    if (full_offer_[i]) {
      return FailedPrecondition("rank " + std::to_string((*directs_)[k].receiver) +
                                " asked for the full direct-read offer after receiving it");
    }
    return StartOffer(i, /*full=*/true);
  }
  if (control_bytes_[i] != 0 && control_bytes_[i] != kPackAnswer) {
    return InvalidArgument("rank " + std::to_string((*directs_)[k].receiver) + " answered a direct-read offer with " +
                           std::to_string(control_bytes_[i]) + " bytes");
  }
  offers_.Acknowledged(plan_generation_, k, roles_.packs[k], control_bytes_[i] == kPackAnswer);
  Complete(i);
  return Status::Ok();
}

// Receiver: wait for the offer.
Status RankRun::StartRead(int i) {
  const int k = roles_.direct_of[i];
  const DirectRead& d = (*directs_)[k];
  return PostControl(i, false, comm_.Tag(d.message), roles_.control_offset[k], LargestOfferBytes(d),
                     /*remember=*/true);
}

// Receiver, offer in hand: one copy per pair, from the sender's memory (mapped when it is shared,
// else read through process_vm_readv) into this rank's destination buffers; the copies of an
// abbreviated offer come from the history (offer_history.h).
Status RankRun::CopyRead(int i) {
  const int k = roles_.direct_of[i];
  const DirectRead& d = (*directs_)[k];
  if (res_.trace != nullptr) {
    res_.trace->Instant(RunTrace::Lane::kNetwork, "offer from rank " + std::to_string(d.sender), RunTrace::Now(),
                        "\"bytes\": " + std::to_string(control_bytes_[i]));
  }
  const auto offer = std::span<const uint8_t>(res_.control).subspan(
      static_cast<size_t>(roles_.control_offset[k]), static_cast<size_t>(control_bytes_[i]));
  PeerMemory peers{res_.peer_mappings, res_.peer_cuda, comm_.peer_processes()};
  const int64_t take_began = res_.trace != nullptr ? RunTrace::Now() : 0;
  FERRY_ASSIGN_OR_RETURN(const OfferHistory::Taken* taken,
                         TakeOffer(plan_generation_, k, d, offer, memory_.destination, rank_,
                                   peers, res_.offer_history, SlotTargets(d), ElidedSlots(d)));
  if (res_.trace != nullptr) {
    res_.trace->Span(RunTrace::Lane::kSetUp, "take offer of rank " + std::to_string(d.sender), take_began,
                     RunTrace::Now(), "\"peer CUDA mappings\": " + std::to_string(res_.peer_cuda.size()));
  }
  if (taken == nullptr) return AskForFullOffer(i);
  ask_pack_[i] = AsksToPack(d, *taken);
  return CopyTaken(i, taken->header.packed ? d.packed.front() : d, *taken);
}

// Receiver, an offer taken: the copies of `read`, the message's read or, for a packed offer, its
// packed read (which writes no twins and so quantizes nothing: FindDirectReads gives messages
// into twins none).
Status RankRun::CopyTaken(int i, const DirectRead& read, const OfferHistory::Taken& taken) {
  const bool packed = taken.header.packed;
  const int64_t bytes = taken.bytes;
  stats_.bytes_read_direct += bytes;
  stats_.packed_reads += packed;
  stats_.bytes_read_packed += packed ? bytes : 0;
  TransportTraffic& path = stats_.by_transport[std::string(kDirectReadPath)];
  path.bytes_received += bytes;
  ++path.messages_received;
  if (taken.on_gpu) {
    if (read.quantizing.quantizes() && res_.options.quantizing_reads) {
      FERRY_ASSIGN_OR_RETURN(bool queued, QueueQuantizingRead(i, read, taken.ends));
      if (queued) return Status::Ok();
    }
    if (Elides(read)) return Internal(Describe(i) + " writes an elided twin but did not quantize");
    stats_.bytes_copied += bytes;
    return QueueGpuRead(i, HistoryIndex(roles_.direct_of[i], packed), read.geometries, taken.ends);
  }
  if (Elides(read)) return Internal(Describe(i) + " writes an elided twin from host memory");
  FERRY_ASSIGN_OR_RETURN(bool done, DispatchCopies(i, read.geometries, taken.ends, bytes));
  return done ? FinishRead(i) : Status::Ok();
}

// Staging slot `slot` of this rank where it is placed for this run (null base when it is not).
MemoryDesc RankRun::SlotMemory(int slot) const {
  const int64_t offset = placement_.OffsetOf(slot);
  MemoryDesc m;
  m.base = offset < 0 ? nullptr : res_.arena.data() + offset;
  m.bytes = SlotBytes(slot);
  m.kind = res_.arena.on_device() ? MemoryKind::kCuda : MemoryKind::kHost;
  m.device = res_.arena.device();
  return m;
}

// The memory of the staging slots direct read `d` writes, where they are placed for this run
// (GrantStaging placed them when the Recv started). On a GPU rank they are device-accessible:
// device staging, or pinned host memory mapped into the device's address space
// (cuda::PinnedAlloc), which the read's kernel writes as the pack kernel does.
std::vector<MemoryDesc> RankRun::SlotTargets(const DirectRead& d) const {
  std::vector<MemoryDesc> slots;
  slots.reserve(d.to_slots.size());
  for (int slot : d.to_slots) {
    MemoryDesc m = SlotMemory(slot);
    m.kind = on_gpu_ ? MemoryKind::kCuda : MemoryKind::kHost;
    m.device = on_gpu_ ? res_.gpu->device() : -1;
    slots.push_back(m);
  }
  return slots;
}

// By d.to_slots index, whether this rank elided that twin (ElideQuantizedTwins).
std::vector<char> RankRun::ElidedSlots(const DirectRead& d) const {
  std::vector<char> elided;
  elided.reserve(d.to_slots.size());
  for (int slot : d.to_slots) elided.push_back(ElidedTwin(slot));
  return elided;
}

bool RankRun::Elides(const DirectRead& d) const {
  return std::any_of(d.to_slots.begin(), d.to_slots.end(), [this](int slot) { return ElidedTwin(slot); });
}

// Receiver, an abbreviated offer of nothing this rank holds (it is new, or forgot): answer with
// the request for the full offer, and wait for it.
Status RankRun::AskForFullOffer(int i) {
  const int k = roles_.direct_of[i];
  const DirectRead& d = (*directs_)[k];
  if (full_offer_[i]) {
    return FailedPrecondition("rank " + std::to_string(d.sender) +
                              " sent an abbreviated direct-read offer again after this rank asked "
                              "for the full one");
  }
  full_offer_[i] = 1;
  offer_received_[i] = 0;
  res_.control[static_cast<size_t>(AnswerOffset(k))] = 1;
  FERRY_RETURN_IF_ERROR(PostControl(i, true, comm_.AckTag(d.message), AnswerOffset(k), kFullOfferAnswer));
  return PostControl(i, false, comm_.Tag(d.message), roles_.control_offset[k], LargestOfferBytes(d),
                     /*remember=*/true);
}

// Receiver, copies done: the sender's verified process is still alive (so the pid the copies
// read through was still its), then tell the sender its buffers are free.
Status RankRun::FinishRead(int i) {
  const int k = roles_.direct_of[i];
  FERRY_RETURN_IF_ERROR(comm_.peer_processes()->CheckAlive((*directs_)[k].sender));
  return PostControl(i, true, comm_.AckTag((*directs_)[k].message), AnswerOffset(k), ask_pack_[i] ? kPackAnswer : 0);
}

// --- progress ---------------------------------------------------------------------------------

// Starts what is ready, then waits for copies and transports, until every op completed or the
// first failure (left in failure_).
void RankRun::Drive() {
  while (completed_ < n_ && failure_.ok()) {
    failure_ = StartReady();
    if (failure_.ok()) failure_ = FlushGpuWork();
    if (!failure_.ok() || completed_ == n_) break;
    if (in_flight_ == 0 && copies_running_ == 0 && gpu_ops_.empty()) {
      failure_ = Internal("executor stalled on rank " + std::to_string(rank_) + " with " +
                          std::to_string(n_ - completed_) +
                          " ops left: the staging budget cannot hold the next op's slots");
      break;
    }
    if (comm_.aborted()) {
      failure_ = comm_.abort_reason().WithContext("communicator aborted during the run");
      break;
    }
    PollCopies();
    if (!failure_.ok()) break;
    PollGpu();
    if (!failure_.ok()) break;
    PollTransports();
    if (failure_.ok()) failure_ = FlushGpuWork();
    if (failure_.ok() && deadline_.Expired() && completed_ < n_) failure_ = DeadlineFailure();
  }
}

// Helps with the copies rather than spin (all of them while no message is in flight, else one
// task of ~512 KiB between two polls), then collects the ops whose copies finished, waiting a
// little for one when there is nothing to help with.
void RankRun::PollCopies() {
  bool helped = false;
  if (in_flight_ == 0) {
    while (res_.pool.RunOne()) {
    }
  } else {
    helped = res_.pool.RunOne();
  }
  auto wait = std::chrono::microseconds(in_flight_ == 0 ? 2000 : (helped ? 0 : 100));
  if (copies_running_ == 0) wait = std::chrono::microseconds(0);
  for (auto& [i, status] : res_.pool.Done(wait)) {
    OnCopiesDone(i, status);
  }
}

void RankRun::OnCopiesDone(int i, const Status& status) {
  --copies_running_;
  if (!status.ok() && failure_.ok()) failure_ = status.WithContext(Describe(i));
  if (roles_.role[i] == DirectRole::kRead) {
    if (failure_.ok()) {
      Status done = FinishRead(i);
      if (!done.ok()) failure_ = done.WithContext(Describe(i));
    }
    return;
  }
  Complete(i);
}

// Network progress on every transport with requests pending: block briefly only when no copy
// can finish meanwhile and only one transport is busy.
void RankRun::PollTransports() {
  int busy_transports = 0;
  for (auto& [t, count] : pending_per_transport_) busy_transports += count > 0;
  for (auto& [t, count] : pending_per_transport_) {
    if (count == 0) continue;
    Deadline poll_deadline = (copies_running_ > 0 || !gpu_ops_.empty() || busy_transports > 1)
                                 ? Deadline::After(std::chrono::nanoseconds(0))
                                 : Deadline::After(std::chrono::milliseconds(20)).Min(deadline_);
    PollTransport(t, count, poll_deadline);
    if (!failure_.ok()) break;
  }
}

void RankRun::PollTransport(Transport* transport, int& pending, Deadline poll_deadline) {
  auto got = transport->Poll(completions_, poll_deadline);
  if (!got.ok()) {
    failure_ = got.status().WithContext(std::string(transport->name()) + " transport on rank " +
                                        std::to_string(rank_));
    return;
  }
  for (int c = 0; c < *got; ++c) {
    auto it = request_op_.find({transport, completions_[c].request});
    if (it == request_op_.end()) continue;
    int i = it->second;
    request_op_.erase(it);
    --pending;
    --in_flight_;
    if (HoldsWindowSlot(i)) --sends_in_flight_;
    OnRequestDone(i, completions_[c]);
  }
}

// A request of op i completed: a staged op completes with it; a direct read's op when its last
// control request did (the receiver's offer arriving starts its copies first).
void RankRun::OnRequestDone(int i, const Completion& completion) {
  if (!completion.status.ok()) {
    if (failure_.ok()) failure_ = completion.status.WithContext(Describe(i));
    return;
  }
  const DirectRole role = roles_.role[i];
  if (role != DirectRole::kStaged) {
    if (completion.request == control_request_[i]) control_bytes_[i] = completion.bytes;
    if (--requests_left_[i] > 0) return;
    Status next;
    if (role == DirectRole::kRead && !offer_received_[i]) {
      offer_received_[i] = 1;
      next = CheckOfferSize((*directs_)[roles_.direct_of[i]], control_bytes_[i]);
      if (next.ok()) next = CopyRead(i);
    } else if (role == DirectRole::kOffer) {
      next = OnAnswer(i);
    } else {
      Complete(i);
    }
    if (!next.ok() && failure_.ok()) failure_ = next.WithContext(Describe(i));
    return;
  }
  const Op& op = OpAt(i);
  if (op.kind == OpKind::kRecv) {
    if (completion.bytes != op.bytes) {
      failure_ = OutOfRange(Describe(i) + ": received " + std::to_string(completion.bytes) +
                            " bytes, expected " + std::to_string(op.bytes));
      return;
    }
    stats_.bytes_received += completion.bytes;
    TransportTraffic& traffic = stats_.by_transport[comm_.TransportNameFor(op.peer)];
    traffic.bytes_received += completion.bytes;
    ++traffic.messages_received;
    if (bounce_of_[i] >= 0) {
      Status in = BounceIn(i);
      if (!in.ok() && failure_.ok()) failure_ = in.WithContext(Describe(i));
      return;
    }
  } else {
    stats_.bytes_sent += op.bytes;
    int64_t& by_link =
        op.link == LinkClass::kNetwork ? stats_.bytes_sent_network : stats_.bytes_sent_intra_node;
    by_link += op.bytes;
    TransportTraffic& traffic = stats_.by_transport[comm_.TransportNameFor(op.peer)];
    traffic.bytes_sent += op.bytes;
    ++traffic.messages_sent;
  }
  Complete(i);
}

Status RankRun::DeadlineFailure() const {
  std::string pending;
  int shown = 0;
  for (auto& [key, i] : request_op_) {
    if (shown++ == 3) break;
    pending += (pending.empty() ? "" : "; ") + Describe(i);
  }
  return DeadlineExceeded("rank " + std::to_string(rank_) + ": refit deadline passed with " +
                          std::to_string(n_ - completed_) + " of " + std::to_string(n_) +
                          " ops unfinished" + (pending.empty() ? "" : ", waiting for " + pending));
}

// --- the end ----------------------------------------------------------------------------------

Result<ExecutorStats> RankRun::Finish() {
  ReleaseRunRegistrations();
  res_.peer_mappings.Sweep();
  res_.peer_cuda.Sweep();
  if (!res_.options.cache_registrations) res_.cuda_exports.Clear();
  stats_.peer_cuda_mappings = static_cast<int>(res_.peer_cuda.size());
  stats_.ops = n_;
  stats_.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  return stats_;
}

// Fails fast everywhere: aborting the communicator closes our links, so peers fail at once
// instead of waiting out their deadlines. Then collects what the transports and the copy pool
// still report, so that nothing of this run outlives it, and returns the failure.
void RankRun::AwaitCause() {
  const StatusCode code = failure_.code();
  if (code != StatusCode::kUnavailable && code != StatusCode::kAborted &&
      code != StatusCode::kIoError) {
    return;
  }
  auto heartbeat = comm_.config().GetSeconds("deadline.heartbeat");
  const Deadline wait = Deadline::AfterSeconds(3 * (heartbeat.ok() ? *heartbeat : 0.1));
  while (!comm_.aborted() && !wait.Expired()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (!comm_.aborted()) return;
  const std::string cause = comm_.abort_reason().message();
  if (failure_.message().find(cause) != std::string::npos) return;  // already says it
  failure_ = Status(code, failure_.message() + "; cause: " + cause);
}

Status RankRun::AbortRun() {
  AwaitCause();
  comm_.Abort(failure_);
  for (Transport* t : used_transports_) {
    for (int i = 0; i < 4; ++i) {
      auto got = t->Poll(completions_, Deadline::After(std::chrono::nanoseconds(0)));
      if (!got.ok() || *got == 0) break;
    }
  }
  res_.pool.Drain();
  (void)res_.pool.Done(std::chrono::microseconds(0));
  DrainGpu();
  ReleaseRunRegistrations();
  return failure_;
}

// --- helpers ----------------------------------------------------------------------------------

std::string RankRun::Describe(int i) const {
  const Op& op = OpAt(i);
  std::string text = "op " + std::to_string(op.id) + " (" + std::string(OpKindName(op.kind));
  if (IsSenderKind(op.kind)) {
    text += " of message " + std::to_string(op.message) + " to peer " + std::to_string(op.peer) +
            " over " + comm_.TransportNameFor(op.peer);
  } else if (op.kind == OpKind::kRecv) {
    text += " of message " + std::to_string(op.message) + " from peer " + std::to_string(op.peer) +
            " over " + comm_.TransportNameFor(op.peer);
  }
  return text + ", " + FormatBytes(static_cast<double>(op.bytes)) + ")";
}

Result<char*> RankRun::BaseOf(const Region& r) const {
  return AddressOf(r.space, r.buffer, r.offset, r.NumBytes());
}

Result<char*> RankRun::AddressOf(Space space, int buffer, int64_t offset, int64_t bytes) const {
  if (space == Space::kStaging) {
    const int64_t slot_offset = placement_.OffsetOf(buffer);
    if (slot_offset < 0) return Internal("staging slot used before allocation");
    if (offset < 0 || offset + bytes > SlotBytes(buffer)) {
      return OutOfRange("region outside staging slot " + std::to_string(buffer));
    }
    return res_.arena.data() + slot_offset + offset;
  }
  const std::vector<MemoryDesc>& table = space == Space::kSource ? memory_.source : memory_.destination;
  if (buffer < 0 || buffer >= static_cast<int>(table.size()) || table[buffer].base == nullptr) {
    return InvalidArgument(std::string(SpaceName(space)) + " buffer " + std::to_string(buffer) +
                           " has no memory on rank " + std::to_string(rank_));
  }
  return static_cast<char*>(table[buffer].base) + offset;
}

}  // namespace ferry
