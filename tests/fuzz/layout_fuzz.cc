// Fuzz target: the layout reader, validation, and — for a layout that validates — planning it
// against itself and validating the plan: a layout that validates must never crash `plan`.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "core/layout/layout_io.h"
#include "core/layout/topology.h"
#include "core/layout/validate.h"
#include "core/plan/validate.h"
#include "planner/planner.h"
#include "tests/fuzz/fuzz_driver.h"

namespace ferry {
namespace {

int LayoutTarget(const uint8_t* data, size_t size) {
  Result<Layout> layout = ParseLayoutYaml(std::string(reinterpret_cast<const char*>(data), size));
  if (!layout.ok() || !ValidateLayout(*layout).ok()) return 0;
  // Keep each run short: planning is bounded by the layout's size, which small inputs keep small.
  std::vector<int> ranks = layout->Ranks();
  if (ranks.empty() || layout->fragments.size() > 256 || ranks.back() >= 64) return 0;
  if (layout->LogicalBytes() > (int64_t{1} << 24)) return 0;  // the plan's copies are checked per byte
  Topology topology = Topology::Uniform(ranks.back() + 1, 4);
  Result<PlanResult> plan = PlanReshard(*layout, *layout, topology);
  if (plan.ok()) (void)ValidatePlan(plan->plan, *layout, *layout);
  Result<PlanResult> baseline = PlanGatherBroadcast(*layout, *layout, topology);
  if (baseline.ok()) (void)ValidatePlan(baseline->plan, *layout, *layout);
  return 0;
}

int TopologyTarget(const uint8_t* data, size_t size) {
  Result<Topology> topology =
      ParseTopologyYaml(std::string(reinterpret_cast<const char*>(data), size));
  if (topology.ok()) (void)(topology->NumNodes() + topology->NicsPerNode());
  return 0;
}

TEST(LayoutFuzz, ReadValidateAndPlan) {
  fuzz::FuzzSummary s = fuzz::RunFuzzer(&LayoutTarget, {"layout", "tests/fuzz/corpus/layout"});
  EXPECT_GT(s.corpus_inputs, 0);
}

TEST(TopologyFuzz, Read) {
  fuzz::FuzzSummary s = fuzz::RunFuzzer(&TopologyTarget, {"topology", "tests/fuzz/corpus/topology", 1});
  EXPECT_GT(s.corpus_inputs, 0);
}

}  // namespace
}  // namespace ferry
