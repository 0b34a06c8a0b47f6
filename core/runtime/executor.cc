// Executor: dependency scheduling, the copy pool, the staging arena and transport progress.
#include "core/runtime/executor.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>

#include "core/base/strings.h"
#include "core/runtime/direct_read.h"
#include "core/runtime/peer_memory.h"
#include "core/runtime/strided_copy.h"

namespace ferry {

namespace {

// One piece of copy work: a slice of one copy.
struct CopyItem {
  const CopyGeometry* geometry;
  CopySlice slice;
  const char* from;
  char* to;
  int64_t remote_pid = 0;  // non-zero: `from` is an address in that process (process_vm_readv)
};

Status RunCopyItem(const CopyItem& item) {
  return item.remote_pid != 0 ? ReadFromPeer(item.remote_pid, *item.geometry, item.slice,
                                             reinterpret_cast<uint64_t>(item.from), item.to)
                              : RunCopySlice(*item.geometry, item.slice, item.from, item.to);
}

int64_t ItemBytes(const CopyItem& item) {
  const CopySlice& s = item.slice;
  if (s.row_begin == s.row_end) return s.byte_end - s.byte_begin;
  return (s.row_end - s.row_begin) * item.geometry->run * DTypeSize(item.geometry->to_dtype);
}

}  // namespace

// Worker threads running copy tasks (runs of consecutive items of one op, ~512 KiB each, so that
// thousands of small copies cost a few lock round trips, not one each). Each submitted op has a
// counter of tasks left; when it reaches zero the op id is reported through Done().
class Executor::CopyPool {
 public:
  struct Slice {
    const CopyItem* items;
    int count;
    int op;
  };

  explicit CopyPool(int threads) {
    for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { Work(); });
  }
  ~CopyPool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    work_cv_.notify_all();
    for (auto& t : workers_) t.join();
  }
  int threads() const { return static_cast<int>(workers_.size()); }

  void Submit(int op, std::vector<Slice> slices) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      remaining_[op] = static_cast<int>(slices.size());
      for (Slice& s : slices) queue_.push_back(s);
    }
    work_cv_.notify_all();
  }

  // Ops whose slices all finished, with the first failure per op. Waits up to `wait` for one.
  std::vector<std::pair<int, Status>> Done(std::chrono::microseconds wait) {
    std::unique_lock<std::mutex> lock(mu_);
    if (done_.empty() && wait.count() > 0) done_cv_.wait_for(lock, wait, [&] { return !done_.empty(); });
    std::vector<std::pair<int, Status>> out(done_.begin(), done_.end());
    done_.clear();
    return out;
  }

  // Runs one queued slice on the calling thread (the executor helps instead of idling). Returns
  // false when the queue is empty.
  bool RunOne() {
    std::unique_lock<std::mutex> lock(mu_);
    if (queue_.empty()) return false;
    RunFrontLocked(lock);
    return true;
  }

  // Blocks until every submitted slice has run (used before returning from a failed Run).
  void Drain() {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] { return queue_.empty() && running_ == 0; });
  }

 private:
  void Work() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      work_cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      RunFrontLocked(lock);
    }
  }

  void RunFrontLocked(std::unique_lock<std::mutex>& lock) {
    {
      Slice s = queue_.front();
      queue_.pop_front();
      ++running_;
      lock.unlock();
      Status status;
      for (int k = 0; k < s.count && status.ok(); ++k) status = RunCopyItem(s.items[k]);
      lock.lock();
      --running_;
      auto& failure = failures_[s.op];
      if (!status.ok() && failure.ok()) failure = status;
      if (--remaining_[s.op] == 0) {
        done_.emplace_back(s.op, failure);
        remaining_.erase(s.op);
        failures_.erase(s.op);
      }
      if (!done_.empty() || (queue_.empty() && running_ == 0)) done_cv_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::deque<Slice> queue_;
  std::unordered_map<int, int> remaining_;
  std::unordered_map<int, Status> failures_;
  std::vector<std::pair<int, Status>> done_;
  int running_ = 0;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

namespace {

constexpr int64_t kSliceBytes = 512 << 10;  // copy work per task
constexpr int64_t kInlineBytes = 64 << 10;  // smaller copies run on the executor thread

// First-fit allocator over [0, capacity) of the staging arena.
class ArenaAllocator {
 public:
  explicit ArenaAllocator(int64_t capacity) { free_[0] = capacity; }
  // Returns the offset, or -1 when no free block is large enough.
  int64_t Allocate(int64_t bytes) {
    bytes = std::max<int64_t>((bytes + 255) & ~int64_t{255}, 256);
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->second < bytes) continue;
      int64_t offset = it->first, size = it->second;
      free_.erase(it);
      if (size > bytes) free_[offset + bytes] = size - bytes;
      used_[offset] = bytes;
      in_use_ += bytes;
      return offset;
    }
    return -1;
  }
  void Free(int64_t offset) {
    int64_t bytes = used_.at(offset);
    used_.erase(offset);
    in_use_ -= bytes;
    auto it = free_.emplace(offset, bytes).first;
    auto next = std::next(it);
    if (next != free_.end() && it->first + it->second == next->first) {
      it->second += next->second;
      free_.erase(next);
    }
    if (it != free_.begin()) {
      auto prev = std::prev(it);
      if (prev->first + prev->second == it->first) {
        prev->second += it->second;
        free_.erase(it);
      }
    }
  }
  int64_t in_use() const { return in_use_; }

 private:
  std::map<int64_t, int64_t> free_;
  std::unordered_map<int64_t, int64_t> used_;
  int64_t in_use_ = 0;
};

void AddSlotRefs(const Region& r, std::vector<int>& slots) {
  if (r.space == Space::kStaging &&
      std::find(slots.begin(), slots.end(), r.buffer) == slots.end()) {
    slots.push_back(r.buffer);
  }
}

std::string Describe(const Op& op, const Communicator& comm) {
  std::string text = "op " + std::to_string(op.id) + " (" + std::string(OpKindName(op.kind));
  if (op.kind == OpKind::kSend || op.kind == OpKind::kForward) {
    text += " of message " + std::to_string(op.message) + " to peer " + std::to_string(op.peer) +
            " over " + comm.TransportNameFor(op.peer);
  } else if (op.kind == OpKind::kRecv) {
    text += " of message " + std::to_string(op.message) + " from peer " + std::to_string(op.peer) +
            " over " + comm.TransportNameFor(op.peer);
  }
  return text + ", " + FormatBytes(static_cast<double>(op.bytes)) + ")";
}

bool IsNetwork(OpKind kind) {
  return kind == OpKind::kSend || kind == OpKind::kForward || kind == OpKind::kRecv;
}

}  // namespace

