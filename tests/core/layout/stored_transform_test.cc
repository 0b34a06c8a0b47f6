// Tests for StoredTransform (core/layout/layout.h): tensors a layout keeps transformed are kept
// through the YAML form, checked by ValidateLayout, give their fragments' element dtype
// (StoredDTypes), and are refused by CheckNoStoredTransforms with the tensor and the transform
// named (what the planner has no op for).
#include <gtest/gtest.h>

#include <string>

#include "core/layout/layout.h"
#include "core/layout/layout_io.h"
#include "core/layout/tensor_stack.h"
#include "core/layout/validate.h"

namespace ferry {
namespace {

// vLLM's Mamba A for 4 heads on one rank: the checkpoint's bf16 A_log stored as fp32 -exp(A_log).
Layout MambaA() {
  Layout l;
  const int t = l.AddTensor({"mixer.A_log", {4}, DType::kBF16}).value();
  l.PlaceFragment(t, Box::FromShape({4}), 0, "mixer.A", 0, {1});
  l.buffers.SetBytes(0, 16);
  l.transforms.push_back({t, "A = -exp(A_log)", DType::kFP32});
  return l;
}

TEST(StoredTransformTest, RoundTripsThroughYaml) {
  const Layout l = MambaA();
  const std::string yaml = LayoutToYaml(l);
  EXPECT_NE(yaml.find("transforms"), std::string::npos) << yaml;
  Result<Layout> back = ParseLayoutYaml(yaml);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_EQ(back->transforms.size(), 1u);
  EXPECT_EQ(back->transforms[0].tensor, 0);
  EXPECT_EQ(back->transforms[0].transform, "A = -exp(A_log)");
  EXPECT_EQ(back->transforms[0].stored_dtype, DType::kFP32);
  EXPECT_TRUE(ValidateLayout(*back).ok());
  Result<Layout> unknown = ParseLayoutYaml(
      "tensors: [{name: w, shape: [2], dtype: bf16}]\n"
      "transforms: [{tensor: v, transform: x, dtype: fp32}]\n");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("unknown tensor 'v'"), std::string::npos);
}

TEST(StoredTransformTest, FragmentsAreStoredInTheTransformsDtype) {
  Layout l = MambaA();
  const int other = l.AddTensor({"mixer.D", {4}, DType::kBF16}).value();
  const std::vector<DType> stored = StoredDTypes(l);
  ASSERT_EQ(stored.size(), 2u);
  EXPECT_EQ(stored[0], DType::kFP32);
  EXPECT_EQ(stored[static_cast<size_t>(other)], DType::kBF16);
}

TEST(StoredTransformTest, PlansRefuseThem) {
  Layout source;
  const int t = source.AddTensor({"mixer.A_log", {4}, DType::kBF16}).value();
  source.AppendFragment(t, Box::FromShape({4}), 0, "A_log");
  EXPECT_TRUE(CheckNoStoredTransforms(source, source).ok());
  Status into = CheckNoStoredTransforms(source, MambaA());
  ASSERT_FALSE(into.ok());
  EXPECT_NE(into.message().find("destination tensor 'mixer.A_log'"), std::string::npos);
  EXPECT_NE(into.message().find("A = -exp(A_log) (fp32)"), std::string::npos) << into.message();
  Status out_of = CheckNoStoredTransforms(MambaA(), source);
  ASSERT_FALSE(out_of.ok());
  EXPECT_NE(out_of.message().find("source tensor 'mixer.A_log'"), std::string::npos);
  Layout bad = MambaA();
  bad.transforms[0].tensor = 3;
  EXPECT_FALSE(ValidateLayout(bad).ok());
}

TEST(StoredTransformTest, KeptThroughStackRewrites) {
  Layout l;
  const int t = l.AddTensor({"e.[0:2].w", {2, 4}, DType::kBF16}).value();
  l.PlaceFragment(t, Box::FromShape({2, 4}), 0, "w", 0, {4, 1});
  l.transforms.push_back({t, "w = derived(w)", DType::kFP32});
  Result<Layout> members = UnstackTensors(l);
  ASSERT_TRUE(members.ok()) << members.status().ToString();
  ASSERT_EQ(members->transforms.size(), 2u);
  EXPECT_EQ(members->tensors[members->transforms[1].tensor].name, "e.1.w");
  Result<Layout> stacked = StackMembers(*members, {l.tensors[0]});
  ASSERT_TRUE(stacked.ok()) << stacked.status().ToString();
  ASSERT_EQ(stacked->transforms.size(), 1u);
  EXPECT_EQ(stacked->tensors[stacked->transforms[0].tensor].name, "e.[0:2].w");
}

}  // namespace
}  // namespace ferry
