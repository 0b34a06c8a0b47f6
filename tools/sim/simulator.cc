// The discrete-event simulator: event loop, max-min fair rate allocation on the links touched by
// each change, message matching, critical path and ingress accounting.
#include "tools/sim/simulator.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <limits>
#include <queue>
#include <sstream>
#include <unordered_map>
#include <utility>

#include "core/base/strings.h"
#include "core/runtime/direct_read.h"
#include "core/runtime/quantizing_read.h"
#include "tools/sim/finish_heap.h"
#include "tools/sim/host_copy_rates.h"
#include "tools/sim/kernel_stream.h"
#include "tools/sim/share_heap.h"
#include "tools/sim/staging_gate.h"

namespace ferry::sim {

std::string_view ResourceKindName(ResourceKind kind) {
  switch (kind) {
    case ResourceKind::kGpuMem: return "gpu_mem";
    case ResourceKind::kNvlinkOut: return "nvlink_out";
    case ResourceKind::kNvlinkIn: return "nvlink_in";
    case ResourceKind::kNicTx: return "nic_tx";
    case ResourceKind::kNicRx: return "nic_rx";
    case ResourceKind::kSpineUp: return "spine_up";
    case ResourceKind::kSpineDown: return "spine_down";
    case ResourceKind::kPcieD2H: return "pcie_d2h";
    case ResourceKind::kPcieH2D: return "pcie_h2d";
    case ResourceKind::kHostMem: return "host_mem";
    case ResourceKind::kLoopback: return "loopback";
    case ResourceKind::kTransportThread: return "transport_thread";
    case ResourceKind::kHostCpu: return "host_cpu";
  }
  return "unknown";
}

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int kMaxFlowLinks = 8;
constexpr double kRelEps = 1e-9;
constexpr int kNoBottleneck = -2;

struct Resource {
  double capacity = 0;
  double allocated = 0;      // sum of member rates of the active classes on it
  double bytes_carried = 0;  // bytes of finished flows
  std::vector<int> classes;  // active class ids
  ResourceKind kind = ResourceKind::kGpuMem;
  int index = 0;             // gpu, nic or node index within its kind
};

// One transfer: a message or a local op. Its rate is its class's rate.
struct Flow {
  std::array<int, kMaxFlowLinks> links{};
  int num_links = 0;
  double cap = kInf;  // per-flow rate limit (a kernel's or a stream's own throughput)
  double bytes = 0;
  // Service it needs from its links: bytes plus its fixed cost (a kernel launch, a message's
  // posting and rendezvous) as the bytes its links could have moved meanwhile, so that fixed costs
  // occupy the GPU, NVLink port or NIC they run on (a message rate) instead of overlapping freely.
  double work = 0;
  // Service a byte takes: 1, or for a host-memory copy whose rows copy slower than contiguous
  // bytes, that slowdown (ClusterSpec::host_copy_row_rates).
  double weight = 1;
  double tail = 0;  // latency after the last byte
  int op_a = -1;
  int op_b = -1;
  int ingress_node = -1;  // destination node of a network flow
  // The rank whose CUDA stream runs this flow as a kernel (a local op or a direct read on a GPU
  // cluster), -1 for a flow no stream of ferry's runs (a transport's message, a host copy).
  int stream = -1;
  // Order of its start among all flows: breaks ties between members of a class due at the same
  // service, as the record's index did before records were reused.
  int seq = -1;
};

// Active flows with identical links and cap always get the same max-min rate, so they are
// allocated as one class of `members` flows (generalised processor sharing): `service` is the
// bytes each member has received since the class was created; a member finishes when service
// reaches the service at its start plus its bytes. FlowClass holds what every rate recomputation
// that touches the class reads and writes. Recomputations visit classes at random, so the active
// classes live in a dense array of slots (reused as classes go idle and come back) rather than
// among every class the run ever had; ClassRecord, by class id, keeps an idle class's state and
// what only a member's start or finish needs.
struct FlowClass {
  std::array<int, kMaxFlowLinks> links{};
  int num_links = 0;
  int members = 0;
  int ingress_node = -1;
  int bottleneck = -1;
  double cap = kInf;
  double rate = 0;  // per member
  double service = 0;
  double t_last = 0;
  double next_finish = 0;  // finish service of the member due first (members > 0)
  int cid = -1;            // class id (of its ClassRecord)
};

// A member of a class: when it finishes, and its flow record.
struct MemberFinish {
  double service;
  int seq;   // Flow::seq
  int flow;  // index of its record in Engine::flows_
  bool operator>(const MemberFinish& o) const {
    return service != o.service ? service > o.service : seq > o.seq;
  }
};

struct ClassRecord {
  FlowClass parked;  // its state while idle; its links, cap and ingress node are always valid
  int slot = -1;     // its slot while it has members, -1 when idle
  std::array<int, kMaxFlowLinks> pos{};  // position of its slot in links[k]'s class list
  // Its members by (finish service, start order), smallest first.
  std::priority_queue<MemberFinish, std::vector<MemberFinish>, std::greater<MemberFinish>>
      finishing;
};

// A flow's class key: its links and cap.
uint64_t ClassKeyHash(const Flow& f) {
  uint64_t h = std::hash<double>()(f.cap);
  for (int k = 0; k < f.num_links; ++k) h = h * 1000003u ^ static_cast<uint64_t>(f.links[k] + 1);
  return h * 0x9E3779B97F4A7C15ull;  // spread into the high bits, which pick the table slot
}
bool SameClassKey(const FlowClass& c, const Flow& f) {
  if (c.num_links != f.num_links || c.cap != f.cap) return false;
  for (int k = 0; k < f.num_links; ++k) {
    if (c.links[k] != f.links[k]) return false;
  }
  return true;
}

// kStreamFree: a rank's launch finished; the next one queued on its stream starts.
enum class EventType : uint8_t { kFlowStart, kOpDone, kStreamFree };

struct Event {
  double t;
  uint64_t seq;
  EventType type;
  int id;
  bool operator>(const Event& o) const { return t != o.t ? t > o.t : seq > o.seq; }
};

// An op's (round, id) as one integer that orders as the pair: the round in the high half.
int64_t RoundKey(const Op& o) { return static_cast<int64_t>(o.round) * (int64_t{1} << 32) + o.id; }
int IdOfRoundKey(int64_t key) { return static_cast<int>(key & 0xFFFFFFFF); }

// The sender and receiver op (-1: none yet) of each message id: an array for ids below the op
// count, as the planner numbers messages from 0, and a hash map for any other id.
class MessageTable {
 public:
  explicit MessageTable(int ops) : dense_(static_cast<size_t>(ops), {-1, -1}) {}
  std::pair<int, int>& operator[](int64_t id) {
    if (id >= 0 && id < static_cast<int64_t>(dense_.size())) return dense_[static_cast<size_t>(id)];
    return sparse_.try_emplace(id, -1, -1).first->second;
  }
  // Calls f(id, sender, receiver) for every id with a sender or a receiver, until f fails.
  template <typename F>
  Status ForEach(F f) const {
    for (size_t id = 0; id < dense_.size(); ++id) {
      const auto [s, r] = dense_[id];
      if (s != -1 || r != -1) FERRY_RETURN_IF_ERROR(f(static_cast<int64_t>(id), s, r));
    }
    for (const auto& [id, pair] : sparse_) FERRY_RETURN_IF_ERROR(f(id, pair.first, pair.second));
    return Status::Ok();
  }

 private:
  std::vector<std::pair<int, int>> dense_;
  std::unordered_map<int64_t, std::pair<int, int>> sparse_;
};

class Engine {
 public:
  Engine(const TransferPlan& plan, const ClusterSpec& cluster, const RankMapping& mapping,
         const SimOptions& options)
      : plan_(plan), c_(cluster), map_(mapping), opt_(options) {}

  Result<SimResult> Run();

 private:
  Status Prepare();
  // Checks op i (id, rank, bytes, deps on its own rank, peer), counts it as a dependent of its
  // deps in `count` and enters a message op's endpoint in `messages`.
  Status CheckOp(int i, std::vector<int>& count, MessageTable& messages);
  // dependents_ and dependents_begin_ from each op's number of dependents.
  void BuildDependents(const std::vector<int>& count);
  // The plan's direct reads as the executor makes them (none with opt_.direct_reads off), and
  // each op's role in them.
  std::vector<DirectRead> PlanDirectReads();
  Status MatchMessage(int64_t id, int s, int r);
  void BuildResources();
  // Host-memory ranks whose transport has one progress thread a process
  // (ClusterSpec::host_message_stream_bandwidth): one transport_thread link a rank, else none.
  int TransportThreads() const {
    return c_.host_memory_ranks && c_.host_message_stream_bandwidth > 0 ? plan_.num_ranks : 0;
  }
  // Adds the transport threads of the sender's and the receiver's rank to message flow f, when
  // the cluster has them: a rank's sends and receives take turns on its one thread.
  void AddTransportThreads(Flow& f, int sender_rank, int receiver_rank) const {
    if (TransportThreads() == 0) return;
    f.links[f.num_links++] = Res(ResourceKind::kTransportThread, sender_rank);
    f.links[f.num_links++] = Res(ResourceKind::kTransportThread, receiver_rank);
  }
  int Res(ResourceKind kind, int index) const { return offset_[static_cast<int>(kind)] + index; }
  int GpuOf(int rank) const { return map_.gpu_of_rank[rank]; }
  int NodeOfGpu(int gpu) const { return gpu / c_.gpus_per_node; }
  int NicOfGpu(int gpu) const {
    return NodeOfGpu(gpu) * c_.nics_per_node + c_.NicOfLocalGpu(gpu % c_.gpus_per_node);
  }