Result<std::unique_ptr<Executor>> Executor::Create(Communicator& comm) {
  FERRY_ASSIGN_OR_RETURN(ExecutorOptions options, ExecutorOptions::FromConfig(comm.config()));
  return Create(comm, options);
}

Result<std::unique_ptr<Executor>> Executor::Create(Communicator& comm, const ExecutorOptions& options) {
  int threads = options.copy_threads;
  if (threads <= 0) threads = std::clamp<int>(static_cast<int>(std::thread::hardware_concurrency()), 1, 8);
  if (options.staging_budget <= 0) return InvalidArgument("executor.staging_budget must be positive");
  if (options.max_in_flight <= 0) return InvalidArgument("executor.max_in_flight must be positive");
  return std::unique_ptr<Executor>(new Executor(comm, threads, options.staging_budget, options.max_in_flight,
                                                options.cache_registrations, options.direct_intra_node));
}

Executor::Executor(Communicator& comm, int threads, int64_t budget, int max_in_flight,
                   bool cache_registrations, bool direct_intra_node)
    : comm_(comm),
      cache_user_registrations_(cache_registrations),
      direct_intra_node_(direct_intra_node),
      staging_budget_(budget),
      max_in_flight_(max_in_flight),
      pool_(std::make_unique<CopyPool>(threads - 1)) {}  // the executor thread copies too

Executor::~Executor() { ForgetRegistrations(); }

void Executor::ForgetRegistrations() {
  if (comm_.epoch() == cache_epoch_ && !comm_.aborted()) {
    for (const CachedRegistration& c : registration_cache_) (void)c.transport->DeregisterMemory(c.handle);
  }
  registration_cache_.clear();
  peer_mappings_.Clear();
}

