// The planner's entry points: PlanReshard runs its passes (stack folding, intersection, demand,
// routing, source selection, message order, emission), PlanGatherBroadcast the baseline, both on
// layouts whose tensor stacks agree (rewriting one or both first when they do not).
#include "planner/planner.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/base/fp8_block.h"
#include "core/layout/tensor_stack.h"
#include "planner/block_quantize.h"
#include "planner/demand.h"
#include "planner/distinct_pieces.h"
#include "planner/element_transforms.h"
#include "planner/emit.h"
#include "planner/fold_stacks.h"
#include "planner/gather_broadcast.h"
#include "planner/intersect.h"
#include "planner/messages.h"
#include "planner/plan_facts.h"
#include "planner/routing.h"
#include "planner/select_sources.h"
#include "planner/tree_table.h"

namespace ferry {

std::string_view StrategyName(Strategy strategy) {
  return strategy == Strategy::kReshard ? "reshard" : "gather-broadcast";
}

Result<Strategy> ParseStrategy(std::string_view name) {
  if (name == "reshard") return Strategy::kReshard;
  if (name == "gather-broadcast") return Strategy::kGatherBroadcast;
  return InvalidArgument("unknown strategy '" + std::string(name) +
                         "' (expected reshard or gather-broadcast)");
}

namespace {

// Seconds since the previous call (the first call starts the clock).
class PhaseClock {
 public:
  double Lap() {
    const auto now = std::chrono::steady_clock::now();
    const double seconds = std::chrono::duration<double>(now - last_).count();
    last_ = now;
    return seconds;
  }