  void Push(double t, EventType type, int id) {
    events_.push(Event{t, seq_++, type, id});
  }
  // Publishes ops done and the clock to SimOptions::progress, when set.
  void PublishProgress(double t) const {
    if (opt_.progress == nullptr) return;
    opt_.progress->ops_done.store(ops_done_, std::memory_order_relaxed);
    opt_.progress->simulated_seconds.store(t, std::memory_order_relaxed);
  }
  void StartInitialOps();
  void SortStablyByRound(std::vector<int>& ops) const;
  void OnReady(int op, double t);
  void BecomeReady(int op, double t);
  void Admit(int sender, double t);
  void StartLocalOp(int op, double t);
  double QuantizeTrafficPerByte(const Op& o) const;
  // Whether a Convert, Pack or Unpack writes fp8 from a wider dtype (its first copy tells).
  bool NarrowsToFp8(const Op& o) const;
  // Such an op's copies' (read + written) / 2 bytes, what fp8_convert_bandwidth counts; 0 for any
  // other op.
  double Fp8ConvertTraffic(const Op& o) const;
  // Processes share each GPU (ClusterSpec::ranks_per_gpu > 1) and CUDA runs their kernels in turns.
  bool TimeSliced() const { return c_.ranks_per_gpu > 1 && !c_.host_memory_ranks; }
  // The CPU lanes (ClusterSpec::op_post_overhead, tensor_load_overhead): FIFO servers by next
  // free time. Each returns when the op that arrives at t leaves the lane.
  double Post(int rank, double t);
  double Load(int op, double t);
  void CountLoadedTensors();
  void StartMessage(int sender, int receiver, double t);
  int NewFlow(const Flow& f);  // stores f in a free record, returns its index
  void StartFlow(int id, double overhead, double t);
  void OnFlowStart(int f, double t);
  void RunFlow(int f, double t);  // the flow's bytes start moving at t
  void OnStreamFree(int rank, double t);
  void OnFlowFinish(int f, double t);
  void OnOpDone(int op, double t);
  void Settle(FlowClass& c, double now);
  int ClassOf(const Flow& f);  // the class of f's key, created idle on first use
  void GrowClassIndex();
  int Activate(int cid);      // gives idle class `cid` a slot, returns it
  void Deactivate(int slot);  // parks the class of `slot` (no members left) and frees the slot
  // Queues the next finish of class `cid` (of the class in `slot`) at its current rate; a class
  // without members or rate has none. Idle classes are never queued: a class goes idle only in
  // OnFlowFinish, after its entry left the queue.
  void ScheduleClassFinish(int cid, double now);
  void ScheduleFinish(int slot, double now);
  // Rate recomputation of FlushDirty, in rounds (see Recompute), each of the four steps below.
  void Recompute(double now);
  bool CollectAffected(int round);
  void GatherLocalLinks(double now);
  void FillProgressively();
  void ApplyRates(double now);
  // Records that class `cid` gained or lost members: its links join the seed set of the next
  // FlushDirty, which recomputes rates once for all changes at the same instant.
  void MarkDirty(int cid, double now);
  void FlushDirty(double now);
  // The seed links of a batch under SimOptions::rate_slack (seed_links_): the links of classes
  // that gained their first member (they have no rate yet), and the touched links that are over
  // capacity or, while some class is bottlenecked there, idle by more than the slack.
  void SeedUnabsorbed();
  void SetBottleneck(FlowClass& c, int link);  // keeps bottlenecked_ counted
  // FlushDirty(now) unless another event (start, op completion or class finish) is due within
  // SimOptions::rate_batch_window of the first change not yet flushed.
  void FlushUnlessMoreAt(double now) {
    if (dirty_classes_.empty()) return;
    const double horizon = dirty_since_ + batch_window_;
    if (!events_.empty() && events_.top().t <= horizon) return;
    if (!finish_heap_.Empty() && finish_heap_.TopTime() <= horizon) return;
    FlushDirty(now);
  }
  void DepositIngress(int node, double t0, double t1, double bytes);
  // The batch window: SimOptions::rate_batch_window, widened to four of the posting lane's
  // holds. The lane spreads starts that used to share an instant (a finish and the send it
  // lets in, a rank's first window) over multiples of the hold; batching them again keeps the
  // rate updates a message where they were without the lane (docs/simulator.md, "Speed").
  double batch_window_ = 0;
  std::string DescribeResource(int r) const;
  std::string DescribeOp(int op) const;
  void BuildCriticalPath(SimResult& result) const;
  void BuildUtilisation(SimResult& result, double total) const;

  const TransferPlan& plan_;
  const ClusterSpec& c_;
  const RankMapping& map_;
  const SimOptions& opt_;

  std::array<int, kNumResourceKinds + 1> offset_{};
  std::vector<Resource> res_;
  // Records of the flows started and not finished, reused once finished (free_flows_), so that
  // memory follows the flows in flight rather than every flow of the run.
  std::vector<Flow> flows_;
  std::vector<int> free_flows_;
  int num_flows_ = 0;  // flows started so far (the next Flow::seq)
  std::vector<ClassRecord> classes_;  // by class id
  std::vector<FlowClass> active_;     // by slot: the classes with members
  std::vector<int> free_slots_;
  // Class ids by key (ClassKeyHash / SameClassKey): open addressing with linear probing in a
  // power-of-two table kept at most half full; an entry is (key hash, id), id -1 when empty.
  std::vector<std::pair<uint64_t, int>> class_index_;
  int class_index_shift_ = 64;  // slot = hash >> shift
  FinishHeap finish_heap_;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
  uint64_t seq_ = 0;
  int64_t num_events_ = 0;
  int64_t ops_done_ = 0;
  int peak_link_classes_ = 0;  // most flow classes active on one link at once
  int64_t num_recomputations_ = 0, num_class_updates_ = 0;  // SimResult's
  // Per link: the active classes whose rate it limited in their last recomputation
  // (SimOptions::rate_slack: only such a link's idle capacity triggers a recomputation).
  std::vector<int> bottlenecked_;

  // Per op.
  std::vector<int> pending_;        // deps not yet complete
  std::vector<int> dependents_begin_, dependents_;  // CSR of reverse deps
  std::vector<int> partner_;        // matched message op, -1 otherwise
  std::vector<int> cause_;          // the dep whose completion made it ready
  std::vector<OpTime> times_;  // moved into SimResult::op_times when recorded
  // The link that limited the op's flow when it finished (-1: the flow's own cap); kNoBottleneck
  // for ops whose flow moved no bytes.
  std::vector<int> bottleneck_of_op_;
  // Per op with SimOptions::direct_reads: the Unpacks of direct reads and the Packs of those not
  // sent packed are elided (they cost nothing), the Sends of messages carried as direct reads are
  // read by their receivers (a kernel on the receiver's stream).
  enum class DirectRole : char { kStaged, kElided, kRead };
  std::vector<DirectRole> direct_role_;
  // Per rank of a GPU cluster (empty for host-memory ranks): its executor's one CUDA stream
  // (kernel_stream.h), which runs the kernels of its local ops and of its direct reads, and the
  // op whose kernel finished last there (the critical path's link for a launch that waited).
  std::vector<KernelStream> streams_;
  std::vector<int> stream_last_op_;
  std::vector<int> stream_starts_;  // scratch: the flows a stream hands back to start
  // Per op on host-memory ranks with ClusterSpec::host_copy_row_rates: how much slower than
  // contiguous bytes its copies go (a direct read's at its send op; host_copy_rates.h); empty
  // without a table.
  std::vector<double> host_copy_slowdowns_;
  // Whether host Quantize ops run on the node's cores (ClusterSpec::host_cores), and one core's
  // rate in the units of their slowdowns: the row table's contiguous rate, one copy thread's.
  bool QuantizesOnCores() const {
    return c_.host_memory_ranks && c_.host_cores > 0 && c_.host_quantize_rate > 0 &&
           !host_copy_slowdowns_.empty();
  }
  double CoreRate() const {
    return c_.host_copy_row_rates.empty() ? 0 : ContiguousRate(c_.host_copy_row_rates);
  }
  // Makes f, the flow of host-memory copy op `op` (a direct read: its send op), a stream capped
  // at host_copy_bandwidth whose bytes each take the op's slowdown in service of its links: alone
  // it copies at host_copy_bandwidth / slowdown, and sharing host_mem its short rows hold the
  // node's cores that much longer a byte. Without a table the weight stays 1.
  void SetHostCopyStream(Flow& f, int op) const {
    f.cap = c_.host_copy_bandwidth;
    if (!host_copy_slowdowns_.empty()) f.weight = host_copy_slowdowns_[op];
  }
  // Per send op of a direct read that converts on GPU clusters (empty when none does): the bytes
  // its copy reads from the sender and writes on the receiver, per byte of the message
  // (FindConvertingReads).
  struct ReadTraffic {
    float read = 0, written = 0;
    float cap = 0;  // the read's kernel rate in message bytes a second; 0: pack_bandwidth's
  };
  std::vector<ReadTraffic> converting_reads_;
  void FindConvertingReads(const std::vector<DirectRead>& direct_reads);
  // Leaves DirectRead::packed only on the direct reads whose sender packs them
  // (SimOptions::convert_on_sender): what the rest of the model reads as "sent packed".
  void KeepPackedReadsThatPack(std::vector<DirectRead>& direct_reads) const;
  bool SenderPacks(const DirectRead& d) const;
  // Per Quantize op, the share of its bytes quantizing direct reads leave it (empty when none do:
  // every Quantize op quantizes its whole stack); the reads' traffic goes in converting_reads_.
  std::vector<float> quantize_left_;
  void FindQuantizingReads(const std::vector<DirectRead>& direct_reads);
  // Makes f, the flow of a direct read that converts, take its copy's traffic: on one GPU (read +
  // written) / 2 of a copied byte of gpu_mem a message byte; between GPUs its reads cross NVLink,
  // `read` a message byte. Its kernel is capped at pack_bandwidth, as a Convert op's, or at
  // t.cap (quantizing reads and reads narrowing to fp8).
  void SetConvertingRead(Flow& f, bool same_gpu, const ReadTraffic& t) const {
    const double copied = (t.read + t.written) / 2.0;
    f.weight = same_gpu ? copied : t.read;
    f.cap = t.cap > 0 ? t.cap * f.weight : c_.pack_bandwidth * f.weight / copied;
  }
  int64_t num_messages_ = 0;
  // Per rank: messages it sends that are moving; senders whose message could start but waits for
  // the window, least (round, id) on top (SimOptions::max_in_flight).
  std::vector<int> posted_;
  std::vector<std::priority_queue<int64_t, std::vector<int64_t>, std::greater<int64_t>>>
      waiting_;  // RoundKey of each waiting sender
  // Per rank: when its posting lane and its weight-loading lane are next free; per op: tensors a
  // gather-and-broadcast Unpack loads into destination memory (empty when nothing is loaded).
  std::vector<double> post_free_, load_free_;
  std::vector<int> load_tensors_;
  StagingGate staging_;               // ops waiting for their rank's staging (SimOptions::staging_budget)
  std::vector<int> staging_admitted_;  // scratch: ops a finish let through the gate