Result<ExecutorStats> Executor::Run(const TransferPlan& plan, const RankMemory& memory,
                                    Deadline deadline) {
  const auto started = std::chrono::steady_clock::now();
  const int rank = comm_.rank();
  ExecutorStats stats;
  if (plan.num_ranks != comm_.size()) {
    return InvalidArgument("plan is for " + std::to_string(plan.num_ranks) +
                           " ranks, the communicator has " + std::to_string(comm_.size()));
  }
  if (comm_.aborted()) {
    return comm_.abort_reason().WithContext("executor: communicator is aborted; recreate it first");
  }
  const std::vector<int> ids = plan.OpsOfRank(rank);
  const int n = static_cast<int>(ids.size());
  std::unordered_map<int, int> local;  // op id -> index in ids
  for (int i = 0; i < n; ++i) local[ids[i]] = i;

  // --- Direct reads: same-node messages carried as one copy by the receiver ---------------------
  enum class Role : uint8_t { kStaged, kElided, kOffer, kRead };
  const std::vector<DirectRead>* direct_reads = &no_direct_reads_;
  if (direct_intra_node_) {
    const uint64_t fingerprint = PlanFingerprint(plan);
    auto hit = std::find_if(direct_cache_.begin(), direct_cache_.end(), [&](const DirectCacheEntry& e) {
      return e.plan == &plan && e.fingerprint == fingerprint;
    });
    if (hit == direct_cache_.end()) {
      if (direct_cache_.size() == kDirectCacheSize) direct_cache_.pop_back();
      direct_cache_.insert(direct_cache_.begin(), {&plan, fingerprint, FindDirectReads(plan, rank)});
    } else if (hit != direct_cache_.begin()) {
      std::rotate(direct_cache_.begin(), hit, hit + 1);
    }
    direct_reads = &direct_cache_.front().reads;
  }
  const std::vector<DirectRead>& directs = *direct_reads;
  std::vector<Role> role(n, Role::kStaged);
  std::vector<int> direct_of(n, -1);
  std::vector<int64_t> control_offset(directs.size(), 0);
  int64_t control_bytes = 0;
  for (size_t k = 0; k < directs.size(); ++k) {
    const DirectRead& d = directs[k];
    auto mark = [&](int op, Role r) {
      if (op < 0) return;
      auto it = local.find(op);
      if (it == local.end()) return;
      role[it->second] = r;
      direct_of[it->second] = static_cast<int>(k);
    };
    if (d.sender == rank) {
      mark(d.send_op, Role::kOffer);
      mark(d.pack_op, Role::kElided);
    }
    if (d.receiver == rank) {
      mark(d.recv_op, Role::kRead);
      mark(d.unpack_op, Role::kElided);
    }
    control_offset[k] = control_bytes;
    control_bytes += (DirectReadOfferBytes(d.source_buffers.size()) + 63) / 64 * 64;
  }
  if (static_cast<int64_t>(control_.size()) < control_bytes) control_.resize(static_cast<size_t>(control_bytes));

  // --- Validation and bookkeeping ---------------------------------------------------------------
  std::vector<int> deps_left(n, 0);
  std::vector<std::vector<int>> dependents(n);
  std::vector<std::vector<int>> slots_of(n);
  std::map<int, int> slot_uses;
  int64_t largest_slot = 0, total_slots = 0;
  for (int i = 0; i < n; ++i) {
    const Op& op = plan.ops[ids[i]];
    for (int dep : plan.Deps(op)) {
      auto it = local.find(dep);
      if (it == local.end() || it->second >= i) {
        return InvalidArgument("op " + std::to_string(op.id) + " depends on op " +
                               std::to_string(dep) + ", which is not an earlier op of rank " +
                               std::to_string(rank));
      }
      ++deps_left[i];
      dependents[it->second].push_back(i);
    }
    if (role[i] != Role::kStaged) continue;  // direct reads use no staging
    for (const CopyPair& pair : plan.Copies(op)) {
      AddSlotRefs(pair.from, slots_of[i]);
      AddSlotRefs(pair.to, slots_of[i]);
    }
    if (IsNetwork(op.kind)) AddSlotRefs(op.Data(), slots_of[i]);
    for (int slot : slots_of[i]) {
      if (slot < 0 || slot >= static_cast<int>(plan.slots.size()) || plan.slots[slot].rank != rank) {
        return InvalidArgument(Describe(op, comm_) + " uses staging slot " + std::to_string(slot) +
                               " that is not a slot of rank " + std::to_string(rank));
      }
      if (slot_uses[slot]++ == 0) {
        largest_slot = std::max(largest_slot, plan.slots[slot].bytes);
        total_slots += plan.slots[slot].bytes;
      }
    }
  }
  if (largest_slot > staging_budget_) {
    return InvalidArgument("a staging slot of " + FormatBytes(static_cast<double>(largest_slot)) +
                           " exceeds executor.staging_budget (" +
                           FormatBytes(static_cast<double>(staging_budget_)) + ")");
  }
  const int64_t arena_needed = std::min(staging_budget_, total_slots + 256 * static_cast<int64_t>(slot_uses.size()));
  if (comm_.epoch() != cache_epoch_) {
    registration_cache_.clear();  // those transports are gone, and their registrations with them
    cache_epoch_ = comm_.epoch();
  }
  if (arena_needed > arena_bytes_) {
    std::erase_if(registration_cache_, [&](const CachedRegistration& c) {
      if (c.base != arena_.get()) return false;
      (void)c.transport->DeregisterMemory(c.handle);
      return true;
    });
    arena_.reset(new char[static_cast<size_t>(arena_needed)]);
    arena_bytes_ = arena_needed;
  }
  stats.staging_arena_bytes = arena_bytes_;
  ArenaAllocator allocator(arena_bytes_);
  std::map<int, int64_t> slot_offset;

  auto base_of = [&](const Region& r) -> Result<char*> {
    const std::vector<MemoryDesc>* table = nullptr;
    if (r.space == Space::kStaging) {
      auto it = slot_offset.find(r.buffer);
      if (it == slot_offset.end()) return Internal("staging slot used before allocation");
      if (r.offset < 0 || r.offset + r.NumBytes() > plan.slots[r.buffer].bytes) {
        return OutOfRange("region outside staging slot " + std::to_string(r.buffer));
      }
      return arena_.get() + it->second + r.offset;
    }
    table = r.space == Space::kSource ? &memory.source : &memory.destination;
    if (r.buffer < 0 || r.buffer >= static_cast<int>(table->size()) ||
        (*table)[r.buffer].base == nullptr) {
      return InvalidArgument(std::string(SpaceName(r.space)) + " buffer " +
                             std::to_string(r.buffer) + " has no memory on rank " +
                             std::to_string(rank));
    }
    const MemoryDesc& desc = (*table)[r.buffer];
    if (desc.kind != MemoryKind::kHost) {
      return Unimplemented("the host executor cannot touch CUDA memory yet");
    }
    return static_cast<char*>(desc.base) + r.offset;
  };

  // --- Registrations: every transport this rank uses for network ops ----------------------------
  struct Registration {
    Transport* transport;
    MemoryHandle handle;
  };
  std::vector<Registration> registrations;  // this run's own, released at its end
  std::map<std::pair<Transport*, const void*>, MemoryHandle> handle_of;  // (transport, base)
  // The arena is always cached; user buffers when executor.cache_registrations is on.
  auto register_block = [&](Transport* t, void* base, int64_t bytes, bool cacheable) -> Status {
    if (handle_of.count({t, base}) != 0) return Status::Ok();
    for (const CachedRegistration& c : registration_cache_) {
      if (c.transport == t && c.base == base && c.bytes == bytes) {
        handle_of[{t, base}] = c.handle;
        return Status::Ok();
      }
    }
    FERRY_ASSIGN_OR_RETURN(MemoryHandle h,
                           t->RegisterMemory(MemoryDesc{base, bytes, MemoryKind::kHost, -1}));
    handle_of[{t, base}] = h;
    if (cacheable) {
      registration_cache_.push_back({t, base, bytes, h});
    } else {
      registrations.push_back({t, h});
    }
    return Status::Ok();
  };
  auto deregister_all = [&] {
    for (const Registration& r : registrations) (void)r.transport->DeregisterMemory(r.handle);
  };
  std::set<Transport*> used_transports;
  Status setup;
  for (int i = 0; i < n && setup.ok(); ++i) {
    const Op& op = plan.ops[ids[i]];
    if (!IsNetwork(op.kind)) continue;
    auto t = comm_.TransportFor(op.peer);
    if (!t.ok()) {
      setup = t.status().WithContext(Describe(op, comm_));
      break;
    }
    used_transports.insert(*t);
    if (role[i] != Role::kStaged) {
      setup = register_block(*t, control_.data(), static_cast<int64_t>(control_.size()), false);
      if (!setup.ok()) setup = std::move(setup).WithContext(Describe(op, comm_) + ": registering memory");
      continue;
    }
    if (op.data.space == Space::kStaging) {
      if (arena_bytes_ > 0) setup = register_block(*t, arena_.get(), arena_bytes_, true);
    } else {
      const auto& table = op.data.space == Space::kSource ? memory.source : memory.destination;
      if (op.data.buffer < 0 || op.data.buffer >= static_cast<int>(table.size())) {
        setup = InvalidArgument(Describe(op, comm_) + ": buffer " + std::to_string(op.data.buffer) +
                                " has no memory");
        break;
      }
      setup = register_block(*t, table[op.data.buffer].base, table[op.data.buffer].bytes,
                             cache_user_registrations_);
    }
    if (!setup.ok()) setup = std::move(setup).WithContext(Describe(op, comm_) + ": registering memory");
  }
  if (!setup.ok()) {
    deregister_all();
    return setup;
  }

  // --- The run loop ---------------------------------------------------------------------------
  auto order = [&](int a, int b) {
    const Op& x = plan.ops[ids[a]];
    const Op& y = plan.ops[ids[b]];
    return x.round != y.round ? x.round < y.round : a < b;
  };
  // Ready ops, network and local kept apart so that a full in-flight window costs nothing to skip.
  std::set<int, decltype(order)> ready_network(order), ready_local(order);
  int64_t readied = 0;  // ops made ready so far; a change means another scan may start more
  auto make_ready = [&](int i) {
    (IsNetwork(plan.ops[ids[i]].kind) ? ready_network : ready_local).insert(i);
    ++readied;
  };
  for (int i = 0; i < n; ++i) {
    if (deps_left[i] == 0) make_ready(i);
  }
  std::vector<std::vector<CopyGeometry>> geometries(n);
  std::map<std::pair<Transport*, RequestId>, int> request_op;
  std::map<Transport*, int> pending_per_transport;
  int in_flight = 0, copies_running = 0, completed = 0;
  Status failure;

  auto complete = [&](int i) {
    ++completed;
    for (int slot : slots_of[i]) {
      if (--slot_uses[slot] == 0) {
        allocator.Free(slot_offset.at(slot));
        slot_offset.erase(slot);
      }
    }
    for (int d : dependents[i]) {
      if (--deps_left[d] == 0) make_ready(d);
    }
  };

  // Runs op i's copies (geometry p from ends[p].from to ends[p].to; from is in process
  // ends[p].pid when that is not 0): inline when small, else as tasks on the pool. Returns true
  // when they already ran. `geos` must outlive the op (geometries[i] or a cached DirectRead's).
  struct Ends {
    const char* from;
    char* to;
    int64_t pid;
  };
  std::vector<std::vector<CopyItem>> items(n);
  auto dispatch_copies = [&](int i, const std::vector<CopyGeometry>& geos, const std::vector<Ends>& ends,
                             int64_t bytes) -> Result<bool> {
    stats.bytes_copied += bytes;
    if (bytes <= kInlineBytes || pool_->threads() == 0) {
      for (size_t p = 0; p < geos.size(); ++p) {
        FERRY_RETURN_IF_ERROR(RunCopyItem({&geos[p], WholeCopy(geos[p]), ends[p].from, ends[p].to, ends[p].pid}));
      }
      return true;
    }
    auto& its = items[i];
    its.clear();
    its.reserve(geos.size());
    for (size_t p = 0; p < geos.size(); ++p) {
      if (geos[p].bytes() <= kSliceBytes) {
        its.push_back({&geos[p], WholeCopy(geos[p]), ends[p].from, ends[p].to, ends[p].pid});
        continue;
      }
      for (const CopySlice& s : SliceCopy(geos[p], kSliceBytes, (pool_->threads() + 1) * 4)) {
        its.push_back({&geos[p], s, ends[p].from, ends[p].to, ends[p].pid});
      }
    }
    std::vector<CopyPool::Slice> tasks;
    int64_t task_bytes = 0;
    for (size_t k = 0; k < its.size(); ++k) {
      if (tasks.empty() || task_bytes >= kSliceBytes) {
        tasks.push_back({&its[k], 0, i});
        task_bytes = 0;
      }
      ++tasks.back().count;
      task_bytes += ItemBytes(its[k]);
    }
    if (tasks.empty()) return true;
    ++copies_running;
    pool_->Submit(i, std::move(tasks));
    return false;
  };

  auto start_copy = [&](int i) -> Status {
    const Op& op = plan.ops[ids[i]];
    auto& geos = geometries[i];
    geos.clear();
    geos.reserve(static_cast<size_t>(op.NumCopies()));
    std::vector<Ends> ends;
    ends.reserve(static_cast<size_t>(op.NumCopies()));
    int64_t bytes = 0;
    for (const CopyPair& pair : plan.Copies(op)) {
      FERRY_ASSIGN_OR_RETURN(CopyGeometry g, MakeCopyGeometry(pair.from, pair.to));
      if (op.kind != OpKind::kConvert && pair.from.dtype != pair.to.dtype) {
        return InvalidArgument("dtype changes only in convert ops");
      }
      FERRY_ASSIGN_OR_RETURN(char* from, base_of(pair.from));
      FERRY_ASSIGN_OR_RETURN(char* to, base_of(pair.to));
      bytes += g.bytes();
      geos.push_back(g);
      ends.push_back({from, to, 0});
    }
    FERRY_ASSIGN_OR_RETURN(bool done, dispatch_copies(i, geos, ends, bytes));
    if (done) complete(i);
    return Status::Ok();
  };

  // Direct reads: per op, the requests still pending and, on the receiver, whether the offer came
  // (its first completion is the offer, its second the "done" reply going out).
  std::vector<int> requests_left(n, 0);
  std::vector<char> offer_received(n, 0);
  auto post_control = [&](int i, bool send, uint64_t tag, int64_t offset, int64_t bytes) -> Status {
    const Op& op = plan.ops[ids[i]];
    FERRY_ASSIGN_OR_RETURN(Transport * t, comm_.TransportFor(op.peer));
    LocalBuffer buffer{handle_of.at({t, control_.data()}), offset, bytes};
    Result<RequestId> id = send ? t->PostSend(op.peer, tag, buffer) : t->PostRecv(op.peer, tag, buffer);
    if (!id.ok()) return id.status();
    request_op[{t, *id}] = i;
    ++pending_per_transport[t];
    ++in_flight;
    ++requests_left[i];
    return Status::Ok();
  };
  // Sender: offer the source buffers the message reads, and wait for the receiver's "done".
  std::vector<PeerBuffer> described;  // this run's source buffers as offered to peers, by buffer
  std::vector<char> is_described;
  BufferDescriber describer;
  auto start_offer = [&](int i) -> Status {
    const DirectRead& d = directs[direct_of[i]];
    std::vector<PeerBuffer> buffers(d.source_buffers.size());
    for (size_t j = 0; j < buffers.size(); ++j) {
      const int b = d.source_buffers[j];
      if (b < 0 || b >= static_cast<int>(memory.source.size()) || memory.source[b].base == nullptr) {
        return InvalidArgument("source buffer " + std::to_string(b) + " has no memory on rank " + std::to_string(rank));
      }
      if (memory.source[b].kind != MemoryKind::kHost) {
        return Unimplemented("direct reads of CUDA memory need the CUDA IPC path");
      }
      if (described.empty()) {
        described.resize(memory.source.size());
        is_described.assign(memory.source.size(), 0);
      }
      if (!is_described[b]) {
        FERRY_ASSIGN_OR_RETURN(described[b], describer.Describe(memory.source[b]));
        is_described[b] = 1;
      }
      buffers[j] = described[b];
    }
    const int64_t offer_bytes = DirectReadOfferBytes(buffers.size());
    EncodeDirectReadOffer(ProcessIdentity::Self(), buffers,
                          std::span<uint8_t>(control_.data() + control_offset[direct_of[i]],
                                             static_cast<size_t>(offer_bytes)));
    const int64_t message = plan.ops[ids[i]].message;
    FERRY_RETURN_IF_ERROR(post_control(i, false, comm_.AckTag(message), control_offset[direct_of[i]], 0));
    return post_control(i, true, comm_.Tag(message), control_offset[direct_of[i]], offer_bytes);
  };
  // Receiver: wait for the offer.
  auto start_read = [&](int i) -> Status {
    const DirectRead& d = directs[direct_of[i]];
    return post_control(i, false, comm_.Tag(d.message), control_offset[direct_of[i]],
                        DirectReadOfferBytes(d.source_buffers.size()));
  };
  // Receiver, copies done: tell the sender its buffers are free.
  auto finish_read = [&](int i) -> Status {
    return post_control(i, true, comm_.AckTag(directs[direct_of[i]].message), control_offset[direct_of[i]], 0);
  };
  // Receiver, offer in hand: one copy per pair, from the sender's memory (mapped when it is
  // shared, else read through process_vm_readv) into this rank's destination buffers.
  auto copy_read = [&](int i) -> Status {
    const DirectRead& d = directs[direct_of[i]];
    ProcessIdentity owner;
    std::vector<PeerBuffer> buffers;
    FERRY_RETURN_IF_ERROR(DecodeDirectReadOffer(
        std::span<const uint8_t>(control_.data() + control_offset[direct_of[i]],
                                 static_cast<size_t>(DirectReadOfferBytes(d.source_buffers.size()))),
        d.source_buffers.size(), owner, buffers));
    if (owner.boot_id != ProcessIdentity::Self().boot_id) {
      return FailedPrecondition("peer " + std::to_string(d.sender) +
                                " runs on another machine, but the plan links it as same-node; fix the "
                                "topology or set executor.direct_intra_node=false");
    }
    // Buffers of one shared file (ferry run puts a rank's buffers in one) share its mapping:
    // look it up once per file, not per buffer.
    std::vector<const char*> mapped(buffers.size(), nullptr);
    const PeerBuffer* last = nullptr;
    PeerMappings::File file;
    for (size_t j = 0; j < buffers.size(); ++j) {
      const PeerBuffer& b = buffers[j];
      if (b.shared_fd < 0) continue;
      if (last == nullptr || last->shared_fd != b.shared_fd || last->inode != b.inode) {
        FERRY_ASSIGN_OR_RETURN(file, peer_mappings_.MapFile(owner, b));
        last = &b;
      }
      if (b.shared_offset < 0 || b.shared_offset + b.bytes > file.length) {
        return OutOfRange("peer " + std::to_string(d.sender) + "'s buffer " +
                          std::to_string(d.source_buffers[j]) + " lies outside its shared file");
      }
      mapped[j] = file.base + b.shared_offset;
    }
    std::vector<Ends> ends;
    ends.reserve(d.reads.size());
    int64_t bytes = 0;
    for (size_t c = 0; c < d.reads.size(); ++c) {
      const DirectRead::Read& r = d.reads[c];
      const CopyGeometry& g = d.geometries[c];
      const size_t j = static_cast<size_t>(r.source);
      if (r.from_offset < 0 || r.from_offset + r.from_span > buffers[j].bytes) {
        return OutOfRange("source region of " + std::to_string(r.from_span) + " bytes at " +
                          std::to_string(r.from_offset) + " is outside peer " +
                          std::to_string(d.sender) + "'s buffer " +
                          std::to_string(d.source_buffers[j]) + " of " +
                          std::to_string(buffers[j].bytes) + " bytes");
      }
      // The destination side, checked inline (base_of per pair costs more than a small copy).
      const int b = r.to_buffer;
      if (b < 0 || b >= static_cast<int>(memory.destination.size()) ||
          memory.destination[b].base == nullptr || memory.destination[b].kind != MemoryKind::kHost ||
          r.to_offset < 0 || r.to_offset + r.to_span > memory.destination[b].bytes) {
        return InvalidArgument("destination buffer " + std::to_string(b) + " on rank " +
                               std::to_string(rank) +
                               " has no host memory covering a region the plan writes");
      }
      char* to = static_cast<char*>(memory.destination[b].base) + r.to_offset;
      if (mapped[j] != nullptr) {
        ends.push_back({mapped[j] + r.from_offset, to, 0});
      } else {
        if (!g.contiguous_run()) {
          return Unimplemented("a direct read through process_vm_readv needs contiguous rows; "
                               "allocate source buffers with SharedHostMemory");
        }
        ends.push_back({reinterpret_cast<const char*>(buffers[j].address + r.from_offset), to, owner.pid});
      }
      bytes += g.bytes();
    }
    stats.bytes_read_direct += bytes;
    FERRY_ASSIGN_OR_RETURN(bool done, dispatch_copies(i, d.geometries, ends, bytes));
    return done ? finish_read(i) : Status::Ok();
  };

  auto start_network = [&](int i) -> Status {
    if (role[i] == Role::kOffer) return start_offer(i);
    if (role[i] == Role::kRead) return start_read(i);
    const Op& op = plan.ops[ids[i]];
    FERRY_ASSIGN_OR_RETURN(Transport * t, comm_.TransportFor(op.peer));
    FERRY_ASSIGN_OR_RETURN(char* at, base_of(op.Data()));
    const void* block = op.data.space == Space::kStaging
                            ? static_cast<const void*>(arena_.get())
                            : (op.data.space == Space::kSource ? memory.source : memory.destination)[op.data.buffer].base;
    LocalBuffer buffer{handle_of.at({t, block}), at - static_cast<const char*>(block), op.bytes};
    Result<RequestId> id = op.kind == OpKind::kRecv ? t->PostRecv(op.peer, comm_.Tag(op.message), buffer)
                                                    : t->PostSend(op.peer, comm_.Tag(op.message), buffer);
    if (!id.ok()) return id.status();
    request_op[{t, *id}] = i;
    ++pending_per_transport[t];
    ++in_flight;
    return Status::Ok();
  };

  // Starts ready ops in (round, id) order: receives and sends first (posting receives early keeps
  // messages from arriving unexpected), then local copies. Staging is granted in that order too:
  // once one op cannot get its slots, later ones needing slots wait (no overtaking).
  auto start_ready = [&]() -> Status {
    bool staging_blocked = false;
    auto try_start = [&](int i) -> Result<bool> {
      const Op& op = plan.ops[ids[i]];
      if (role[i] == Role::kElided) {  // a Pack or Unpack a direct read makes unnecessary
        complete(i);
        return true;
      }
      bool needs_space = false;
      for (int slot : slots_of[i]) needs_space |= slot_offset.count(slot) == 0;
      if (needs_space) {
        if (staging_blocked) return false;
        std::vector<std::pair<int, int64_t>> got;
        for (int slot : slots_of[i]) {
          if (slot_offset.count(slot) != 0) continue;
          int64_t offset = allocator.Allocate(plan.slots[slot].bytes);
          if (offset < 0) {
            for (auto& [s2, o2] : got) {
              allocator.Free(o2);
              slot_offset.erase(s2);
            }
            staging_blocked = true;
            return false;
          }
          slot_offset[slot] = offset;
          got.emplace_back(slot, offset);
        }
        stats.peak_staging_bytes = std::max(stats.peak_staging_bytes, allocator.in_use());
      }
      Status started = IsNetwork(op.kind) ? start_network(i) : start_copy(i);
      if (!started.ok()) return started.WithContext(Describe(op, comm_));
      return true;
    };
    int64_t seen = -1;
    while (seen != readied) {  // inline completions may ready more ops: scan again
      seen = readied;
      staging_blocked = false;
      for (auto it = ready_network.begin(); it != ready_network.end() && in_flight < max_in_flight_;) {
        int i = *it;
        FERRY_ASSIGN_OR_RETURN(bool started, try_start(i));
        it = started ? ready_network.erase(it) : std::next(it);
      }
      for (auto it = ready_local.begin(); it != ready_local.end();) {
        int i = *it;
        it = ready_local.erase(it);
        FERRY_ASSIGN_OR_RETURN(bool started, try_start(i));
        if (!started) {
          ready_local.insert(i);
          it = ready_local.upper_bound(i);
        } else if (readied != seen) {
          break;  // an inline copy readied ops (maybe earlier ones): rescan from the start
        }
      }
    }
    return Status::Ok();
  };

  Completion completions[64];
  while (completed < n && failure.ok()) {
    failure = start_ready();
    if (!failure.ok() || completed == n) break;
    if (in_flight == 0 && copies_running == 0) {
      failure = Internal("executor stalled on rank " + std::to_string(rank) + " with " +
                         std::to_string(n - completed) +
                         " ops left: the staging budget cannot hold the next op's slots");
      break;
    }
    if (comm_.aborted()) {
      failure = comm_.abort_reason().WithContext("communicator aborted during the run");
      break;
    }
    // Help with the copies rather than spin: all of them while no message is in flight, else one
    // slice (~512 KiB) between two polls.
    bool helped = false;
    if (in_flight == 0) {
      while (pool_->RunOne()) {
      }
    } else {
      helped = pool_->RunOne();
    }
    // Copies finished? With nothing to help with, wait for one a little instead of spinning.
    auto wait_copies = std::chrono::microseconds(in_flight == 0 ? 2000 : (helped ? 0 : 100));
    for (auto& [i, status] : pool_->Done(copies_running > 0 ? wait_copies : std::chrono::microseconds(0))) {
      --copies_running;
      if (!status.ok() && failure.ok()) failure = status.WithContext(Describe(plan.ops[ids[i]], comm_));
      if (role[i] == Role::kRead) {
        if (failure.ok()) {
          Status done = finish_read(i);
          if (!done.ok()) failure = done.WithContext(Describe(plan.ops[ids[i]], comm_));
        }
        continue;
      }
      complete(i);
    }
    if (!failure.ok()) break;
    // Network progress: block briefly only when no copy can finish meanwhile.
    int busy_transports = 0;
    for (auto& [t, count] : pending_per_transport) busy_transports += count > 0;
    for (auto& [t, count] : pending_per_transport) {
      if (count == 0) continue;
      Deadline poll_deadline = (copies_running > 0 || busy_transports > 1)
                                   ? Deadline::After(std::chrono::nanoseconds(0))
                                   : Deadline::After(std::chrono::milliseconds(20)).Min(deadline);
      auto got = t->Poll(completions, poll_deadline);
      if (!got.ok()) {
        failure = got.status().WithContext(std::string(t->name()) + " transport on rank " +
                                           std::to_string(rank));
        break;
      }
      for (int c = 0; c < *got; ++c) {
        auto it = request_op.find({t, completions[c].request});
        if (it == request_op.end()) continue;
        int i = it->second;
        request_op.erase(it);
        --count;
        --in_flight;
        const Op& op = plan.ops[ids[i]];
        if (!completions[c].status.ok()) {
          if (failure.ok()) failure = completions[c].status.WithContext(Describe(op, comm_));
          continue;
        }
        if (role[i] != Role::kStaged) {
          if (--requests_left[i] > 0) continue;
          if (role[i] == Role::kRead && !offer_received[i]) {
            offer_received[i] = 1;
            const int64_t expected = DirectReadOfferBytes(directs[direct_of[i]].source_buffers.size());
            Status read = completions[c].bytes == expected
                              ? copy_read(i)
                              : InvalidArgument("direct-read offer of " + std::to_string(completions[c].bytes) +
                                                " bytes, expected " + std::to_string(expected) +
                                                " (do both ranks set executor.direct_intra_node alike?)");
            if (!read.ok() && failure.ok()) failure = read.WithContext(Describe(op, comm_));
            continue;
          }
          complete(i);
          continue;
        }
        if (op.kind == OpKind::kRecv) {
          if (completions[c].bytes != op.bytes) {
            failure = OutOfRange(Describe(op, comm_) + ": received " +
                                 std::to_string(completions[c].bytes) + " bytes, expected " +
                                 std::to_string(op.bytes));
            continue;
          }
          stats.bytes_received += completions[c].bytes;
        } else {
          stats.bytes_sent += op.bytes;
        }
        complete(i);
      }
      if (!failure.ok()) break;
    }
    if (failure.ok() && deadline.Expired() && completed < n) {
      std::string pending;
      int shown = 0;
      for (auto& [key, i] : request_op) {
        if (shown++ == 3) break;
        pending += (pending.empty() ? "" : "; ") + Describe(plan.ops[ids[i]], comm_);
      }
      failure = DeadlineExceeded("rank " + std::to_string(rank) + ": refit deadline passed with " +
                                 std::to_string(n - completed) + " of " + std::to_string(n) +
                                 " ops unfinished" + (pending.empty() ? "" : ", waiting for " + pending));
    }
  }

  if (!failure.ok()) {
    // Fail fast everywhere: peers see our links close instead of waiting out their deadlines.
    comm_.Abort(failure);
    for (Transport* t : used_transports) {
      for (int i = 0; i < 4; ++i) {
        auto got = t->Poll(completions, Deadline::After(std::chrono::nanoseconds(0)));
        if (!got.ok() || *got == 0) break;
      }
    }
    pool_->Drain();
    (void)pool_->Done(std::chrono::microseconds(0));
    deregister_all();
    return failure;
  }
  deregister_all();
  peer_mappings_.Sweep();
  stats.ops = n;
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return stats;
}

}  // namespace ferry
