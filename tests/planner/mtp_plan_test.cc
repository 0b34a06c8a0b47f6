// The reshard plan of a refit with multi-token prediction layers on both sides, Megatron tp=2,
// pp=2 with the MTP block on its last stage -> vLLM tp=2 with the MTP drafter: executed on host
// memory element by element, every destination byte of the drafter's layer arrives from the
// trainer's MTP block; an engine with the drafter and a trainer without MTP is refused.
#include <gtest/gtest.h>

#include <string>

#include "core/plan/validate.h"
#include "planner/planner.h"
#include "tests/planner/plan_sim_testutil.h"
#include "tools/models/framework_layouts.h"
#include "tools/models/presets.h"

namespace ferry {
namespace {

bool IsMtpTensor(const std::string& name) { return name.rfind("model.layers.61.", 0) == 0; }

TEST(MtpPlan, EveryMtpByteArrives) {
  Result<models::ModelPreset> preset = models::MakePreset("deepseek-v3", 1.0 / 256);
  ASSERT_TRUE(preset.ok()) << preset.status().ToString();
  Result<models::RefitLayouts> refit = models::BuildRefitLayouts(
      *preset, models::ParseFrameworkSpec("megatron:tp=2,pp=2,first=31,mtp=1").value(),
      models::ParseFrameworkSpec("vllm:tp=2,mtp=1").value(), models::RefitOptions{});
  ASSERT_TRUE(refit.ok()) << refit.status().ToString();
  const Layout& destination = refit->destination;
  // The drafter's tensors are there to deliver: its norms, eh_proj and decoder layer, experts
  // included (as tensor stacks).
  int64_t mtp_bytes = 0;
  for (const Fragment& f : destination.fragments) {
    const TensorSpec& t = destination.tensors[f.tensor];
    if (IsMtpTensor(t.name)) mtp_bytes += f.box.Volume() * DTypeSize(t.dtype);
  }
  for (const char* name : {"model.layers.61.eh_proj.weight", "model.layers.61.enorm.weight",
                           "model.layers.61.shared_head.norm.weight",
                           "model.layers.61.self_attn.kv_b_proj.weight",
                           "model.layers.61.mlp.experts.[0:256].down_proj.weight"}) {
    EXPECT_GE(destination.FindTensor(name), 0) << name;
  }
  EXPECT_GT(mtp_bytes, 0);

  Result<PlanResult> r = PlanReshard(refit->source, destination, refit->topology);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  Status valid = ValidatePlan(r->plan, refit->source, destination);
  ASSERT_TRUE(valid.ok()) << valid.ToString();
  // Every byte of every destination fragment, the MTP layer's among them, holds the source's value
  // and is written exactly once.
  Status exec = testing::ExecuteAndCheck(r->plan, refit->source, destination);
  ASSERT_TRUE(exec.ok()) << exec.ToString();
}

TEST(MtpPlan, DrafterWithoutATrainerMtpBlockIsRefused) {
  Result<models::ModelPreset> preset = models::MakePreset("deepseek-v3", 1.0 / 256);
  ASSERT_TRUE(preset.ok());
  const models::FrameworkSpec engine = models::ParseFrameworkSpec("vllm:tp=2,mtp=1").value();
  Result<models::RefitLayouts> refit = models::BuildRefitLayouts(
      *preset, models::ParseFrameworkSpec("megatron:tp=2,pp=2,first=31").value(), engine);
  ASSERT_FALSE(refit.ok());
  EXPECT_NE(refit.status().message().find("give the source mtp=1"), std::string::npos)
      << refit.status().ToString();
  // Layouts built apart: the planner names the first tensor without a source.
  Result<Layout> source = models::BuildFrameworkLayout(
      *preset, models::ParseFrameworkSpec("megatron:tp=2,pp=2,first=31").value());
  Result<Layout> destination = models::BuildFrameworkLayout(*preset, engine, 4);
  ASSERT_TRUE(source.ok() && destination.ok());
  Result<PlanResult> r = PlanReshard(*source, *destination, Topology::Uniform(6, 8));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("'model.layers.61."), std::string::npos)
      << r.status().ToString();
  EXPECT_NE(r.status().message().find("does not exist in the source"), std::string::npos)
      << r.status().ToString();
}

}  // namespace
}  // namespace ferry
