// Tests for tensor stacks: names, the agreement check, expansion into members, and what
// validation and the compatibility check make of them.
#include "core/layout/tensor_stack.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "core/layout/validate.h"

namespace ferry {
namespace {

TEST(TensorStackNameTest, ParsesTheLastRangeComponent) {
  auto s = ParseTensorStackName("model.layers.3.mlp.experts.[0:256].gate_proj.weight");
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->prefix, "model.layers.3.mlp.experts.");
  EXPECT_EQ(s->first, 0);
  EXPECT_EQ(s->end, 256);
  EXPECT_EQ(s->suffix, ".gate_proj.weight");
  EXPECT_EQ(s->size(), 256);
  EXPECT_EQ(s->MemberName(17), "model.layers.3.mlp.experts.17.gate_proj.weight");
  EXPECT_EQ(s->ToString(), "model.layers.3.mlp.experts.[0:256].gate_proj.weight");

  auto last = ParseTensorStackName("a.[0:2].b.[4:12]");
  ASSERT_TRUE(last.has_value());
  EXPECT_EQ(last->prefix, "a.[0:2].b.");
  EXPECT_EQ(last->first, 4);
  EXPECT_EQ(last->end, 12);
  EXPECT_EQ(last->suffix, "");
  EXPECT_EQ(last->MemberName(5), "a.[0:2].b.5");

