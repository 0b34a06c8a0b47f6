// Tests for tools/models/framework_spec: parsing, canonical text, defaults and the divisibility
// checks of resolving a spec against a model.
#include "tools/models/framework_spec.h"

#include <gtest/gtest.h>

#include <string>

namespace ferry::models {
namespace {

FrameworkSpec Spec(const std::string& text) {
  Result<FrameworkSpec> s = ParseFrameworkSpec(text);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.value();
}

// Specs whose parallel sizes multiply past kMaxRanks are refused before any layout is built (the
// product of two legal sizes, 2^20 each, also overflows int).
TEST(FrameworkSpecTest, WorldsBeyondTheRankLimitAreRefused) {
  ModelConfig qwen = PresetConfig("qwen3-235b-a22b").value();
  for (const char* text : {"vllm:tp=4,dp=1048576", "vllm:tp=4,engines=1048576",
                           "megatron:tp=4,cp=1048576,dp=1048576", "megatron:tp=4,dp=100000"}) {
    Result<FrameworkSpec> r = ResolveFrameworkSpec(Spec(text), qwen);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_NE(r.status().message().find("kMaxRanks"), std::string::npos) << r.status().ToString();
  }
}

TEST(FrameworkSpecTest, ParsesAndResolves) {
  FrameworkSpec m = Spec("megatron:tp=2,pp=4,first=23,last=23,ep=16");  // 94 = 23 + 2*24 + 23
  EXPECT_EQ(m.kind, FrameworkSpec::Kind::kMegatron);
  EXPECT_EQ(m.megatron.tp, 2);
  EXPECT_EQ(m.megatron.pp, 4);
  EXPECT_EQ(m.megatron.ep, 16);
  ModelConfig qwen = PresetConfig("qwen3-235b-a22b").value();
  FrameworkSpec r = ResolveFrameworkSpec(m, qwen).value();
  EXPECT_EQ(r.megatron.etp, 2);  // Megatron's default: etp = tp
  EXPECT_EQ(r.megatron.dp, 16);  // 2 * 16 / 2
  EXPECT_EQ(NumRanks(r), 128);
  EXPECT_EQ(r.ToString(), "megatron:tp=2,pp=4,first=23,last=23,ep=16,etp=2,dp=16,cp=1");
  FrameworkSpec v = Spec("vllm:tp=8, dp=2 ,ep=16");
  EXPECT_EQ(NumRanks(v), 16);
  EXPECT_EQ(v.ToString(), "vllm:tp=8,dp=2,ep=16");
  EXPECT_EQ(NumRanks(Spec("vllm")), 1);
  EXPECT_EQ(m.megatron.experts, MegatronExpertStorage::kSequential);  // Megatron-Core's default
  FrameworkSpec grouped = Spec("megatron:ep=4,experts=grouped");
  EXPECT_EQ(grouped.megatron.experts, MegatronExpertStorage::kGrouped);
  EXPECT_EQ(grouped.ToString(), "megatron:tp=1,pp=1,ep=4,cp=1,experts=grouped");
  EXPECT_EQ(Spec("megatron:ep=4,experts=single_grouped").megatron.experts,
            MegatronExpertStorage::kSingleGrouped);
  EXPECT_EQ(Spec("megatron:ep=4,experts=legacy_grouped").megatron.experts,
            MegatronExpertStorage::kLegacyGrouped);
  EXPECT_TRUE(m.stack_expert_tensors);
  EXPECT_TRUE(Spec("vllm:ep=2,expert_tensors=stacks").stack_expert_tensors);
  FrameworkSpec members = Spec("vllm:tp=2,ep=2,expert_tensors=members");
  EXPECT_FALSE(members.stack_expert_tensors);
  EXPECT_EQ(members.ToString(), "vllm:tp=2,dp=1,ep=2,expert_tensors=members");
  EXPECT_EQ(Spec("megatron:ep=4,experts=grouped,expert_tensors=members").ToString(),
            "megatron:tp=1,pp=1,ep=4,cp=1,experts=grouped,expert_tensors=members");

  for (const char* bad :
       {"fsdp:tp=2", "megatron:tp=0", "megatron:tq=2", "vllm:tp=2,tp=4", "vllm:pp=0",
        "vllm:pp=2,partition=3,2", "vllm:partition=3.x", "megatron:tp=x", "megatron:tp=",
        "megatron:experts=fused", "megatron:experts",
        "vllm:experts=grouped", "megatron:experts=separate", "megatron:experts=stacked",
        "megatron:experts=grouped,experts=sequential",
        "vllm:expert_tensors=stacked", "megatron:expert_tensors",
        "vllm:expert_tensors=members,expert_tensors=stacks"}) {
    EXPECT_FALSE(ParseFrameworkSpec(bad).ok()) << bad;
  }
  // Qwen3-235B has 4 KV heads: Megatron cannot split its query groups 8 ways.
  Result<FrameworkSpec> tp8 = ResolveFrameworkSpec(Spec("megatron:tp=8"), qwen);
  ASSERT_FALSE(tp8.ok());
  EXPECT_NE(tp8.status().message().find("num_kv_heads"), std::string::npos);
  EXPECT_FALSE(ResolveFrameworkSpec(Spec("vllm:tp=2,ep=3"), qwen).ok());
  EXPECT_FALSE(ResolveFrameworkSpec(Spec("megatron:ep=2"), PresetConfig("llama-3.1-8b").value()).ok());
}

}  // namespace
}  // namespace ferry::models