  // Scratch for Recompute (stamped marks avoid clearing).
  std::vector<uint32_t> flow_mark_, link_mark_;
  std::vector<double> residual_;
  std::vector<int> count_;
  // share_[l]: the fair share residual_ and count_ give link l, stored whenever they change in
  // FillProgressively, so that the filling reads it rather than dividing again.
  std::vector<double> share_;
  std::vector<int> seed_links_, local_links_;
  std::vector<int> affected_;  // slots of the classes recomputed in the current round
  std::vector<double> new_rate_;
  std::vector<int> new_bottleneck_;
  std::vector<char> fixed_;
  ShareHeap link_heap_;
  std::vector<int> cap_order_;
  // The affected classes on each local link of the current round: a list per link through
  // member_next_ starting at link_head_[l], each entry an index into the affected list.
  std::vector<int> link_head_, member_slot_, member_next_;
  uint32_t stamp_ = 0;
  // Changes at the current instant not yet reflected in the rates (MarkDirty / FlushDirty).
  std::vector<int> dirty_links_, dirty_classes_;
  std::vector<char> link_dirty_, class_dirty_;
  double dirty_since_ = 0;  // time of the first change not yet flushed

  double network_bytes_ = 0, nvlink_bytes_ = 0, local_bytes_ = 0;