 private:
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
};

// The intersection of the layouts: as given, or (with `fold`) of the layouts without their
// folded fragments followed by that of the stack layouts, whose fragments and tensors are
// numbered after the layouts' own. `dtypes` gets the destination tensors' dtypes, numbered alike,
// and `source_dtypes` the source tensors'.
Result<Intersection> IntersectForPlan(const Layout& source, const Layout& destination,
                                      StackFold* fold, std::vector<DType>& dtypes,
                                      std::vector<DType>& source_dtypes) {
  dtypes = DTypesOf(destination);
  source_dtypes = DTypesOf(source);
  if (fold == nullptr) return IntersectLayouts(source, destination);
  FERRY_ASSIGN_OR_RETURN(Intersection inter, IntersectLayouts(source, destination, &fold->source,
                                                              &fold->destination));
  FERRY_ASSIGN_OR_RETURN(Intersection stacked,
                         IntersectLayouts(fold->source.stacks(), fold->destination.stacks()));
  AppendIntersection(inter, std::move(stacked), static_cast<int>(source.tensors.size()),
                     static_cast<int>(destination.tensors.size()));
  const std::vector<DType> stacked_dtypes = DTypesOf(fold->destination.stacks());
  dtypes.insert(dtypes.end(), stacked_dtypes.begin(), stacked_dtypes.end());
  const std::vector<DType> stacked_source_dtypes = DTypesOf(fold->source.stacks());
  source_dtypes.insert(source_dtypes.end(), stacked_source_dtypes.begin(),
                       stacked_source_dtypes.end());
  return inter;
}

// Frees what emission does not read (planner/emit.h) before it allocates the plan: routing's
// deliveries (the message order holds them as emission reads them), their same-node candidates
// and the pieces' holders. This lowers the planner's peak memory, not what it emits.
void FreeBeforeEmission(Intersection& inter, Routes& routes) {
  std::vector<Delivery>().swap(routes.deliveries);
  std::vector<int>().swap(routes.intra_pool);
  std::vector<int>().swap(inter.holders);
}

// The reshard planner proper, on the layouts as given or (with `fold`) with their folded
// fragments planned as the stack layouts' (planner/fold_stacks.h). `clock` started with the
// planning; `fold_seconds` is already spent.
Result<PlanResult> PlanReshardOf(const Layout& source, const Layout& destination, StackFold* fold,
                                 const Topology& topology, const PlannerOptions& options,
                                 PhaseClock& clock, double fold_seconds) {
  PlanResult result;
  result.phases.fold = fold_seconds;
  TransferPlan& plan = result.plan;
  plan.source_buffers = source.buffers;
  plan.destination_buffers = destination.buffers;
  const int num_ranks = NumRanksOf(plan.source_buffers, plan.destination_buffers);
  FERRY_RETURN_IF_ERROR(CheckTopology(topology, num_ranks));
  std::vector<DType> dtypes, source_dtypes;
  FERRY_ASSIGN_OR_RETURN(Intersection inter,
                         IntersectForPlan(source, destination, fold, dtypes, source_dtypes));
  SplitOverlappingGroups(inter);  // each distinct byte a node needs enters it once
  const int num_nodes = std::max(1, topology.NumNodes());
  plan.strategy = "reshard";
  plan.num_ranks = num_ranks;
  const PlanFacts facts(inter, dtypes, source_dtypes, topology);
  result.demand = ComputeDemand(inter, facts, num_nodes);
  // Relay between destination nodes when the sources' egress bounds the refit more than the
  // destinations' ingress.
  const LowerBound bound = ComputeLowerBound(result.demand, topology);
  const bool relay = options.relay == RelayMode::kOn ||
                     (options.relay == RelayMode::kAuto &&
                      bound.source_egress_seconds > bound.destination_ingress_seconds);
  result.phases.intersect = clock.Lap();

  TreeTable trees(num_ranks);
  Routes routes = RouteDeliveries(inter, facts, options, relay, num_ranks, num_nodes, trees);
  result.phases.route = clock.Lap();
  SelectSources(inter, facts, topology, trees, num_ranks, num_nodes, routes);
  result.phases.select = clock.Lap();
  const MessageOrder order = OrderMessages(inter, facts, options, trees, routes, num_nodes);
  result.phases.order = clock.Lap();
  FreeBeforeEmission(inter, routes);

  const FragmentsById src_frags(source, fold != nullptr ? &fold->source.stacks() : nullptr);
  const FragmentsById dst_frags(destination,
                                fold != nullptr ? &fold->destination.stacks() : nullptr);
  EmitOps({inter, facts, src_frags, dst_frags, trees, routes, order, num_ranks}, plan);
  result.phases.emit = clock.Lap();
  return result;
}

// PlanReshard on layouts whose stacks agree: folds what the layouts list member by member.
Result<PlanResult> PlanReshardWithFold(const Layout& source, const Layout& destination,
                                       const Topology& topology, const PlannerOptions& options,
                                       PhaseClock& clock) {
  StackFold fold;
  const bool folded = FoldTensorStacks(source, destination, fold);
  const double fold_seconds = clock.Lap();
  if (folded) {
    Result<PlanResult> plan =
        PlanReshardOf(source, destination, &fold, topology, options, clock, fold_seconds);
    if (plan.ok()) {
      plan->stacks = fold.stacks;
      return plan;
    }
    // The stacks hide the original tensors: plan the layouts as given to report the error in
    // their terms.
  }
  return PlanReshardOf(source, destination, nullptr, topology, options, clock, fold_seconds);
}

// Calls `plan` with the layouts when their tensor stacks agree (core/layout/tensor_stack.h).
// Otherwise one of them lists the members of a stack the other has, and only the layout with
// fewer fragments is rewritten, where that suffices: its members of the other's stacks are stacked
// (StackMembers, merging runs of members at a constant stride), or else its own stacks are
// expanded into members (UnstackTensors, planned then with stack folding). Failing that, both are
// restacked, and as a last resort (other ranges of one family, a member of another shape) both
// are expanded into members, so planning reports any mismatch in their terms. Rewritten layouts
// live for the call only: a plan keeps no pointer into its layouts.
template <typename PlanFn>
Result<PlanResult> WithAgreeingStacks(const Layout& source, const Layout& destination,
                                      PlanFn plan) {
  if (TensorStacksAgree(source, destination)) return plan(source, destination);
  auto has_stacks = [](const Layout& layout) {
    return std::any_of(layout.tensors.begin(), layout.tensors.end(), [](const TensorSpec& t) {
      return ParseTensorStackName(t.name).has_value();
    });
  };
  // `layout` with its members of `other`'s stacks stacked; nullopt when it lists none of them or
  // they do not fit the stacks.
  auto restacked = [](const Layout& layout, const Layout& other) -> std::optional<Layout> {
    const std::vector<TensorSpec> missing = StacksMissingIn(layout, other);
    if (missing.empty()) return std::nullopt;
    int64_t members = 0;
    Result<Layout> out = StackMembers(layout, missing, &members);
    if (!out.ok() || members == 0) return std::nullopt;
    return std::move(*out);
  };
  const bool source_smaller = source.fragments.size() <= destination.fragments.size();
  const Layout& smaller = source_smaller ? source : destination;
  const Layout& larger = source_smaller ? destination : source;
  auto agree = [&](const Layout& small) {
    return source_smaller ? TensorStacksAgree(small, larger) : TensorStacksAgree(larger, small);
  };
  auto plan_with = [&](const Layout& small) {
    return source_smaller ? plan(small, larger) : plan(larger, small);
  };
  const std::optional<Layout> smaller_restacked = restacked(smaller, larger);
  if (smaller_restacked && agree(*smaller_restacked)) return plan_with(*smaller_restacked);
  if (has_stacks(smaller)) {
    Result<Layout> expanded = UnstackTensors(smaller);
    if (expanded.ok() && agree(*expanded)) return plan_with(*expanded);
  }
  {
    const std::optional<Layout> larger_restacked = restacked(larger, smaller);
    if (smaller_restacked || larger_restacked) {
      const Layout& small = smaller_restacked ? *smaller_restacked : smaller;
      const Layout& large = larger_restacked ? *larger_restacked : larger;
      const Layout& s = source_smaller ? small : large;
      const Layout& d = source_smaller ? large : small;
      if (TensorStacksAgree(s, d)) return plan(s, d);
    }
  }
  // A layout without stacks is its own expansion: only the others are copied.
  Layout source_members, destination_members;
  if (has_stacks(source)) {
    FERRY_ASSIGN_OR_RETURN(source_members, UnstackTensors(source).WithContext("source layout"));
  }
  if (has_stacks(destination)) {
    FERRY_ASSIGN_OR_RETURN(destination_members,
                           UnstackTensors(destination).WithContext("destination layout"));
  }
  return plan(has_stacks(source) ? source_members : source,
              has_stacks(destination) ? destination_members : destination);
}

// What the layouts force onto the network, whichever plan runs: the reshard's demand, from the
// intersection PlanReshard computes (stacks made to agree, then folded), without the plan.
Result<NetworkDemand> LayoutDemand(const Layout& source, const Layout& destination,
                                   const Topology& topology) {
  Result<PlanResult> demand =
      WithAgreeingStacks(source, destination, [&](const Layout& s, const Layout& d) -> Result<PlanResult> {
        StackFold fold;
        const bool folded = FoldTensorStacks(s, d, fold);
        std::vector<DType> dtypes, source_dtypes;
        Result<Intersection> inter =
            IntersectForPlan(s, d, folded ? &fold : nullptr, dtypes, source_dtypes);
        if (!inter.ok() && folded) inter = IntersectForPlan(s, d, nullptr, dtypes, source_dtypes);
        if (!inter.ok()) return inter.status();
        SplitOverlappingGroups(*inter);  // each distinct byte a node needs counted once
        PlanResult out;
        out.demand = ComputeDemand(*inter, PlanFacts(*inter, dtypes, source_dtypes, topology),
                                   std::max(1, topology.NumNodes()));
        return out;
      });
  if (!demand.ok()) return demand.status();
  return std::move(demand->demand);
}

}  // namespace

Result<PlanResult> PlanReshard(const Layout& source, const Layout& destination,
                               const Topology& topology, const PlannerOptions& options) {
  if (options.network_chunk_bytes < 64 || options.same_node_chunk_bytes < 64 ||
      options.fanout_chunk_bytes < 64 || options.relay_chunk_bytes < 64) {
    return InvalidArgument("chunk sizes must be at least 64 bytes");
  }
  // Block-scaled fp8 destinations are planned as twins of the source's dtype, then quantized;
  // tensors stored through an element function likewise, then converted.
  FERRY_ASSIGN_OR_RETURN(const BlockQuantizeLayout quantize, PrepareBlockQuantize(source, destination));
  const Layout& quantized = quantize.twins.empty() ? destination : quantize.destination;
  FERRY_ASSIGN_OR_RETURN(const ElementTransformLayout transform, PrepareElementTransforms(source, quantized));
  const Layout& planned = transform.twins.empty() ? quantized : transform.destination;
  FERRY_RETURN_IF_ERROR(CheckNoStoredTransforms(source, planned));
  PlannerOptions chunking = options;
  if (!quantize.twins.empty()) chunking.chunk_row_align = kFp8BlockSize;
  PhaseClock clock;
  Result<PlanResult> result = WithAgreeingStacks(source, planned, [&](const Layout& s, const Layout& d) {
    return PlanReshardWithFold(s, d, topology, chunking, clock);
  });
  if (result.ok()) {
    FinishElementTransforms(transform, quantized, result->plan);
    FinishBlockQuantize(quantize, destination, result->plan);
  }
  return result;
}

Result<PlanResult> PlanGatherBroadcast(const Layout& source, const Layout& destination,
                                       const Topology& topology, const PlannerOptions& options) {
  if (!destination.block_scaled.empty()) {
    return InvalidArgument("the gather-and-broadcast baseline does not quantize into block-scaled fp8 "
                           "buffers (destination buffer '" +
                           destination.buffers[static_cast<size_t>(destination.block_scaled.front().buffer)].name +
                           "'); the reshard strategy does");
  }
  FERRY_ASSIGN_OR_RETURN(const ElementTransformLayout transform, PrepareElementTransforms(source, destination));
  const Layout& planned = transform.twins.empty() ? destination : transform.destination;
  FERRY_RETURN_IF_ERROR(CheckNoStoredTransforms(source, planned));
  // Before the plan grows, so that the intersection is freed first.
  FERRY_ASSIGN_OR_RETURN(NetworkDemand demand, LayoutDemand(source, planned, topology));
  // NeMo RL packs tensor by tensor, a layer's experts one by one (nemo_rl/utils/packed_tensor.py),
  // so buckets are cut between the members of tensor stacks, not around whole stacks. The
  // destination's stacks are cut where they are unpacked; unstacking its fragments would take one
  // a member and rank.
  FERRY_ASSIGN_OR_RETURN(const Layout s, UnstackTensors(source).WithContext("source layout"));
  Result<PlanResult> result = PlanGatherBroadcastOf(s, planned, topology, options);
  if (result.ok()) {
    result->demand = std::move(demand);
    FinishElementTransforms(transform, destination, result->plan);
  }
  return result;
}

Result<PlanResult> MakePlan(Strategy strategy, const Layout& source, const Layout& destination,
                            const Topology& topology, const PlannerOptions& options) {
  if (strategy == Strategy::kReshard) return PlanReshard(source, destination, topology, options);
  return PlanGatherBroadcast(source, destination, topology, options);
}

}  // namespace ferry
