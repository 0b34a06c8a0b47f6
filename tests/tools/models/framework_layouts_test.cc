// Tests for tools/models/framework_layouts: expert stacks and members hold the same bytes under
// either framework, a refit's ranks and topology, and building the largest presets at scale.
#include "tools/models/framework_layouts.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "core/layout/limits.h"
#include "core/layout/tensor_stack.h"
#include "tests/tools/models/framework_layouts_testutil.h"

namespace ferry::models {
namespace {

// A fragment in terms that do not depend on tensor or buffer numbering.
using PlacedFragment = std::tuple<std::string, std::string, int, std::string, int64_t,
                                  std::vector<int64_t>>;
std::vector<PlacedFragment> Placed(const Layout& l) {
  std::vector<PlacedFragment> out;
  for (const Fragment& f : l.fragments) {
    out.emplace_back(
        l.tensors[f.tensor].name, f.box.ToString(), f.loc.rank, l.buffers[f.loc.buffer].name,
        f.loc.byte_offset,
        std::vector<int64_t>(f.loc.strides.begin(), f.loc.strides.begin() + f.box.ndim));
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Experts as tensor stacks (the default) and as the checkpoint's expert tensors are the same bytes
// in the same buffers: the stacked layout expanded into members equals the member layout, fragment
// for fragment, with equal buffer sizes, and stacks take one fragment per rank and projection
// (per expert where each expert has its own buffer).
TEST(FrameworkLayoutTest, ExpertStacksHoldTheMembersBytes) {
  for (const auto& [model, scale] : {std::pair<const char*, double>{"qwen3-30b-a3b", 1.0 / 64},
                                     {"deepseek-v3", 1.0 / 64}}) {
    ModelPreset p = Preset(model, scale);
    for (const std::string spec :
         {"megatron:tp=2,pp=2,first=31,ep=4,etp=1", "megatron:tp=2,pp=2,first=31,ep=4,etp=2",
          "megatron:tp=2,pp=2,first=31,ep=4,etp=1,experts=grouped",
          "megatron:tp=2,pp=2,first=31,ep=4,etp=1,experts=single_grouped",
          "megatron:tp=2,pp=2,first=31,ep=4,etp=1,experts=legacy_grouped", "vllm:tp=2,dp=2,ep=4",
          "vllm:tp=2,dp=2",
          "vllm:tp=2,dp=2,ep=4,engines=2"}) {
      SCOPED_TRACE(std::string(model) + " " + spec);
      const Layout stacked = BuildAsSpecified(p, spec, 3);
      const Layout members = BuildAsSpecified(p, spec + ",expert_tensors=members", 3);
      const Layout expanded = UnstackTensors(stacked).value();
      EXPECT_EQ(Placed(expanded), Placed(members));
      ASSERT_EQ(stacked.buffers.size(), members.buffers.size());
      std::map<std::pair<int, std::string>, int64_t> sizes;
      for (const BufferSpec& b : members.buffers) sizes[{b.rank, b.name}] = b.bytes;
      for (const BufferSpec& b : stacked.buffers) EXPECT_EQ((sizes[{b.rank, b.name}]), b.bytes);
      int stacks = 0;
      for (const TensorSpec& t : stacked.tensors) stacks += ParseTensorStackName(t.name) ? 1 : 0;
      EXPECT_EQ(stacked.tensors.size() - stacks,
                members.tensors.size() - stacks * p.config().num_experts);
      if (spec.find("single_grouped") != std::string::npos ||
          spec.find("legacy_grouped") != std::string::npos || spec.find("vllm") == 0) {
        EXPECT_LT(stacked.fragments.size(), members.fragments.size());
      } else {  // one buffer per expert: one fragment per expert either way
        EXPECT_EQ(stacked.fragments.size(), members.fragments.size());
      }
    }
  }
}

TEST(RefitLayoutsTest, RanksAndTopology) {
  ModelPreset p = Preset("qwen3-30b-a3b", 1.0 / 64);
  RefitOptions options;
  options.gpus_per_node = 4;
  Result<RefitLayouts> r =
      BuildRefitLayouts(p, Spec("megatron:tp=2,pp=2,ep=4,etp=1"), Spec("vllm:tp=2,dp=2"), options);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->source.Ranks().front(), 0);
  EXPECT_EQ(r->source.Ranks().back(), 7);
  EXPECT_EQ(r->destination_first_rank, 8);
  EXPECT_EQ(r->destination.Ranks().front(), 8);
  EXPECT_EQ(r->destination.Ranks().back(), 11);
  EXPECT_EQ(r->topology.NumRanks(), 12);
  EXPECT_EQ(r->topology.NumNodes(), 3);
  options.colocated = true;
  r = BuildRefitLayouts(p, Spec("megatron:tp=2,pp=2,ep=4,etp=1"), Spec("vllm:tp=2,dp=2"), options);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->destination.Ranks().front(), 0);
  EXPECT_EQ(r->topology.NumRanks(), 8);
  options.gpus_per_node = 0;
  EXPECT_FALSE(BuildRefitLayouts(p, Spec("vllm"), Spec("vllm"), options).ok());
}

// A first rank that puts the layout's ranks past kMaxRanks is refused, naming the largest first
// rank that fits, before any per-rank table is built (a first rank near 2^31 used to end in
// std::bad_alloc).
TEST(FrameworkLayoutTest, FirstRankPastTheRankLimitIsRefused) {
  ModelPreset p = Preset("llama-3.1-8b", 1.0 / 64);
  const FrameworkSpec spec = Spec("megatron:tp=2");
  for (int first_rank : {kMaxRanks - 1, 2000000000}) {
    Result<Layout> r = BuildFrameworkLayout(p, spec, first_rank);
    ASSERT_FALSE(r.ok()) << first_rank;
    EXPECT_NE(r.status().message().find("kMaxRanks"), std::string::npos) << r.status().ToString();
    EXPECT_NE(r.status().message().find("at most " + std::to_string(kMaxRanks - 2)),
              std::string::npos)
        << r.status().ToString();
  }
  Result<Layout> last_fit = BuildFrameworkLayout(p, spec, kMaxRanks - 2);
  ASSERT_TRUE(last_fit.ok()) << last_fit.status().ToString();
  EXPECT_EQ(last_fit->Ranks().back(), kMaxRanks - 1);
}

#if defined(__SANITIZE_ADDRESS__)
constexpr double kCpuBudgetSeconds = 20.0;  // ASan/UBSan builds run several times slower
#else
constexpr double kCpuBudgetSeconds = 2.0;
#endif

// Building the full DeepSeek-V3 and Kimi-K2 layouts at 512-1024 ranks must stay interactive.
TEST(FrameworkLayoutSpeedTest, DeepseekAndKimiAtScale) {
  for (const char* model : {"deepseek-v3", "kimi-k2"}) {
    ModelPreset p = Preset(model, 1.0);
    const std::clock_t cpu_start = std::clock();
    const auto start = std::chrono::steady_clock::now();
    Result<RefitLayouts> r =
        BuildRefitLayouts(p, Spec("megatron:tp=1,pp=16,first=3,last=2,ep=64"),  // 1024 ranks
                          Spec("vllm:tp=8,dp=16,ep=128,engines=4"));            // 512 ranks
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double cpu_seconds = static_cast<double>(std::clock() - cpu_start) / CLOCKS_PER_SEC;
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->source.Ranks().size(), 1024u);
    EXPECT_EQ(r->destination.Ranks().size(), 512u);
    RecordProperty(std::string(model) + "_cpu_seconds", std::to_string(cpu_seconds));
    std::printf("%s: %zu + %zu fragments in %.3f s wall, %.3f s CPU\n", model,
                r->source.fragments.size(), r->destination.fragments.size(), seconds, cpu_seconds);
    // CPU time, not wall time, so a loaded machine does not fail the test.
    EXPECT_LT(cpu_seconds, kCpuBudgetSeconds) << "expected well under 1 s";
  }
}

}  // namespace
}  // namespace ferry::models