  auto whole = ParseTensorStackName("[3:5]");
  ASSERT_TRUE(whole.has_value());
  EXPECT_EQ(whole->MemberName(3), "3");
}

TEST(TensorStackNameTest, RejectsWhatIsNotARange) {
  for (const char* name :
       {"model.layers.3.weight", "a.[3:3].b", "a.[5:2].b", "a.[:4].b", "a.[0:].b", "a.[a:b].b",
        "a.x[0:4].b", "a.[0:4]x.b", "a.[0-4].b", "a.[0:4", "a.[0:1234567890123456789].b",
        "a.[-1:4].b", "a.[0:4:8].b", ""}) {
    EXPECT_FALSE(ParseTensorStackName(name).has_value()) << name;
  }
}

// A stack of 4 members [2, 3] (bf16) on rank 0, members 0..1 in buffer "w" at a stride of 16
// elements (rows 0..1 only) and members 2..3 whole, each in its own place in "v"; plus a plain
// tensor and padding of member 3's last row.
Layout StackedLayout() {
  Layout l;
  l.AddTensor({"e.[0:4].w", {4, 3, 3}, DType::kBF16}).value();
  l.AddTensor({"bias", {3}, DType::kFP32}).value();
  l.PlaceFragment(0, *Box::Make({0, 0, 0}, {2, 2, 3}), 0, "w", 0, {16, 3, 1});
  l.AppendFragment(1, Box::FromShape({3}), 0, "b");
  l.PlaceFragment(0, *Box::Make({0, 2, 0}, {2, 3, 3}), 1, "w", 100, {20, 3, 1});
  l.PlaceFragment(0, *Box::Make({2, 0, 0}, {4, 3, 3}), 0, "v", 8, {9, 3, 1});
  l.AddPadding(0, *Box::Make({3, 2, 0}, {4, 3, 3}));
  return l;
}

TEST(UnstackTensorsTest, StackFragmentsBecomeMemberFragments) {
  const Layout stacked = StackedLayout();
  Result<Layout> members = UnstackTensors(stacked);
  ASSERT_TRUE(members.ok()) << members.status().ToString();
  ASSERT_EQ(members->tensors.size(), 5u);
  for (int m = 0; m < 4; ++m) {
    EXPECT_EQ(members->tensors[m].name, "e." + std::to_string(m) + ".w");
    EXPECT_EQ(members->tensors[m].shape, (std::vector<int64_t>{3, 3}));
    EXPECT_EQ(members->tensors[m].dtype, DType::kBF16);
  }
  EXPECT_EQ(members->tensors[4].name, "bias");
  EXPECT_EQ(members->buffers.size(), stacked.buffers.size());
  ASSERT_EQ(members->fragments.size(), 7u);
  // In the stack fragments' order, member after member.
  const Fragment& m0 = members->fragments[0];
  EXPECT_EQ(m0.tensor, 0);
  EXPECT_EQ(m0.box, *Box::Make({0, 0}, {2, 3}));
  EXPECT_EQ(m0.loc.byte_offset, 0);
  EXPECT_EQ(m0.loc.strides[0], 3);
  EXPECT_EQ(m0.loc.strides[1], 1);
  EXPECT_EQ(members->fragments[1].tensor, 1);
  EXPECT_EQ(members->fragments[1].loc.byte_offset, 16 * 2);
  EXPECT_EQ(members->fragments[2].tensor, 4);  // the bias keeps its place
  EXPECT_EQ(members->fragments[3].loc.rank, 1);
  EXPECT_EQ(members->fragments[3].box, *Box::Make({2, 0}, {3, 3}));
  EXPECT_EQ(members->fragments[4].loc.byte_offset, 100 + 20 * 2);
  EXPECT_EQ(members->fragments[5].tensor, 2);
  EXPECT_EQ(members->fragments[6].tensor, 3);
  EXPECT_EQ(members->fragments[6].loc.byte_offset, 8 + 9 * 2);
  EXPECT_EQ(members->fragments[6].loc.buffer, stacked.fragments[3].loc.buffer);
  ASSERT_EQ(members->padding.size(), 1u);
  EXPECT_EQ(members->padding[0].tensor, 3);
  EXPECT_EQ(members->padding[0].box, *Box::Make({2, 0}, {3, 3}));
  // Both describe the same bytes, and both are valid.
  EXPECT_TRUE(ValidateLayout(stacked).ok()) << ValidateLayout(stacked).ToString();
  EXPECT_TRUE(ValidateLayout(*members).ok()) << ValidateLayout(*members).ToString();
}

TEST(UnstackTensorsTest, BadStacksAreErrors) {
  Layout wrong_count;
  wrong_count.AddTensor({"e.[0:4].w", {3, 3}, DType::kBF16}).value();
  EXPECT_NE(UnstackTensors(wrong_count).status().message().find("4 members"), std::string::npos);
  EXPECT_NE(
      ValidateLayout(wrong_count, {std::nullopt, false}).message().find("[4, <member shape>]"),
      std::string::npos);
  Layout one_dim;
  one_dim.AddTensor({"e.[0:4].w", {4}, DType::kBF16}).value();
  EXPECT_FALSE(UnstackTensors(one_dim).ok());
  Layout twice;
  twice.AddTensor({"e.[0:4].w", {4, 3}, DType::kBF16}).value();
  twice.AddTensor({"e.2.w", {3}, DType::kBF16}).value();
  EXPECT_NE(UnstackTensors(twice).status().message().find("'e.2.w' is also member 2"),
            std::string::npos);
  EXPECT_NE(ValidateLayout(twice, {std::nullopt, false}).message().find("also member 2"),
            std::string::npos);
}

Layout Named(std::initializer_list<const char*> names) {
  Layout l;
  for (const char* n : names) {
    const bool stack = ParseTensorStackName(n).has_value();
    l.AddTensor({n, stack ? std::vector<int64_t>{4, 3} : std::vector<int64_t>{3}, DType::kBF16})
        .value();
  }
  return l;
}

TEST(TensorStacksAgreeTest, StacksMustBeNamedAlike) {
  EXPECT_TRUE(TensorStacksAgree(Named({"a", "e.[0:4].w"}), Named({"e.[0:4].w", "a"})));
  EXPECT_TRUE(TensorStacksAgree(Named({"a", "b"}), Named({"a"})));
  // A source stack the destination does not use at all.
  EXPECT_TRUE(TensorStacksAgree(Named({"a", "e.[0:4].w"}), Named({"a"})));
  // The destination stacks what the source lists member by member, or the other way round.
  EXPECT_FALSE(
      TensorStacksAgree(Named({"e.0.w", "e.1.w", "e.2.w", "e.3.w"}), Named({"e.[0:4].w"})));
  EXPECT_FALSE(TensorStacksAgree(Named({"e.[0:4].w"}), Named({"e.3.w"})));
  // Other ranges of one family.
  EXPECT_FALSE(TensorStacksAgree(Named({"e.[0:4].w"}), Named({"e.[0:2].w"})));
}

// Members listed one by one: experts 0..3 of "e.<j>.w" [2, 3] on rank 0 in buffer "w" at a
// stride of 8 elements (16 bytes), expert 4 on rank 1, expert 5 in buffer "w" of rank 0 but off
// the stride, and a tensor that only looks like a member.
Layout MemberLayout() {
  Layout l;
  for (int e = 0; e < 6; ++e) {
    l.AddTensor({"e." + std::to_string(e) + ".w", {2, 3}, DType::kBF16}).value();
  }
  l.AddTensor({"e.7.w", {2, 3}, DType::kBF16}).value();   // outside the stack's range [0:6)
  l.AddTensor({"f.1.w", {2, 3}, DType::kBF16}).value();   // another family
  l.AddTensor({"e.03.w", {2, 3}, DType::kBF16}).value();  // not how member 3 is spelled
  for (int e = 0; e < 4; ++e) {
    l.PlaceFragment(e, Box::FromShape({2, 3}), 0, "w", e * 16, {3, 1});
  }
  l.PlaceFragment(4, Box::FromShape({2, 3}), 1, "w", 0, {3, 1});
  l.PlaceFragment(5, Box::FromShape({2, 3}), 0, "w", 100, {3, 1});
  l.AppendFragment(6, Box::FromShape({2, 3}), 0, "e7");
  l.AppendFragment(7, Box::FromShape({2, 3}), 0, "f1");
  l.AppendFragment(8, Box::FromShape({2, 3}), 0, "e03");
  l.AddPadding(5, *Box::Make({1, 0}, {2, 3}));
  return l;
}

TEST(StackMembersTest, MembersBecomeStackFragmentsAndRunsMerge) {
  const Layout members = MemberLayout();
  const TensorSpec stack{"e.[0:6].w", {6, 2, 3}, DType::kBF16};
  int64_t stacked = -1;
  Result<Layout> l = StackMembers(members, {stack}, &stacked);
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(stacked, 6);
  ASSERT_EQ(l->tensors.size(), 4u);  // e.7.w, f.1.w, e.03.w, then the stack
  EXPECT_EQ(l->tensors[0].name, "e.7.w");
  EXPECT_EQ(l->tensors[1].name, "f.1.w");
  EXPECT_EQ(l->tensors[2].name, "e.03.w");
  EXPECT_EQ(l->tensors[3].name, "e.[0:6].w");
  ASSERT_EQ(l->fragments.size(), 6u);
  // Experts 0..3: one fragment, 8 elements from one member to the next.
  EXPECT_EQ(l->fragments[0].tensor, 3);
  EXPECT_EQ(l->fragments[0].box, *Box::Make({0, 0, 0}, {4, 2, 3}));
  EXPECT_EQ(l->fragments[0].loc.strides[0], 8);
  EXPECT_EQ(l->fragments[0].loc.strides[1], 3);
  EXPECT_EQ(l->fragments[1].box, *Box::Make({4, 0, 0}, {5, 2, 3}));  // another rank
  EXPECT_EQ(l->fragments[1].loc.rank, 1);
  EXPECT_EQ(l->fragments[2].box, *Box::Make({5, 0, 0}, {6, 2, 3}));  // off the stride
  EXPECT_EQ(l->fragments[2].loc.byte_offset, 100);
  EXPECT_EQ(l->fragments[3].tensor, 0);
  EXPECT_EQ(l->fragments[4].tensor, 1);
  EXPECT_EQ(l->fragments[5].tensor, 2);
  ASSERT_EQ(l->padding.size(), 1u);
  EXPECT_EQ(l->padding[0].tensor, 3);
  EXPECT_EQ(l->padding[0].box, *Box::Make({5, 1, 0}, {6, 2, 3}));
  // Expanding the stacks again gives back the members' fragments.
  Result<Layout> again = UnstackTensors(*l);
  ASSERT_TRUE(again.ok());
  auto placed = [](const Layout& x) {
    std::vector<std::string> out;
    for (const Fragment& f : x.fragments) {
      out.push_back(x.tensors[f.tensor].name + f.box.ToString() + std::to_string(f.loc.rank) +
                    x.buffers[f.loc.buffer].name + std::to_string(f.loc.byte_offset) + "/" +
                    std::to_string(f.loc.strides[0]) + "," + std::to_string(f.loc.strides[1]));
    }
    std::sort(out.begin(), out.end());
    return out;
  };
  EXPECT_EQ(placed(*again), placed(members));
}

TEST(StackMembersTest, MembersOfAnotherShapeAreErrorsAndUnknownStacksAreLeftOut) {
  Layout wrong;
  wrong.AddTensor({"e.1.w", {3, 2}, DType::kBF16}).value();
  const TensorSpec stack{"e.[0:6].w", {6, 2, 3}, DType::kBF16};
  EXPECT_NE(StackMembers(wrong, {stack}).status().message().find("member 1"), std::string::npos);
  Layout other;
  other.AddTensor({"g.1.w", {2, 3}, DType::kBF16}).value();
  int64_t stacked = -1;
  Result<Layout> same = StackMembers(other, {stack}, &stacked);
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(stacked, 0);
  EXPECT_EQ(same->tensors.size(), 1u);  // no empty stack added
  EXPECT_FALSE(StackMembers(other, {{"e.[0:6].w", {5, 2, 3}, DType::kBF16}}).ok());
}

TEST(CheckCompatibleTest, ComparesMembersWhenStacksDiffer) {
  Layout source = StackedLayout();
  Layout destination;
  destination.AddTensor({"e.3.w", {3, 3}, DType::kBF16}).value();
  destination.AddTensor({"bias", {3}, DType::kFP32}).value();
  EXPECT_TRUE(CheckCompatible(source, destination).ok())
      << CheckCompatible(source, destination).ToString();
  Layout wrong;
  wrong.AddTensor({"e.3.w", {3, 4}, DType::kBF16}).value();
  EXPECT_NE(CheckCompatible(source, wrong).message().find("'e.3.w'"), std::string::npos);
  Layout missing;
  missing.AddTensor({"e.4.w", {3, 3}, DType::kBF16}).value();
  EXPECT_NE(CheckCompatible(source, missing).message().find("'e.4.w'"), std::string::npos);
}

}  // namespace
}  // namespace ferry
