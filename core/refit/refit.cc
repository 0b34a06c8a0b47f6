// RefitPlan (planning from a Config) and Refit (a plan bound to a session: registration, runs).
#include "core/refit/refit.h"

#include <chrono>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "core/cuda/pointer.h"
#include "core/refit/memory_check.h"
#include "core/refit/rest_exchange.h"
#include "core/refit/topology_check.h"

namespace ferry {

Result<std::shared_ptr<const RefitPlan>> RefitPlan::Make(Layout source, Layout destination,
                                                         Topology topology, Strategy strategy,
                                                         const Config& config) {
  return Make(std::make_shared<const Layout>(std::move(source)),
              std::make_shared<const Layout>(std::move(destination)), std::move(topology), strategy,
              config);
}

Result<std::shared_ptr<const RefitPlan>> RefitPlan::Make(std::shared_ptr<const Layout> source,
                                                         std::shared_ptr<const Layout> destination,
                                                         Topology topology, Strategy strategy,
                                                         const Config& config) {
  FERRY_ASSIGN_OR_RETURN(PlannerOptions options, PlannerOptions::FromConfig(config));
  return Make(std::move(source), std::move(destination), std::move(topology), strategy, options);
}

Result<std::shared_ptr<const RefitPlan>> RefitPlan::Make(std::shared_ptr<const Layout> source,
                                                         std::shared_ptr<const Layout> destination,
                                                         Topology topology, Strategy strategy,
                                                         const PlannerOptions& options) {
  if (source == nullptr || destination == nullptr) return InvalidArgument("RefitPlan::Make: no layout");
  std::shared_ptr<RefitPlan> refit(new RefitPlan());
  refit->source_ = std::move(source);
  refit->destination_ = std::move(destination);
  refit->topology_ = std::move(topology);
  refit->strategy_ = strategy;
  refit->options_ = options;
  const auto start = std::chrono::steady_clock::now();
  Result<PlanResult> planned =
      MakePlan(strategy, *refit->source_, *refit->destination_, refit->topology_, options);
  if (!planned.ok()) {
    return planned.status().WithContext(std::string(StrategyName(strategy)) + " planning");
  }
  refit->planning_seconds_ =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  refit->planned_ = std::move(*planned);
  return std::shared_ptr<const RefitPlan>(std::move(refit));
}

PlanStats RefitPlan::Stats() const { return ComputePlanStats(plan(), topology_, &planned_.demand); }

std::array<int64_t, 3> Refit::BytesByLink(const TransferPlan& plan, int rank) {
  std::array<int64_t, 3> bytes{};
  for (int id : plan.OpsOfRank(rank)) {
    const Op& op = plan.ops[id];
    if (op.kind == OpKind::kCopy || op.kind == OpKind::kConvert || op.kind == OpKind::kSend ||
        op.kind == OpKind::kForward) {
      bytes[static_cast<int>(op.link)] += op.bytes;
    }
  }
  return bytes;
}

namespace {

// Bytes of `layout`'s fragments on `rank` (0 when it holds none).
int64_t BytesHeldBy(const Layout& layout, int rank) {
  const std::map<int, int64_t> per_rank = layout.BytesPerRank();
  const auto it = per_rank.find(rank);
  return it == per_rank.end() ? 0 : it->second;
}

// The executor reads and writes CUDA buffers on a stream of its own, which does not wait for the
// caller's streams (torch's current stream, CuPy's, ...): work the caller queued on the device of
// its buffers (one device: the executor refuses more) is finished first, so the sources hold what
// the caller wrote — on every stream of the device, or only on `caller_stream` when one is named.
Status WaitForCallersDeviceWork(const RankMemory& memory, bool one_stream, void* caller_stream) {
  std::set<int> devices;
  for (const auto* table : {&memory.source, &memory.destination}) {
    for (const MemoryDesc& m : *table) {
      if (m.base != nullptr && m.kind == MemoryKind::kCuda) devices.insert(m.device);
    }
  }
  for (int device : devices) {
    FERRY_RETURN_IF_ERROR(one_stream ? cuda::SynchronizeStreamOn(device, caller_stream)
                                     : cuda::SynchronizeDevice(device));
  }
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<Refit>> Refit::Create(Session& session, std::shared_ptr<const RefitPlan> plan) {
  if (plan == nullptr) return InvalidArgument("Refit::Create: no plan");
  Communicator& communicator = session.communicator();
  if (plan->plan().num_ranks != communicator.size()) {
    return InvalidArgument("the plan is for " + std::to_string(plan->plan().num_ranks) +
                           " ranks but the session has " + std::to_string(communicator.size()));
  }
  FERRY_RETURN_IF_ERROR(CheckTopologyMatches(plan->topology(), communicator)
                            .WithContext("rank " + std::to_string(communicator.rank())));
  FERRY_ASSIGN_OR_RETURN(double refit_seconds, session.config().GetSeconds("deadline.refit"));
  std::unique_ptr<Refit> refit(new Refit(session, std::move(plan)));
  refit->refit_seconds_ = refit_seconds;
  return refit;
}

Result<std::unique_ptr<Refit>> Refit::Create(Session& session, std::shared_ptr<const RefitPlan> plan,
                                             const ExecutorOptions& executor_options) {
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<Executor> executor,
                         Executor::Create(session.communicator(), executor_options));
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<Refit> refit, Create(session, std::move(plan)));
  refit->own_executor_ = std::move(executor);
  refit->executor_ = refit->own_executor_.get();
  return refit;
}

Refit::Refit(Session& session, std::shared_ptr<const RefitPlan> plan)
    : session_(session), plan_(std::move(plan)), executor_(&session.executor()) {
  memory_.source.resize(plan_->plan().source_buffers.size());
  memory_.destination.resize(plan_->plan().destination_buffers.size());
  const int rank = session_.communicator().rank();
  bytes_by_link_ = BytesByLink(plan_->plan(), rank);
  bytes_delivered_ = BytesHeldBy(plan_->destination(), rank);
  for (const Space space : {Space::kSource, Space::kDestination}) {
    const Layout& layout = space == Space::kSource ? plan_->source() : plan_->destination();
    std::vector<int>& mine = space == Space::kSource ? own_sources_ : own_destinations_;
    for (size_t b = 0; b < layout.buffers.size(); ++b) {
      if (layout.buffers[b].rank == rank) mine.push_back(static_cast<int>(b));
    }
  }
}

Status Refit::Register(Space space, int buffer, MemoryDesc memory) {
  const bool is_source = space == Space::kSource;
  const Layout& layout = is_source ? plan_->source() : plan_->destination();
  const std::string side = is_source ? "source" : "destination";
  const int rank = session_.communicator().rank();
  if (buffer < 0 || buffer >= static_cast<int>(layout.buffers.size())) {
    return InvalidArgument(side + " buffer " + std::to_string(buffer) + " does not exist (the layout has " +
                           std::to_string(layout.buffers.size()) + ")");
  }
  const BufferSpec& spec = layout.buffers[buffer];
  const std::string what = side + " buffer '" + spec.name + "'";
  if (spec.rank != rank) {
    return InvalidArgument(what + " belongs to rank " + std::to_string(spec.rank) + ", not to rank " +
                           std::to_string(rank));
  }
  FERRY_RETURN_IF_ERROR(CheckMemory(what, memory, spec.bytes));
  (is_source ? memory_.source : memory_.destination)[buffer] = memory;
  return Status::Ok();
}

Result<int> Refit::BufferNamed(Space space, std::string_view name) const {
  const bool is_source = space == Space::kSource;
  const Layout& layout = is_source ? plan_->source() : plan_->destination();
  const int rank = session_.communicator().rank();
  for (size_t b = 0; b < layout.buffers.size(); ++b) {
    if (layout.buffers[b].rank == rank && layout.buffers[b].name == name) return static_cast<int>(b);
  }
  return NotFound(std::string(is_source ? "source" : "destination") + " layout has no buffer '" +
                  std::string(name) + "' on rank " + std::to_string(rank));
}

Status Refit::RegisterSource(int buffer, MemoryDesc memory) { return Register(Space::kSource, buffer, memory); }

Status Refit::RegisterDestination(int buffer, MemoryDesc memory) {
  return Register(Space::kDestination, buffer, memory);
}

Status Refit::RegisterSource(std::string_view name, MemoryDesc memory) {
  FERRY_ASSIGN_OR_RETURN(int buffer, BufferNamed(Space::kSource, name));
  return Register(Space::kSource, buffer, memory);
}

Status Refit::RegisterDestination(std::string_view name, MemoryDesc memory) {
  FERRY_ASSIGN_OR_RETURN(int buffer, BufferNamed(Space::kDestination, name));
  return Register(Space::kDestination, buffer, memory);
}

Status Refit::CheckRegistered(Space space) const {
  const bool is_source = space == Space::kSource;
  const Layout& layout = is_source ? plan_->source() : plan_->destination();
  const std::vector<MemoryDesc>& memory = is_source ? memory_.source : memory_.destination;
  const int rank = session_.communicator().rank();
  for (int b : is_source ? own_sources_ : own_destinations_) {
    if (memory[static_cast<size_t>(b)].base == nullptr) {
      return FailedPrecondition(std::string(is_source ? "source" : "destination") + " buffer '" +
                                layout.buffers[b].name + "' of rank " + std::to_string(rank) +
                                " is not registered");
    }
  }
  return Status::Ok();
}

Result<RefitStats> Refit::Run() { return Run(DefaultDeadline()); }

Result<RefitStats> Refit::Run(Deadline deadline) { return RunAfter(deadline, false, nullptr); }

Result<RefitStats> Refit::Run(Deadline deadline, void* caller_stream) {
  return RunAfter(deadline, true, caller_stream);
}

Result<RefitStats> Refit::RunAfter(Deadline deadline, bool one_stream, void* caller_stream) {
  FERRY_RETURN_IF_ERROR(CheckRegistered(Space::kSource));
  FERRY_RETURN_IF_ERROR(CheckRegistered(Space::kDestination));
  const auto start = std::chrono::steady_clock::now();
  FERRY_RETURN_IF_ERROR(WaitForCallersDeviceWork(memory_, one_stream, caller_stream));
  carried_complete_.clear();
  FERRY_ASSIGN_OR_RETURN(RefitStats stats, RunPlan(plan_, deadline));
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  stats.bytes_by_link = bytes_by_link_;
  stats.bytes_delivered = bytes_delivered_;
  return stats;
}

Result<RefitStats> Refit::RunPlan(const std::shared_ptr<const RefitPlan>& plan, Deadline deadline) {
  RefitStats stats;
  Result<ExecutorStats> ran = executor_->Run(plan->plan(), memory_, deadline);
  last_completed_ops_ = executor_->TakeLastRunCompletedOps();
  if (last_plan_ != plan) writers_.reset();
  last_plan_ = plan;
  FERRY_ASSIGN_OR_RETURN(stats.executor, std::move(ran));
  return stats;
}

Result<RefitStats> Refit::RunRest(Deadline deadline) {
  FERRY_RETURN_IF_ERROR(CheckRegistered(Space::kSource));
  FERRY_RETURN_IF_ERROR(CheckRegistered(Space::kDestination));
  const Layout& destination = plan_->destination();
  if (!CanRunRest(destination)) {
    return InvalidArgument("RunRest: the destination has block-scaled (fp8_block) buffers, whose "
                           "values and scales are written together; run the whole refit");
  }
  const auto start = std::chrono::steady_clock::now();
  FERRY_RETURN_IF_ERROR(WaitForCallersDeviceWork(memory_, false, nullptr));
  Communicator& comm = session_.communicator();
  // Keys count the calls of this epoch: a replacement, whose Refit is new, joins the count there.
  if (rest_epoch_ != comm.epoch()) rest_calls_ = 0;
  rest_epoch_ = comm.epoch();
  const std::string key = "ferry/refit-rest/e" + std::to_string(comm.epoch()) + "/c" +
                          std::to_string(++rest_calls_) + "/r";
  const std::vector<int> mine = CompleteDestinationTensors();
  FERRY_RETURN_IF_ERROR(
      session_.store().Set(key + std::to_string(comm.rank()), EncodeTensorList(mine), deadline));
  const int num_tensors = static_cast<int>(destination.tensors.size());
  std::vector<std::vector<int>> complete(static_cast<size_t>(comm.size()));
  for (int r = 0; r < comm.size(); ++r) {
    FERRY_ASSIGN_OR_RETURN(Bytes bytes, session_.store().Get(key + std::to_string(r), deadline));
    FERRY_ASSIGN_OR_RETURN(complete[static_cast<size_t>(r)], DecodeTensorList(bytes, num_tensors, r));
  }
  FERRY_ASSIGN_OR_RETURN(
      std::shared_ptr<const RefitPlan> rest,
      RefitPlan::Make(plan_->shared_source(),
                      std::make_shared<const Layout>(WithoutCompleteFragments(destination, complete)),
                      plan_->topology(), plan_->strategy(), plan_->options()));
  carried_complete_ = mine;
  FERRY_ASSIGN_OR_RETURN(RefitStats stats, RunPlan(rest, deadline));
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  stats.bytes_by_link = BytesByLink(rest->plan(), comm.rank());
  stats.bytes_delivered = BytesHeldBy(rest->destination(), comm.rank());
  return stats;
}

std::vector<int> Refit::CompleteDestinationTensors() const {
  if (last_plan_ == nullptr) return {};
  if (!writers_) {
    writers_ = DestinationWriters::For(last_plan_->plan(), last_plan_->destination(),
                                       session_.communicator().rank());
  }
  std::vector<int> complete = writers_->Complete(last_completed_ops_);
  complete.insert(complete.end(), carried_complete_.begin(), carried_complete_.end());
  std::sort(complete.begin(), complete.end());
  return complete;
}

}  // namespace ferry