  // Ingress series with doubling bucket width.
  double bucket_ = 1e-6;
  std::vector<std::vector<double>> ingress_;
};

Status Engine::CheckOp(int i, std::vector<int>& count, MessageTable& messages) {
  const int n = static_cast<int>(plan_.ops.size());
  const Op& op = plan_.ops[i];
  // Built only for an error: formatting it for every op cost more than the checks.
  const auto where = [&] {
    return "op " + std::to_string(i) + " (" + std::string(OpKindName(op.kind)) + ")";
  };
  if (op.id != i) return InvalidArgument(where() + " has id " + std::to_string(op.id));
  if (op.rank < 0 || op.rank >= plan_.num_ranks) {
    return InvalidArgument(where() + " runs on rank " + std::to_string(op.rank) +
                           " outside [0, " + std::to_string(plan_.num_ranks) + ")");
  }
  if (op.bytes < 0) return InvalidArgument(where() + " has negative bytes");
  if (op.deps_begin < 0 || op.deps_begin > op.deps_end ||
      op.deps_end > static_cast<int>(plan_.dep_list.size())) {
    return InvalidArgument(where() + " has deps outside the plan's dep list");
  }
  for (int d : plan_.Deps(op)) {
    if (d < 0 || d >= n || d == i) {
      return InvalidArgument(where() + " depends on invalid op " + std::to_string(d));
    }
    if (plan_.ops[d].rank != op.rank) {
      return InvalidArgument(where() + " on rank " + std::to_string(op.rank) + " depends on op " +
                             std::to_string(d) + " of rank " + std::to_string(plan_.ops[d].rank));
    }
    ++count[d];
  }
  pending_[i] = op.NumDeps();
  if (!IsMessageKind(op.kind)) return Status::Ok();
  if (op.peer < 0 || op.peer >= plan_.num_ranks) {
    return InvalidArgument(where() + " has invalid peer " + std::to_string(op.peer));
  }
  auto& entry = messages[op.message];
  int& slot = IsSenderKind(op.kind) ? entry.first : entry.second;
  if (slot != -1) {
    return InvalidArgument(where() + ": message " + std::to_string(op.message) +
                           " already has a " + (IsSenderKind(op.kind) ? "sender" : "receiver") +
                           " (op " + std::to_string(slot) + ")");
  }
  slot = i;
  return Status::Ok();
}

void Engine::BuildDependents(const std::vector<int>& count) {
  const int n = static_cast<int>(plan_.ops.size());
  dependents_begin_.assign(n + 1, 0);
  for (int i = 0; i < n; ++i) dependents_begin_[i + 1] = dependents_begin_[i] + count[i];
  dependents_.assign(dependents_begin_[n], 0);
  std::vector<int> fill(dependents_begin_.begin(), dependents_begin_.end() - 1);
  for (int i = 0; i < n; ++i) {
    for (int d : plan_.Deps(plan_.ops[i])) dependents_[fill[d]++] = i;
  }
}

std::vector<DirectRead> Engine::PlanDirectReads() {
  if (!opt_.direct_reads) return {};
  // With a table of copy rates by row pattern the direct reads' copies set their flows' weights.
  const bool row_rates = c_.host_memory_ranks && !c_.host_copy_row_rates.empty();
  std::vector<DirectRead> direct_reads =
      FindDirectReads(plan_, row_rates ? kEveryReceiver : kAnyRank);
  KeepPackedReadsThatPack(direct_reads);
  direct_role_.assign(plan_.ops.size(), DirectRole::kStaged);
  for (const DirectRead& d : direct_reads) {
    if (d.pack_op >= 0 && d.packed.empty()) direct_role_[d.pack_op] = DirectRole::kElided;
    if (d.unpack_op >= 0) direct_role_[d.unpack_op] = DirectRole::kElided;
    direct_role_[d.send_op] = DirectRole::kRead;
  }
  return direct_reads;
}

Status Engine::Prepare() {
  const int n = static_cast<int>(plan_.ops.size());
  if (plan_.num_ranks < 0) return InvalidArgument("plan has a negative num_ranks");
  if (static_cast<int>(map_.gpu_of_rank.size()) < plan_.num_ranks) {
    return InvalidArgument("rank mapping covers " + std::to_string(map_.gpu_of_rank.size()) +
                           " ranks but the plan has " + std::to_string(plan_.num_ranks));
  }
  pending_.assign(n, 0);
  partner_.assign(n, -1);
  posted_.assign(plan_.num_ranks, 0);
  post_free_.assign(plan_.num_ranks, 0.0);
  load_free_.assign(plan_.num_ranks, 0.0);
  waiting_.assign(plan_.num_ranks, {});
  if (!c_.host_memory_ranks) {
    streams_.assign(static_cast<size_t>(plan_.num_ranks), {});
    stream_last_op_.assign(streams_.size(), -1);
  }
  if (opt_.max_in_flight < 0) return InvalidArgument("max_in_flight must be >= 0");
  if (opt_.staging_budget < 0) return InvalidArgument("staging_budget must be >= 0");
  {
    std::vector<int> count(n + 1, 0);
    MessageTable messages(n);
    for (int i = 0; i < n; ++i) FERRY_RETURN_IF_ERROR(CheckOp(i, count, messages));
    num_messages_ = 0;
    FERRY_RETURN_IF_ERROR(messages.ForEach([this](int64_t id, int s, int r) {
      ++num_messages_;
      return MatchMessage(id, s, r);
    }));
    messages = MessageTable(0);  // freed now: StagingGate::Make below has its own transient peak
    BuildDependents(count);
  }
  const std::vector<DirectRead> direct_reads = PlanDirectReads();
  FERRY_ASSIGN_OR_RETURN(staging_, StagingGate::Make(plan_, opt_.staging_budget, direct_reads,
                                                     !c_.host_memory_ranks && opt_.quantizing_reads));
  // Allocated after the gate, whose construction has the highest transient peak of the run.
  cause_.assign(n, -1);
  times_.assign(n, OpTime{});
  bottleneck_of_op_.assign(n, kNoBottleneck);
  host_copy_slowdowns_ = HostCopySlowdowns(plan_, c_, direct_reads);
  if (!c_.host_memory_ranks) FindConvertingReads(direct_reads);
  if (!c_.host_memory_ranks && opt_.quantizing_reads) FindQuantizingReads(direct_reads);
  CountLoadedTensors();
  return Status::Ok();
}

void Engine::KeepPackedReadsThatPack(std::vector<DirectRead>& direct_reads) const {
  for (DirectRead& d : direct_reads) {
    if (!SenderPacks(d)) d.packed.clear();
  }
}

// The executor's steady state: on `auto` a receiver on another GPU than its sender's asks it to
// pack, and the sender packs from the message's next run on. Host-memory ranks name no GPU in
// their offers, so on `auto` none asks (core/runtime/direct_read_protocol.cc); on `always` they
// pack too.
bool Engine::SenderPacks(const DirectRead& d) const {
  if (d.packed.empty()) return false;
  switch (opt_.convert_on_sender) {
    case ConvertOnSender::kAlways: return true;
    case ConvertOnSender::kNever: return false;
    case ConvertOnSender::kAuto: return !c_.host_memory_ranks && GpuOf(d.sender) != GpuOf(d.receiver);
  }
  return false;
}

// A direct read copies from the sender's source into the receiver's destination in one step, so
// it reads what the elided Pack read and writes what the elided Unpack wrote: where either
// converts (planner/conversion.h: the Pack narrows, the Unpack widens), other sizes than the
// message's bytes. A packed read reads the bytes its sender's Pack wrote: the message's.
void Engine::FindConvertingReads(const std::vector<DirectRead>& direct_reads) {
  auto bytes = [this](int op, bool from) {
    double total = 0;
    for (const CopyPair& c : plan_.Copies(plan_.ops[op])) {
      total += static_cast<double>(from ? c.from.NumBytes() : c.to.NumBytes());
    }
    return total;
  };
  for (const DirectRead& d : direct_reads) {
    const double message = static_cast<double>(plan_.ops[d.send_op].bytes);
    if (message <= 0 || !d.packed.empty()) continue;
    const double read = d.pack_op >= 0 ? bytes(d.pack_op, true) : message;
    const double written = d.unpack_op >= 0 ? bytes(d.unpack_op, false) : message;
    if (read == message && written == message) continue;
    if (converting_reads_.empty()) converting_reads_.resize(plan_.ops.size());
    ReadTraffic& t = converting_reads_[d.send_op];
    t = {static_cast<float>(read / message), static_cast<float>(written / message)};
    // The Pack narrows: a read into fp8 runs at fp8_convert_bandwidth of its copied bytes.
    if (d.pack_op >= 0 && NarrowsToFp8(plan_.ops[d.pack_op])) {
      t.cap = static_cast<float>(c_.fp8_convert_bandwidth * 2 / (read + written) * message);
    }
  }
}

// A quantizing direct read (core/runtime/quantizing_read.h) reads its message's bytes and writes
// the quantized blocks' as fp8 (1 / source element bytes as many) and the rest as copies; its
// kernels run at quantize_bandwidth (fp8 bytes written a second) for the blocks, so alone it moves
// its message at quantize_bandwidth x element bytes / the blocks' share of it. Each Quantize op
// keeps the share of its stack's elements no read quantized.
void Engine::FindQuantizingReads(const std::vector<DirectRead>& direct_reads) {
  std::vector<double> quantized;  // per Quantize op, the share of its elements reads quantized
  for (const DirectRead& d : direct_reads) {
    const double message = static_cast<double>(plan_.ops[d.send_op].bytes);
    if (!d.quantizing.quantizes() || message <= 0) continue;
    if (converting_reads_.empty()) converting_reads_.resize(plan_.ops.size());
    if (quantized.empty()) quantized.assign(plan_.ops.size(), 0);
    const int quantize = d.quantizing.rects.front().quantize;
    const double element = static_cast<double>(DTypeSize(plan_.Copy(plan_.ops[quantize].copies_begin).from.dtype));
    const double share = static_cast<double>(d.quantizing.rect_bytes) / message;
    converting_reads_[d.send_op] = {1.0f, static_cast<float>(1 - share + share / element),
                                    static_cast<float>(c_.quantize_bandwidth * element / share)};
    for (const QuantizingSplit::Rect& r : d.quantizing.rects) {
      const QuantizeShape shape = QuantizeShapeOf(plan_.Copy(plan_.ops[r.quantize].copies_begin).from);
      quantized[r.quantize] += static_cast<double>(ElementsOf(r.blocks, shape)) /
                               static_cast<double>(shape.matrices * shape.rows * shape.cols);
    }
  }
  if (quantized.empty()) return;
  quantize_left_.assign(plan_.ops.size(), 1.0f);
  for (size_t op = 0; op < quantized.size(); ++op) {
    quantize_left_[op] = static_cast<float>(std::max(0.0, 1.0 - quantized[op]));
  }
}

// Checks that message `id`'s sender op `s` and receiver op `r` (-1: none) agree, and pairs them.
Status Engine::MatchMessage(int64_t id, int s, int r) {
  if (s == -1 || r == -1) {
    int known = s == -1 ? r : s;
    return InvalidArgument("message " + std::to_string(id) + " has no " +
                           (s == -1 ? "sender" : "receiver") + " (op " + std::to_string(known) +
                           " on rank " + std::to_string(plan_.ops[known].rank) + ")");
  }
  const Op& so = plan_.ops[s];
  const Op& ro = plan_.ops[r];
  if (so.peer != ro.rank || ro.peer != so.rank) {
    return InvalidArgument("message " + std::to_string(id) + ": sender op " + std::to_string(s) +
                           " (rank " + std::to_string(so.rank) + " -> peer " +
                           std::to_string(so.peer) + ") and receiver op " + std::to_string(r) +
                           " (rank " + std::to_string(ro.rank) + ", peer " +
                           std::to_string(ro.peer) + ") disagree");
  }
  if (so.bytes != ro.bytes) {
    return InvalidArgument("message " + std::to_string(id) + ": sender has " +
                           std::to_string(so.bytes) + " bytes, receiver " +
                           std::to_string(ro.bytes));
  }
  partner_[s] = r;
  partner_[r] = s;
  return Status::Ok();
}

// The consumer of the gather-and-broadcast baseline loads each tensor of a bucket through vLLM's
// load_weights (NVIDIA-NeMo/RL nemo_rl/utils/packed_tensor.py, post_unpack_func): an Unpack into
// destination memory loads one tensor per copy pair (the planner's AddUnpack writes one pair per
// destination fragment of the bucket). The reshard writes in place: nothing to load.
void Engine::CountLoadedTensors() {
  if (c_.tensor_load_overhead <= 0 || plan_.strategy != "gather-broadcast") return;
  load_tensors_.assign(plan_.ops.size(), 0);
  for (const Op& o : plan_.ops) {
    if (o.kind != OpKind::kUnpack) continue;
    int tensors = 0;
    for (int i = o.copies_begin; i < o.copies_end; ++i) {
      tensors += plan_.GeometryOf(i).to_space == Space::kDestination;
    }
    load_tensors_[o.id] = tensors;
  }
}

double Engine::Post(int rank, double t) {
  if (c_.op_post_overhead <= 0) return t;
  post_free_[rank] = std::max(t, post_free_[rank]) + c_.op_post_overhead;
  return post_free_[rank];
}

double Engine::Load(int op, double t) {
  if (load_tensors_.empty() || load_tensors_[op] == 0) return t;
  double& lane = load_free_[plan_.ops[op].rank];
  lane = std::max(t, lane) + load_tensors_[op] * c_.tensor_load_overhead;
  return lane;
}

void Engine::BuildResources() {
  const int gpus = c_.TotalGpus();
  const int nodes = c_.num_nodes;
  const int nics = nodes * c_.nics_per_node;
  const std::array<std::pair<int, double>, kNumResourceKinds> layout = {{
      {gpus, c_.host_memory_ranks ? c_.host_memory_bandwidth : c_.copy_bandwidth},  // gpu_mem
      {gpus, c_.EffectiveNvlinkBandwidth()},                                         // nvlink_out
      {gpus, c_.EffectiveNvlinkBandwidth()},                                         // nvlink_in
      {nics, c_.EffectiveNicBandwidth()},                                            // nic_tx
      {nics, c_.EffectiveNicBandwidth()},                                            // nic_rx
      {nodes, c_.spine_bandwidth_per_node},                                          // spine_up
      {nodes, c_.spine_bandwidth_per_node},                                          // spine_down
      {gpus, c_.pcie_bandwidth},                                                     // pcie_d2h
      {gpus, c_.pcie_bandwidth},                                                     // pcie_h2d
      {nodes, c_.host_memory_bandwidth},                                             // host_mem
      {nodes, c_.host_message_bandwidth},                                            // loopback
      {TransportThreads(), c_.host_message_stream_bandwidth},                         // transport_thread
      {QuantizesOnCores() ? nodes : 0, c_.host_cores * CoreRate()},                   // host_cpu
  }};
  offset_[0] = 0;
  for (int k = 0; k < kNumResourceKinds; ++k) offset_[k + 1] = offset_[k] + layout[k].first;
  res_.resize(offset_[kNumResourceKinds]);
  for (int k = 0; k < kNumResourceKinds; ++k) {
    for (int i = 0; i < layout[k].first; ++i) {
      Resource& r = res_[offset_[k] + i];
      r.capacity = layout[k].second;
      r.kind = static_cast<ResourceKind>(k);
      r.index = i;
    }
  }
  link_mark_.assign(res_.size(), 0);
  residual_.assign(res_.size(), 0);
  share_.assign(res_.size(), 0);
  link_dirty_.assign(res_.size(), 0);
  count_.assign(res_.size(), 0);
  link_head_.assign(res_.size(), -1);
  bottlenecked_.assign(res_.size(), 0);
  if (opt_.record_ingress) ingress_.assign(nodes, std::vector<double>(opt_.ingress_buckets, 0.0));
}

// Op `op`'s deps completed at t: it becomes ready once its rank can place its staging slots.
void Engine::OnReady(int op, double t) {
  if (staging_.Admit(op)) BecomeReady(op, t);
}

void Engine::BecomeReady(int op, double t) {
  const Op& o = plan_.ops[op];
  if (!IsMessageKind(o.kind)) {
    times_[op].ready = t;
    StartLocalOp(op, t);
    return;
  }
  // A receive is ready once posted: its message starts no earlier (StartMessage).
  times_[op].ready = IsSenderKind(o.kind) ? t : Post(o.rank, t);
  const int p = partner_[op];
  if (times_[p].ready < 0) return;  // the partner starts the message when it becomes ready
  Admit(IsSenderKind(o.kind) ? op : p, t);
}

// Both sides of sender op `sender`'s message are ready: it starts now if its rank has fewer than
// max_in_flight messages moving, else it waits for one to finish, in (round, id) order.
void Engine::Admit(int sender, double t) {
  const Op& o = plan_.ops[sender];
  if (opt_.max_in_flight > 0 && posted_[o.rank] >= opt_.max_in_flight) {
    waiting_[o.rank].push(RoundKey(o));
    return;
  }
  ++posted_[o.rank];
  StartMessage(sender, partner_[sender], t);
}

// A Quantize op's memory traffic per byte it writes, in units of a copied byte (one read and one
// write): (source element bytes + 1) / 2, 1.5 from bf16; bf16 for an op without copies.
double Engine::QuantizeTrafficPerByte(const Op& o) const {
  const int64_t source = o.NumCopies() > 0 ? DTypeSize(plan_.Copy(o.copies_begin).from.dtype) : 2;
  return static_cast<double>(source + 1) / 2;
}

bool Engine::NarrowsToFp8(const Op& o) const {
  if (o.NumCopies() == 0) return false;
  const CopyPair first = plan_.Copy(o.copies_begin);
  return IsFp8(first.to.dtype) && !IsFp8(first.from.dtype);
}

double Engine::Fp8ConvertTraffic(const Op& o) const {
  if (!NarrowsToFp8(o)) return 0;
  double moved = 0;
  for (const CopyPair& c : plan_.Copies(o)) {
    moved += static_cast<double>(c.from.NumBytes() + c.to.NumBytes());
  }
  return moved / 2;
}

void Engine::StartLocalOp(int op, double t) {
  const Op& o = plan_.ops[op];
  const int gpu = GpuOf(o.rank);
  Flow f;
  f.op_a = op;
  if (!direct_role_.empty() && direct_role_[op] == DirectRole::kElided) {  // done when ready
    StartFlow(NewFlow(f), 0, t);
    return;
  }
  f.bytes = static_cast<double>(o.bytes);
  if (c_.host_memory_ranks && o.kind == OpKind::kQuantize && QuantizesOnCores()) {
    // CPU-bound: spread over the rank's copy threads, sharing the node's cores, not its memory.
    f.links[f.num_links++] = Res(ResourceKind::kHostCpu, NodeOfGpu(gpu));
    f.cap = std::min(c_.host_cores, kExecutorDefaultCopyThreadsMax) * CoreRate();
    f.weight = host_copy_slowdowns_[op];
  } else if (c_.host_memory_ranks) {
    f.links[f.num_links++] = Res(ResourceKind::kHostMem, NodeOfGpu(gpu));
    SetHostCopyStream(f, op);
  } else {
    f.links[f.num_links++] = Res(ResourceKind::kGpuMem, gpu);
    f.stream = o.rank;
    if (o.kind == OpKind::kQuantize) {
      // Its memory traffic in a copied byte's (one read, one write): it reads each element's source
      // and writes one fp8 byte. Capped so that alone it writes at quantize_bandwidth. Quantizing
      // reads leave it part of its rows, or none (then it launches nothing).
      f.weight = QuantizeTrafficPerByte(o);
      f.cap = c_.quantize_bandwidth * f.weight;
      if (!quantize_left_.empty()) {
        f.bytes *= quantize_left_[op];
        if (f.bytes <= 0) {
          StartFlow(NewFlow(f), 0, t);
          return;
        }
      }
    } else if (const double traffic = Fp8ConvertTraffic(o); traffic > 0 && f.bytes > 0) {
      f.weight = traffic / f.bytes;  // what fp8_convert_bandwidth counts, a byte of the op
      f.cap = c_.fp8_convert_bandwidth;
    } else if (o.kind != OpKind::kCopy) {
      f.cap = c_.pack_bandwidth;
    }
  }
  local_bytes_ += f.bytes;
  StartFlow(NewFlow(f), c_.kernel_overhead, Load(op, Post(o.rank, t)));
}

void Engine::StartMessage(int sender, int receiver, double t) {
  const Op& so = plan_.ops[sender];
  const Op& ro = plan_.ops[receiver];
  const int ga = GpuOf(so.rank);
  const int gb = GpuOf(ro.rank);
  const int na = NodeOfGpu(ga);
  const int nb = NodeOfGpu(gb);
  Flow f;
  f.bytes = static_cast<double>(so.bytes);
  f.op_a = sender;
  f.op_b = receiver;
  double overhead = 0;
  auto add = [&f](int r) { f.links[f.num_links++] = r; };
  if (ga == gb) {
    add(c_.host_memory_ranks ? Res(ResourceKind::kHostMem, na) : Res(ResourceKind::kGpuMem, ga));
    if (c_.host_memory_ranks) SetHostCopyStream(f, sender);
    overhead = c_.kernel_overhead;
    local_bytes_ += f.bytes;
  } else if (na == nb) {
    if (c_.host_memory_ranks) {
      add(Res(ResourceKind::kHostMem, na));
      if (c_.host_message_bandwidth > 0) add(Res(ResourceKind::kLoopback, na));
      AddTransportThreads(f, so.rank, ro.rank);
      SetHostCopyStream(f, sender);
    } else {
      add(Res(ResourceKind::kNvlinkOut, ga));
      add(Res(ResourceKind::kNvlinkIn, gb));
    }
    overhead = c_.nvlink_message_overhead;
    f.tail = c_.nvlink_latency;
    nvlink_bytes_ += f.bytes;
  } else {
    const int nic_a = NicOfGpu(ga);
    const int nic_b = NicOfGpu(gb);
    add(Res(ResourceKind::kNicTx, nic_a));
    add(Res(ResourceKind::kNicRx, nic_b));
    const bool cross_rail = (nic_a % c_.nics_per_node) != (nic_b % c_.nics_per_node);
    f.tail = c_.nic_latency;
    if (cross_rail && c_.rail_optimized) {
      f.tail += c_.cross_rail_latency;
      if (c_.spine_bandwidth_per_node > 0) {
        add(Res(ResourceKind::kSpineUp, na));
        add(Res(ResourceKind::kSpineDown, nb));
      }
    }
    if (c_.host_memory_ranks) {
      add(Res(ResourceKind::kHostMem, na));
      add(Res(ResourceKind::kHostMem, nb));
      AddTransportThreads(f, so.rank, ro.rank);
    } else if (!c_.gpu_direct) {
      add(Res(ResourceKind::kPcieD2H, ga));
      add(Res(ResourceKind::kPcieH2D, gb));
      add(Res(ResourceKind::kHostMem, na));
      add(Res(ResourceKind::kHostMem, nb));
      // One staging chunk is stored and forwarded at each end before the pipeline fills.
      double chunk = std::min(f.bytes, static_cast<double>(c_.staging_chunk_bytes));
      f.tail += 2 * chunk / c_.pcie_bandwidth;
    }
    overhead = c_.nic_message_overhead;
    f.ingress_node = nb;
    network_bytes_ += f.bytes;
  }
  if (!c_.host_memory_ranks && !direct_role_.empty() && direct_role_[sender] == DirectRole::kRead) {
    f.stream = ro.rank;  // the receiver's kernel copies the message
  }
  if (!converting_reads_.empty() && converting_reads_[sender].read > 0) {
    const ReadTraffic& traffic = converting_reads_[sender];
    SetConvertingRead(f, ga == gb, traffic);
    if (ga != gb) nvlink_bytes_ += f.bytes * (traffic.read - 1);
  }
  // The send is posted now, its window slot granted; the receive was posted when it was ready.
  StartFlow(NewFlow(f), overhead, std::max(Post(so.rank, t), times_[receiver].ready));
}

int Engine::NewFlow(const Flow& f) {
  int id;
  if (free_flows_.empty()) {
    id = static_cast<int>(flows_.size());
    flows_.push_back(f);
  } else {
    id = free_flows_.back();
    free_flows_.pop_back();
    flows_[id] = f;
  }
  flows_[id].seq = num_flows_++;
  return id;
}

// Starts flow `id` at t, its fixed cost `overhead` (seconds) charged as service on its links at
// the rate it would get alone: uncontended, it takes overhead + bytes / rate as before; sharing a
// link, every member's fixed cost takes the link's time.
//
// On a time-sliced GPU a kernel's cap is its rate while it runs, and it holds the whole GPU
// meanwhile: a kernel alone on gpu_mem below the link's capacity takes capacity / cap of service a
// byte instead, so alone it still runs at its cap, and two such kernels of different processes
// share the GPU's time rather than each running at its cap.
void Engine::StartFlow(int id, double overhead, double t) {
  Flow& f = flows_[id];
  if (TimeSliced() && f.num_links == 1 && res_[f.links[0]].kind == ResourceKind::kGpuMem &&
      f.cap < res_[f.links[0]].capacity) {
    f.weight *= res_[f.links[0]].capacity / f.cap;
    f.cap = kInf;
  }
  double alone = f.cap;
  for (int k = 0; k < f.num_links; ++k) alone = std::min(alone, res_[f.links[k]].capacity);
  f.work = f.bytes * f.weight + (alone < kInf ? overhead * alone : 0);
  Push(t, EventType::kFlowStart, id);
}

int Engine::ClassOf(const Flow& f) {
  if (2 * (classes_.size() + 1) > class_index_.size()) GrowClassIndex();
  const uint64_t h = ClassKeyHash(f);
  const size_t mask = class_index_.size() - 1;
  for (size_t i = h >> class_index_shift_;; i = (i + 1) & mask) {
    auto& [hash, id] = class_index_[i];
    if (id < 0) {
      hash = h;
      id = static_cast<int>(classes_.size());
      FlowClass& c = classes_.emplace_back().parked;
      c.links = f.links;
      c.num_links = f.num_links;
      c.cap = f.cap;
      c.ingress_node = f.ingress_node;
      c.cid = id;
      return id;
    }
    if (hash == h && SameClassKey(classes_[id].parked, f)) return id;
  }
}

void Engine::GrowClassIndex() {
  std::vector<std::pair<uint64_t, int>> old;
  old.swap(class_index_);
  const size_t size = std::max<size_t>(1024, 2 * old.size());
  class_index_.assign(size, {0, -1});
  class_index_shift_ = 64 - std::countr_zero(size);
  for (const auto& [hash, id] : old) {
    if (id < 0) continue;
    size_t i = hash >> class_index_shift_;
    while (class_index_[i].second >= 0) i = (i + 1) & (size - 1);
    class_index_[i] = {hash, id};
  }
}

int Engine::Activate(int cid) {
  int slot;
  if (free_slots_.empty()) {
    slot = static_cast<int>(active_.size());
    active_.emplace_back();
  } else {
    slot = free_slots_.back();
    free_slots_.pop_back();
  }
  active_[slot] = classes_[cid].parked;
  classes_[cid].slot = slot;
  return slot;
}

void Engine::Deactivate(int slot) {
  SetBottleneck(active_[slot], -1);
  ClassRecord& record = classes_[active_[slot].cid];
  record.parked = active_[slot];
  record.slot = -1;
  free_slots_.push_back(slot);
}

void Engine::ScheduleClassFinish(int cid, double now) {
  const int slot = classes_[cid].slot;
  if (slot >= 0) ScheduleFinish(slot, now);
}

void Engine::ScheduleFinish(int slot, double now) {
  const FlowClass& c = active_[slot];
  if (c.members == 0 || c.rate <= 0) {
    finish_heap_.Remove(slot);
    return;
  }
  double left = std::max(0.0, c.next_finish - c.service);
  finish_heap_.Set(slot, now + left / c.rate, c.cid);
}

// A kernel flow waits until its stream starts it: behind the launches made before it.
void Engine::OnFlowStart(int id, double t) {
  const Flow& f = flows_[id];
  if (f.stream < 0 || f.work <= 0) {
    RunFlow(id, t);
    return;
  }
  stream_starts_.clear();
  streams_[f.stream].Arrive(id, f.op_b >= 0, t, stream_starts_);
  for (int started : stream_starts_) RunFlow(started, t);
}

// Rank `stream`'s launch finished: the next one starts, and what it waited for last is the op
// whose kernel finished last (the critical path's link).
void Engine::OnStreamFree(int stream, double t) {
  stream_starts_.clear();
  streams_[stream].Next(stream_starts_);
  for (int id : stream_starts_) {
    const Flow& f = flows_[id];
    for (int op : {f.op_a, f.op_b}) {
      if (op >= 0) cause_[op] = stream_last_op_[stream];
    }
    RunFlow(id, t);
  }
}

void Engine::RunFlow(int id, double t) {
  Flow& f = flows_[id];
  if (f.op_a >= 0) times_[f.op_a].start = t;
  if (f.op_b >= 0) times_[f.op_b].start = t;
  if (f.work <= 0) {
    Push(t + f.tail, EventType::kOpDone, f.op_a);
    if (f.op_b >= 0) Push(t + f.tail, EventType::kOpDone, f.op_b);
    free_flows_.push_back(id);
    return;
  }
  const int cid = ClassOf(f);
  ClassRecord& m = classes_[cid];
  const int slot = m.slot >= 0 ? m.slot : Activate(cid);
  FlowClass& c = active_[slot];
  Settle(c, t);
  m.finishing.push({c.service + f.work, f.seq, id});
  c.next_finish = m.finishing.top().service;
  if (c.members++ == 0) {
    c.rate = 0;
    for (int k = 0; k < c.num_links; ++k) {
      Resource& r = res_[c.links[k]];
      m.pos[k] = static_cast<int>(r.classes.size());
      r.classes.push_back(slot);
      peak_link_classes_ = std::max(peak_link_classes_, static_cast<int>(r.classes.size()));
    }
  } else {
    // The newcomer takes its share at the class's current rate until Recompute says otherwise.
    for (int k = 0; k < c.num_links; ++k) res_[c.links[k]].allocated += c.rate;
  }
  MarkDirty(cid, t);
}

void Engine::Settle(FlowClass& c, double now) {
  double dt = now - c.t_last;
  if (dt > 0 && c.rate > 0 && c.members > 0) {
    if (c.ingress_node >= 0 && opt_.record_ingress) {
      DepositIngress(c.ingress_node, c.t_last, now, c.rate * dt * c.members);
    }
    c.service += c.rate * dt;
  }
  c.t_last = now;
}

void Engine::OnFlowFinish(int cid, double t) {
  ClassRecord& cm = classes_[cid];
  const int slot = cm.slot;
  FlowClass& c = active_[slot];
  Settle(c, t);
  const double slack = 1e-9 * std::max(1.0, c.service);
  while (c.members > 0 && cm.finishing.top().service <= c.service + slack) {
    const int id = cm.finishing.top().flow;
    cm.finishing.pop();
    --c.members;
    const Flow& f = flows_[id];
    for (int k = 0; k < c.num_links; ++k) {
      Resource& r = res_[c.links[k]];
      r.bytes_carried += f.bytes;
      r.allocated -= c.rate;
    }
    if (f.bytes > 0) {
      bottleneck_of_op_[f.op_a] = c.bottleneck;
      if (f.op_b >= 0) bottleneck_of_op_[f.op_b] = c.bottleneck;
    }
    if (f.stream >= 0) {
      stream_last_op_[f.stream] = f.op_a;
      if (streams_[f.stream].Finish()) Push(t, EventType::kStreamFree, f.stream);
    }
    Push(t + f.tail, EventType::kOpDone, f.op_a);
    if (f.op_b >= 0) Push(t + f.tail, EventType::kOpDone, f.op_b);
    free_flows_.push_back(id);
  }
  if (c.members > 0) c.next_finish = cm.finishing.top().service;
  if (c.members == 0) {
    for (int k = 0; k < c.num_links; ++k) {
      Resource& r = res_[c.links[k]];
      int p = cm.pos[k];
      int moved = r.classes.back();
      r.classes[p] = moved;
      r.classes.pop_back();
      if (moved != slot) {
        const FlowClass& m = active_[moved];
        for (int j = 0; j < m.num_links; ++j) {
          if (m.links[j] == c.links[k]) {
            classes_[m.cid].pos[j] = p;
            break;
          }
        }
      }
      if (r.classes.empty()) r.allocated = 0;
    }
    c.rate = 0;
    Deactivate(slot);
  }
  MarkDirty(cid, t);
}

void Engine::MarkDirty(int cid, double now) {
  if (dirty_classes_.empty()) dirty_since_ = now;
  if (class_dirty_.size() < classes_.size()) class_dirty_.resize(classes_.size(), 0);
  if (!class_dirty_[cid]) {
    class_dirty_[cid] = 1;
    dirty_classes_.push_back(cid);
  }
  const FlowClass& c = classes_[cid].parked;  // its links: the same idle or active
  for (int k = 0; k < c.num_links; ++k) {
    const int l = c.links[k];
    if (!link_dirty_[l]) {
      link_dirty_[l] = 1;
      dirty_links_.push_back(l);
    }
  }
}

void Engine::FlushDirty(double now) {
  if (dirty_classes_.empty()) return;
  for (int l : dirty_links_) link_dirty_[l] = 0;
  if (opt_.rate_slack > 0) {
    SeedUnabsorbed();
  } else {
    seed_links_.swap(dirty_links_);
  }
  dirty_links_.clear();
  if (!seed_links_.empty()) {
    ++num_recomputations_;
    Recompute(now);
  }
  for (int cid : dirty_classes_) {
    class_dirty_[cid] = 0;
    ScheduleClassFinish(cid, now);
  }
  dirty_classes_.clear();
}

void Engine::SeedUnabsorbed() {
  seed_links_.clear();
  ++stamp_;
  auto seed = [this](int l) {
    if (link_mark_[l] != stamp_) {
      link_mark_[l] = stamp_;
      seed_links_.push_back(l);
    }
  };
  for (int cid : dirty_classes_) {
    const int slot = classes_[cid].slot;
    if (slot < 0 || active_[slot].rate > 0) continue;
    const FlowClass& c = active_[slot];
    for (int k = 0; k < c.num_links; ++k) seed(c.links[k]);
  }
  for (int l : dirty_links_) {
    const Resource& r = res_[l];
    if (r.classes.empty()) continue;
    const double idle = r.capacity - r.allocated;
    if (idle < -kRelEps * r.capacity ||
        (idle > opt_.rate_slack * r.capacity && bottlenecked_[l] > 0)) {
      seed(l);
    }
  }
}

void Engine::SetBottleneck(FlowClass& c, int link) {
  if (c.bottleneck == link) return;
  if (c.bottleneck >= 0) --bottlenecked_[c.bottleneck];
  if (link >= 0) ++bottlenecked_[link];
  c.bottleneck = link;
}

// Progressive filling over the active classes on the seed links, with every other class's rate
// held fixed; then the same for the links of classes whose rate dropped, up to propagation_rounds
// times.
void Engine::Recompute(double now) {
  for (int round = 0; round <= opt_.propagation_rounds && !seed_links_.empty(); ++round) {
    if (!CollectAffected(round)) break;
    num_class_updates_ += static_cast<int64_t>(affected_.size());
    GatherLocalLinks(now);
    FillProgressively();
    ApplyRates(now);
  }
}

// affected_ = the active classes on the seed links, each once; false when there are none, or when
// a propagation round (round > 0) would recompute more than propagation_budget of them (found as
// soon as the budget is passed: most propagation rounds of a large plan are over it).
bool Engine::CollectAffected(int round) {
  ++stamp_;
  if (flow_mark_.size() < active_.size()) flow_mark_.resize(active_.size(), 0);
  affected_.clear();
  const size_t budget = round == 0 ? std::numeric_limits<size_t>::max()
                                   : static_cast<size_t>(opt_.propagation_budget);
  for (int l : seed_links_) {
    if (affected_.size() > budget) return false;
    for (int slot : res_[l].classes) {
      if (flow_mark_[slot] != stamp_) {
        flow_mark_[slot] = stamp_;
        affected_.push_back(slot);
        // GatherLocalLinks reads it next: start loading both of its cache lines.
        __builtin_prefetch(&active_[slot]);
        __builtin_prefetch(reinterpret_cast<const char*>(&active_[slot]) + 64);
      }
    }
  }
  return !affected_.empty() && affected_.size() <= budget;
}

// Settles the affected classes at `now` and collects their links (local_links_): each link's
// capacity left by the classes held fixed (residual_), its affected members (count_) and the list
// of its affected classes (link_head_ / member_next_ / member_slot_); and the affected classes with
// a per-flow cap (cap_order_, by index, for FillProgressively to sort).
void Engine::GatherLocalLinks(double now) {
  local_links_.clear();
  // Sized for every link of every affected class once, then filled by index: no growth checks.
  const size_t most = affected_.size() * kMaxFlowLinks;
  if (member_slot_.size() < most) {
    member_slot_.resize(most);
    member_next_.resize(most);
  }
  int entries = 0;
  cap_order_.clear();
  for (size_t i = 0; i < affected_.size(); ++i) {
    FlowClass& c = active_[affected_[i]];
    Settle(c, now);
    if (c.cap < kInf) cap_order_.push_back(static_cast<int>(i));
    for (int k = 0; k < c.num_links; ++k) {
      const int l = c.links[k];
      if (link_mark_[l] != stamp_) {
        link_mark_[l] = stamp_;
        local_links_.push_back(l);
        residual_[l] = res_[l].capacity - res_[l].allocated;
        count_[l] = 0;
        link_head_[l] = -1;
      }
      member_slot_[entries] = static_cast<int>(i);
      member_next_[entries] = link_head_[l];
      link_head_[l] = entries++;
      residual_[l] += c.rate * c.members;
      count_[l] += c.members;
    }
  }
}

// Max-min rates of the affected classes on the local links (new_rate_, new_bottleneck_): the link
// with the smallest fair share (residual / unfixed members), or the smallest per-flow cap if that
// is lower, fixes its unfixed classes at that level, until every class is fixed. Fixing a class at
// a level no higher than any share only raises its other links' shares, so the heap of shares is
// refreshed lazily: every link keeps an entry no higher than its current share, and an entry below
// it is updated when it reaches the top. The link picked is the one the eager heap (an entry pushed
// at every change) picks: the least share, ties to the lower link id.
void Engine::FillProgressively() {
  const size_t n = affected_.size();
  new_rate_.assign(n, 0);
  new_bottleneck_.assign(n, -1);
  fixed_.assign(n, 0);
  size_t unfixed = n;
  auto share = [this](int l) { return std::max(0.0, residual_[l]) / count_[l]; };
  link_heap_.Clear();
  for (int l : local_links_) {
    if (count_[l] == 0) continue;
    share_[l] = share(l);
    link_heap_.Append(share_[l], l);
  }
  link_heap_.Build();
  // cap_order_ holds the affected classes with a cap (GatherLocalLinks), by index.
  std::sort(cap_order_.begin(), cap_order_.end(), [&](int x, int y) {
    return active_[affected_[x]].cap < active_[affected_[y]].cap;
  });
  size_t next_cap = 0;
  // Inlined at both calls: called once per class, its call overhead was a tenth of its cost.
  auto fix = [&](int i, double level, int bottleneck) __attribute__((always_inline)) {
    fixed_[i] = 1;
    new_rate_[i] = level;
    new_bottleneck_[i] = bottleneck;
    --unfixed;
    const FlowClass& c = active_[affected_[i]];
    for (int k = 0; k < c.num_links; ++k) {
      const int l = c.links[k];
      if (count_[l] == c.members) {  // its last unfixed class: the link leaves the filling
        residual_[l] -= level * c.members;
        count_[l] = 0;
        continue;
      }
      const double before = share_[l];
      residual_[l] -= level * c.members;
      count_[l] -= c.members;
      // Rounding can lower a share by an ulp: queue the lower value, as the refresh only raises.
      const double after = share_[l] = share(l);
      if (after < before) link_heap_.Push(after, l);
    }
  };
  while (unfixed > 0) {
    while (!link_heap_.Empty()) {
      const auto [stored, l] = link_heap_.Top();
      if (count_[l] == 0) {
        link_heap_.Pop();
        continue;
      }
      const double current = share_[l];
      if (stored == current) break;
      link_heap_.ReplaceTop(current, l);
    }
    while (next_cap < cap_order_.size() && fixed_[cap_order_[next_cap]]) ++next_cap;
    const double link_level = link_heap_.Empty() ? kInf : link_heap_.Top().first;
    const double cap_level =
        next_cap < cap_order_.size() ? active_[affected_[cap_order_[next_cap]]].cap : kInf;
    if (link_heap_.Empty() && next_cap >= cap_order_.size()) break;  // defensive: no constraint
    if (cap_level <= link_level) {
      fix(cap_order_[next_cap], cap_level, -1);
      continue;
    }
    const int l = link_heap_.Top().second;
    link_heap_.Pop();
    for (int e = link_head_[l]; e >= 0; e = member_next_[e]) {
      const int i = member_slot_[e];
      if (!fixed_[i]) fix(i, link_level, l);
    }
  }
}

// Moves the affected classes to their new rates (rescheduling their next finish); the links of
// those whose rate dropped become the next round's seed links.
void Engine::ApplyRates(double now) {
  seed_links_.clear();
  ++stamp_;  // fresh link marks for the next round's seed set
  for (size_t i = 0; i < affected_.size(); ++i) {
    FlowClass& c = active_[affected_[i]];
    const double old = c.rate;
    const double rate = new_rate_[i];
    SetBottleneck(c, new_bottleneck_[i]);
    if (std::abs(rate - old) <= kRelEps * std::max(rate, old)) continue;
    for (int k = 0; k < c.num_links; ++k) res_[c.links[k]].allocated += (rate - old) * c.members;
    c.rate = rate;
    ScheduleFinish(affected_[i], now);
    if (rate < old) {
      for (int k = 0; k < c.num_links; ++k) {
        const int l = c.links[k];
        if (link_mark_[l] != stamp_) {
          link_mark_[l] = stamp_;
          seed_links_.push_back(l);
        }
      }
    }
  }
}

void Engine::DepositIngress(int node, double t0, double t1, double bytes) {
  const int nb = opt_.ingress_buckets;
  while (t1 > bucket_ * nb) {
    for (auto& series : ingress_) {
      for (int i = 0; i < nb / 2; ++i) series[i] = series[2 * i] + series[2 * i + 1];
      for (int i = nb / 2; i < nb; ++i) series[i] = 0;
    }
    bucket_ *= 2;
  }
  if (t1 <= t0) {
    ingress_[node][std::min(nb - 1, static_cast<int>(t0 / bucket_))] += bytes;
    return;
  }
  const double rate = bytes / (t1 - t0);
  int b = static_cast<int>(t0 / bucket_);
  double t = t0;
  while (t < t1 && b < nb) {
    double edge = std::min(t1, (b + 1) * bucket_);
    ingress_[node][b] += rate * (edge - t);
    t = edge;
    ++b;
  }
}

void Engine::OnOpDone(int op, double t) {
  times_[op].end = t;
  ++ops_done_;
  const Op& o = plan_.ops[op];
  if (IsSenderKind(o.kind)) {
    --posted_[o.rank];
    auto& queue = waiting_[o.rank];
    if (!queue.empty()) {
      const int next = IdOfRoundKey(queue.top());
      queue.pop();
      ++posted_[o.rank];
      StartMessage(next, partner_[next], t);
    }
  }
  staging_admitted_.clear();
  staging_.Finish(op, staging_admitted_);
  for (int a : staging_admitted_) BecomeReady(a, t);
  for (int i = dependents_begin_[op]; i < dependents_begin_[op + 1]; ++i) {
    int d = dependents_[i];
    cause_[d] = op;  // events arrive in time order, so the last completing dep wins
    if (--pending_[d] == 0) OnReady(d, t);
  }
}

std::string Engine::DescribeResource(int r) const {
  if (r < 0) return "its own throughput limit";
  const Resource& res = res_[r];
  std::ostringstream out;
  out << ResourceKindName(res.kind) << "[";
  switch (res.kind) {
    case ResourceKind::kNicTx:
    case ResourceKind::kNicRx:
      out << "node " << res.index / c_.nics_per_node << " nic " << res.index % c_.nics_per_node;
      break;
    case ResourceKind::kSpineUp:
    case ResourceKind::kSpineDown:
    case ResourceKind::kHostMem:
    case ResourceKind::kLoopback:
    case ResourceKind::kHostCpu:
      out << "node " << res.index;
      break;
    case ResourceKind::kTransportThread:
      out << "rank " << res.index;
      break;
    default:
      out << "gpu " << res.index;
  }
  out << "]";
  return out.str();
}

std::string Engine::DescribeOp(int op) const {
  const Op& o = plan_.ops[op];
  std::ostringstream out;
  if (IsMessageKind(o.kind)) {
    int s = IsSenderKind(o.kind) ? op : partner_[op];
    const Op& so = plan_.ops[s];
    int ga = GpuOf(so.rank), gb = GpuOf(so.peer);
    const char* path = ga == gb ? "same gpu" : NodeOfGpu(ga) == NodeOfGpu(gb) ? "nvlink" : "network";
    out << OpKindName(so.kind) << " r" << so.rank << "->r" << so.peer << " "
        << FormatBytes(static_cast<double>(so.bytes)) << " (" << path << ")";
  } else {
    out << OpKindName(o.kind) << " r" << o.rank << " " << FormatBytes(static_cast<double>(o.bytes));
  }
  if (bottleneck_of_op_[op] != kNoBottleneck) {
    out << ", limited by " << DescribeResource(bottleneck_of_op_[op]);
  }
  return out.str();
}

void Engine::BuildCriticalPath(SimResult& result) const {
  int cur = -1;
  for (size_t i = 0; i < times_.size(); ++i) {
    if (cur < 0 || times_[i].end > times_[cur].end) cur = static_cast<int>(i);
  }
  std::vector<CriticalStep> steps;
  while (cur >= 0 && steps.size() < 100000) {
    int gate = cur;
    int shown = cur;
    if (partner_[cur] >= 0) {
      int p = partner_[cur];
      if (times_[p].ready > times_[cur].ready) gate = p;
      shown = IsSenderKind(plan_.ops[cur].kind) ? cur : p;
    }
    steps.push_back({shown, times_[shown].start, times_[cur].end, DescribeOp(shown)});
    cur = cause_[gate];
  }
  std::reverse(steps.begin(), steps.end());
  result.critical_path = std::move(steps);
}

void Engine::BuildUtilisation(SimResult& result, double total) const {
  for (int k = 0; k < kNumResourceKinds; ++k) {
    LinkClassUsage u;
    u.kind = static_cast<ResourceKind>(k);
    u.links_total = offset_[k + 1] - offset_[k];
    double sum_util = 0;
    for (int i = offset_[k]; i < offset_[k + 1]; ++i) {
      const Resource& r = res_[i];
      if (r.bytes_carried <= 0) continue;
      ++u.links_used;
      u.bytes += r.bytes_carried;
      double util = total > 0 && r.capacity > 0 ? r.bytes_carried / (r.capacity * total) : 0;
      sum_util += util;
      u.max_utilisation = std::max(u.max_utilisation, util);
    }
    if (u.links_used == 0) continue;
    u.mean_utilisation = sum_util / u.links_used;
    result.utilisation.push_back(u);
  }
}

// Sorts `ops` stably by round (ops in id order come out in (round, id) order): least significant
// digit first, 16 bits of the round's offset from the least round a pass, so one pass while the
// rounds span fewer than 65,536 values and two at most. Linear in the ops, where a comparison sort
// of the hundreds of thousands ready at the start took a few percent of the simulator.
void Engine::SortStablyByRound(std::vector<int>& ops) const {
  if (ops.empty()) return;
  int least = std::numeric_limits<int>::max(), most = std::numeric_limits<int>::min();
  for (int op : ops) {
    least = std::min(least, plan_.ops[op].round);
    most = std::max(most, plan_.ops[op].round);
  }
  const uint32_t span = static_cast<uint32_t>(static_cast<int64_t>(most) - least);
  std::vector<int> sorted(ops.size());
  std::vector<size_t> start(size_t{1} << 16);
  for (int shift = 0; shift == 0 || (shift < 32 && (span >> shift) != 0); shift += 16) {
    const auto digit = [&](int op) {
      const int64_t offset = static_cast<int64_t>(plan_.ops[op].round) - least;
      return (static_cast<uint32_t>(offset) >> shift) & 0xFFFF;
    };
    std::fill(start.begin(), start.end(), 0);
    for (int op : ops) ++start[digit(op)];
    size_t next = 0;
    for (size_t& s : start) next += std::exchange(s, next);
    for (int op : ops) sorted[start[digit(op)]++] = op;
    ops.swap(sorted);
  }
}

// Ops ready at the start: their staging is granted per rank in (round, id) order, and message
// ops are posted per rank in (round, id) order, as the executor does with everything ready at
// once. Its per-op scratch is freed before the event loop.
void Engine::StartInitialOps() {
  const int n = static_cast<int>(plan_.ops.size());
  std::vector<int> initial;  // the ops ready at the start, in id order
  for (int i = 0; i < n; ++i) {
    if (pending_[i] == 0) initial.push_back(i);
  }
  SortStablyByRound(initial);
  std::vector<char> admitted(n, 0);
  for (int i : initial) admitted[i] = staging_.Admit(i);
  // The receives ready at the start are posted in (round, id) order too.
  std::vector<double> posted;
  if (opt_.max_in_flight > 0 && c_.op_post_overhead > 0) {
    posted.assign(n, 0.0);
    for (int i : initial) {
      const Op& o = plan_.ops[i];
      if (admitted[i] && o.kind == OpKind::kRecv) posted[i] = Post(o.rank, 0.0);
    }
  }
  for (int i = 0; i < n; ++i) {
    if (pending_[i] != 0 || !admitted[i]) continue;
    const Op& o = plan_.ops[i];
    if (opt_.max_in_flight > 0 && IsMessageKind(o.kind)) {
      times_[i].ready = posted.empty() ? 0.0 : posted[i];
      const int p = partner_[i];
      const int sender = IsSenderKind(o.kind) ? i : p;
      if (times_[p].ready >= 0) {
        waiting_[plan_.ops[sender].rank].push(RoundKey(plan_.ops[sender]));
      }
    } else {
      BecomeReady(i, 0.0);
    }
  }
  for (int rank = 0; rank < plan_.num_ranks; ++rank) {
    auto& queue = waiting_[rank];
    while (!queue.empty() && posted_[rank] < opt_.max_in_flight) {
      const int op = IdOfRoundKey(queue.top());
      queue.pop();
      ++posted_[rank];
      StartMessage(op, partner_[op], 0.0);
    }
  }
}

Result<SimResult> Engine::Run() {
  FERRY_RETURN_IF_ERROR(Prepare());
  BuildResources();
  batch_window_ = std::max(opt_.rate_batch_window, 4 * c_.op_post_overhead);
  const int n = static_cast<int>(plan_.ops.size());
  for (int r = 0; r < plan_.num_ranks; ++r) {
    if (GpuOf(r) < 0 || GpuOf(r) >= c_.TotalGpus()) {
      return InvalidArgument("rank " + std::to_string(r) + " is mapped to GPU " +
                             std::to_string(GpuOf(r)) + " outside the cluster's " +
                             std::to_string(c_.TotalGpus()) + " GPUs");
    }
  }
  if (opt_.progress != nullptr) opt_.progress->ops_total.store(n, std::memory_order_relaxed);
  StartInitialOps();
  // How many events pass between two publications of the progress: a few milliseconds' work.
  constexpr int64_t kProgressEvents = 4096;
  double now = 0;
  while (!events_.empty() || !finish_heap_.Empty()) {
    if (++num_events_ % kProgressEvents == 0) PublishProgress(now);
    if (!finish_heap_.Empty() &&
        (events_.empty() || finish_heap_.TopTime() <= events_.top().t)) {
      const int slot = finish_heap_.Top();
      const int cid = active_[slot].cid;
      double t = finish_heap_.TopTime();
      finish_heap_.Remove(slot);
      OnFlowFinish(cid, t);
      FlushUnlessMoreAt(t);
      now = t;
      continue;
    }
    Event e = events_.top();
    events_.pop();
    now = e.t;
    switch (e.type) {
      case EventType::kFlowStart: OnFlowStart(e.id, e.t); break;
      case EventType::kOpDone: OnOpDone(e.id, e.t); break;
      case EventType::kStreamFree: OnStreamFree(e.id, e.t); break;
    }
    FlushUnlessMoreAt(e.t);
  }
  int never = 0, example = -1;
  for (int i = 0; i < n; ++i) {
    if (times_[i].end < 0) {
      ++never;
      if (example < 0) example = i;
    }
  }
  if (never > 0) {
    const Op& o = plan_.ops[example];
    std::string why = pending_[example] > 0      ? "waits on deps that never finish (a cycle?)"
                      : staging_.Waiting(example) ? "waits for staging that never frees"
                                                  : "waits for its message partner, which never ran";
    return InvalidArgument(std::to_string(never) + " ops never ran; e.g. op " +
                           std::to_string(example) + " (" + std::string(OpKindName(o.kind)) +
                           " on rank " + std::to_string(o.rank) + ") " + why);
  }
  SimResult result;
  for (const OpTime& time : times_) result.total_time = std::max(result.total_time, time.end);
  PublishProgress(result.total_time);
  result.num_ops = n;
  result.num_messages = num_messages_;
  result.num_events = num_events_;
  result.peak_link_classes = peak_link_classes_;
  result.num_recomputations = num_recomputations_;
  result.num_class_updates = num_class_updates_;
  result.staging_waits = staging_.waits();
  result.network_bytes = network_bytes_;
  result.nvlink_bytes = nvlink_bytes_;
  result.local_bytes = local_bytes_;
  BuildUtilisation(result, result.total_time);
  BuildCriticalPath(result);
  if (opt_.record_op_times) result.op_times = std::move(times_);
  if (opt_.record_ingress) {
    result.ingress.bucket_seconds = bucket_;
    result.ingress.bytes = ingress_;
  }
  result.cluster = c_;
  result.mapping = map_;
  return result;
}

}  // namespace

Result<SimResult> Simulate(const TransferPlan& plan, const ClusterSpec& cluster,
                           const RankMapping& mapping, const SimOptions& options) {
  if (options.ingress_buckets < 2 || options.ingress_buckets % 2 != 0) {
    return InvalidArgument("ingress_buckets must be an even number >= 2");
  }
  if (options.propagation_rounds < 0) return InvalidArgument("propagation_rounds must be >= 0");
  if (options.propagation_budget < 0) return InvalidArgument("propagation_budget must be >= 0");
  if (!(options.rate_batch_window >= 0)) return InvalidArgument("rate_batch_window must be >= 0");
  if (!(options.rate_slack >= 0 && options.rate_slack < 1)) {
    return InvalidArgument("rate_slack must be in [0, 1)");
  }
  FERRY_ASSIGN_OR_RETURN(ClusterSpec fitted, FitClusterToMapping(cluster, mapping));
  Engine engine(plan, fitted, mapping, options);
  return engine.Run();
}

}  // namespace ferry::sim
