// Tests for planner/fold_stacks: which tensors form families, how fragments merge into strided
// fragments of the stacks, which families stay unfolded, and that planning errors still name the
// original tensors.
#include "planner/fold_stacks.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/layout/layout.h"
#include "planner/planner.h"

namespace ferry {
namespace {

std::string Expert(int e, const std::string& proj) {
  return "model.layers.3.mlp.experts." + std::to_string(e) + "." + proj + ".weight";
}

// Experts 0..3 of [rows, cols] bf16 `proj` tensors, stacked on `rank` in buffer `buffer` with
// `gap` spare elements between members, from `first` to `last`.
void StackExperts(Layout& l, const std::string& proj, int rows, int cols, int rank,
                  const std::string& buffer, int first, int last, int64_t gap = 0) {
  for (int e = first; e <= last; ++e) {
    const int t = l.AddTensor({Expert(e, proj), {rows, cols}, DType::kBF16}).value();
    const int64_t offset = (e - first) * (rows * cols + gap) * 2;
    l.PlaceFragment(t, Box::FromShape({rows, cols}), rank, buffer, offset, {cols, 1});
  }
}

// Destination: ranks 4 and 5 each hold half the rows of every expert, stacked vLLM-style.
void StackHalves(Layout& l, const std::string& proj, int rows, int cols) {
  for (int e = 0; e < 4; ++e) l.AddTensor({Expert(e, proj), {rows, cols}, DType::kBF16}).value();
  for (int half = 0; half < 2; ++half) {
    for (int e = 0; e < 4; ++e) {
      Box box = Box::FromShape({rows, cols});
      box.lo[0] = half * rows / 2;
      box.hi[0] = (half + 1) * rows / 2;
      l.PlaceFragment(l.FindTensor(Expert(e, proj)), box, 4 + half, "w13",
                      e * (rows / 2) * cols * 2, {cols, 1});
    }
  }
}

// Offers every fragment of `layout` to `side`, as the intersection's pass does; returns which
// ones it took.
std::vector<uint8_t> Offer(StackSide& side, const Layout& layout) {
  std::vector<uint8_t> taken;
  for (size_t i = 0; i < layout.fragments.size(); ++i) {
    taken.push_back(side.Divert(layout.fragments, i) ? 1 : 0);
  }
  return taken;
}

TEST(FoldStacks, ExpertsBecomeOneStridedFragmentPerRank) {
  Layout src, dst;
  StackExperts(src, "gate_proj", 8, 16, 0, "fc1", 0, 3, /*gap=*/8);
  StackHalves(dst, "gate_proj", 8, 16);
  StackFold fold;
  ASSERT_TRUE(FoldTensorStacks(src, dst, fold));
  EXPECT_EQ(fold.stacks, 1);
  // Every original fragment is part of a stack's: the source's merged up front (the smaller
  // layout), the destination's as they are offered.
  EXPECT_EQ(Offer(fold.source, src), std::vector<uint8_t>(4, 1));
  EXPECT_EQ(Offer(fold.destination, dst), std::vector<uint8_t>(8, 1));
  const Layout& source_stacks = fold.source.stacks();
  const Layout& destination_stacks = fold.destination.stacks();
  ASSERT_EQ(source_stacks.tensors.size(), 1u);
  ASSERT_EQ(destination_stacks.tensors.size(), 1u);
  EXPECT_EQ(source_stacks.tensors[0].name, destination_stacks.tensors[0].name);
  EXPECT_EQ(source_stacks.tensors[0].shape, (std::vector<int64_t>{4, 8, 16}));
  ASSERT_EQ(source_stacks.fragments.size(), 1u);
  const Fragment& s = source_stacks.fragments[0];
  EXPECT_EQ(s.box, Box::Make({0, 0, 0}, {4, 8, 16}).value());
  EXPECT_EQ(s.loc.strides[0], 8 * 16 + 8);  // the gap is kept in the stride
  EXPECT_EQ(s.loc.strides[1], 16);
  EXPECT_EQ(s.loc.byte_offset, 0);
  EXPECT_EQ(s.loc.buffer, src.fragments[0].loc.buffer);
  ASSERT_EQ(destination_stacks.fragments.size(), 2u);
  for (int half = 0; half < 2; ++half) {
    const Fragment& d = destination_stacks.fragments[half];
    EXPECT_EQ(d.loc.rank, 4 + half);
    EXPECT_EQ(d.box, Box::Make({0, half * 4, 0}, {4, half * 4 + 4, 16}).value());
    EXPECT_EQ(d.loc.strides[0], 4 * 16);
  }
  EXPECT_TRUE(source_stacks.buffers.empty());
}

TEST(FoldStacks, ABrokenStrideStartsANewRun) {
  Layout src, dst;
  StackExperts(src, "gate_proj", 8, 16, 0, "fc1", 0, 3);
  // Member 3 sits one element further than the stride puts it.
  src.fragments.Edit(3, [&](Fragment& frag) { frag.loc.byte_offset += 2; });
  {
    const size_t b = static_cast<size_t>(src.fragments[3].loc.buffer);
    src.buffers.SetBytes(b, src.buffers[b].bytes + 2);
  }
  StackHalves(dst, "gate_proj", 8, 16);
  StackFold fold;
  ASSERT_TRUE(FoldTensorStacks(src, dst, fold));
  const FragmentTable& frags = fold.source.stacks().fragments;
  ASSERT_EQ(frags.size(), 2u);
  EXPECT_EQ(frags[0].box.hi[0], 3);
  EXPECT_EQ(frags[1].box.lo[0], 3);
  EXPECT_EQ(frags[1].loc.byte_offset, 3 * 8 * 16 * 2 + 2);
}

TEST(FoldStacks, NothingFoldsWhenOnlyOneSideIsStacked) {
  // One buffer per expert on the source: no piece gets larger, so the layouts stay as given.
  Layout src, dst;
  for (int e = 0; e < 4; ++e) {
    StackExperts(src, "gate_proj", 8, 16, 0, "fc1." + std::to_string(e), e, e);
  }
  StackHalves(dst, "gate_proj", 8, 16);
  StackFold fold;
  EXPECT_FALSE(FoldTensorStacks(src, dst, fold));
  // Names without a number component form no family either.
  Layout a, b;
  a.AppendFragment(a.AddTensor({"lm_head.weight", {4, 4}, DType::kBF16}).value(),
                   Box::FromShape({4, 4}), 0, "lm_head");
  b = a;
  EXPECT_FALSE(FoldTensorStacks(a, b, fold));
}

TEST(FoldStacks, TheSmallerSideNeedsARunOfThree) {
  // Two experts stacked on both sides: the look for stacked runs, before any name is read, finds
  // no run of three, so nothing folds. With three it does.
  for (int experts : {2, 3}) {
    Layout src, dst;
    StackExperts(src, "gate_proj", 8, 16, 0, "fc1", 0, experts - 1);
    StackExperts(dst, "gate_proj", 8, 16, 1, "w13", 0, experts - 1);
    const int t = dst.AddTensor({"lm_head.weight", {4, 4}, DType::kBF16}).value();
    dst.AppendFragment(t, Box::FromShape({4, 4}), 1, "lm_head");  // the destination is larger
    src.AppendFragment(src.AddTensor({"lm_head.weight", {4, 4}, DType::kBF16}).value(),
                       Box::FromShape({4, 4}), 0, "lm_head.0");
    dst.AppendFragment(t, Box::FromShape({4, 4}), 2, "lm_head");
    StackFold fold;
    EXPECT_EQ(FoldTensorStacks(src, dst, fold), experts == 3) << experts << " experts";
  }
}

TEST(FoldStacks, MembersAreNamedByTheirLastNumber) {
  // Tensors named almost like the experts sit between them in tensor order, where the fold
  // matches names against the families it joined last: only names whose last all-digit component
  // is the number, with the family's shape and dtype, are members.
  const std::vector<std::string> look_alikes = {
      "model.layers.3.mlp.experts.x1.gate_proj.weight",    // letters in the number
      "model.layers.3.mlp.experts.1.gate_proj.weight.0",   // a later number: another family
      "model.layers.3.mlp.experts.12345678901234567890.gate_proj.weight",  // too long a number
      "model.layers.3.mlp.experts..gate_proj.weight",      // no number
      "model.layers.3.mlp.experts.2.gate_proj.weights",    // another suffix
  };
  Layout src, dst;
  std::vector<int> members, others;
  for (int e = 0; e < 4; ++e) {
    members.push_back(src.AddTensor({Expert(e, "gate_proj"), {8, 16}, DType::kBF16}).value());
    src.PlaceFragment(members.back(), Box::FromShape({8, 16}), 0, "fc1", e * 8 * 16 * 2, {16, 1});
    others.push_back(src.AddTensor({look_alikes[e], {8, 16}, DType::kBF16}).value());
    src.AppendFragment(others.back(), Box::FromShape({8, 16}), 0, "other." + std::to_string(e));
  }
  others.push_back(src.AddTensor({look_alikes[4], {8, 16}, DType::kBF16}).value());
  src.AppendFragment(others.back(), Box::FromShape({8, 16}), 0, "other.4");
  // An expert-named tensor of another shape is no member either.
  others.push_back(src.AddTensor({Expert(7, "gate_proj"), {4, 16}, DType::kBF16}).value());
  src.AppendFragment(others.back(), Box::FromShape({4, 16}), 0, "other.5");
  dst = src;
  for (size_t i = 0; i < src.fragments.size(); ++i) {  // the destination: more fragments
    Fragment copy = src.fragments[i];
    copy.loc.rank = 1;
    copy.loc.buffer = dst.GetOrAddBuffer(1, src.buffers[static_cast<size_t>(copy.loc.buffer)].name);
    dst.buffers.SetBytes(static_cast<size_t>(copy.loc.buffer),
                         src.buffers[static_cast<size_t>(src.fragments[i].loc.buffer)].bytes);
    dst.fragments.push_back(copy);
  }
  StackFold fold;
  ASSERT_TRUE(FoldTensorStacks(src, dst, fold));
  EXPECT_EQ(fold.stacks, 1);
  for (int t : members) EXPECT_TRUE(fold.source.TakesWholeTensor(t)) << src.tensors[t].name;
  for (int t : others) EXPECT_FALSE(fold.source.TakesWholeTensor(t)) << src.tensors[t].name;
  const Result<PlanResult> plan = PlanReshard(src, dst, Topology::Uniform(2, 1));
  ASSERT_TRUE(plan.ok()) << plan.status().message();
}

TEST(FoldStacks, OnlyFamiliesStackedOnTheSmallerSideFold) {
  // gate is stacked on both sides; down only on the destination (the larger side), so its
  // members are planned one by one: none of their fragments is folded.
  Layout src, dst;
  StackExperts(src, "gate_proj", 8, 16, 0, "fc1", 0, 3);
  for (int e = 0; e < 4; ++e) {
    StackExperts(src, "down_proj", 16, 8, 1, "fc2." + std::to_string(e), e, e);
  }
  StackHalves(dst, "gate_proj", 8, 16);
  StackExperts(dst, "down_proj", 16, 8, 6, "w2", 0, 3);
  ASSERT_LT(src.fragments.size(), dst.fragments.size());
  StackFold fold;
  ASSERT_TRUE(FoldTensorStacks(src, dst, fold));
  EXPECT_EQ(fold.stacks, 1);
  ASSERT_EQ(fold.destination.stacks().tensors.size(), 1u);
  EXPECT_NE(fold.destination.stacks().tensors[0].name.find("gate_proj"), std::string::npos);
  for (const Layout* layout : {&src, &dst}) {
    const std::vector<uint8_t> folded =
        Offer(layout == &src ? fold.source : fold.destination, *layout);
    ASSERT_EQ(folded.size(), layout->fragments.size());
    for (size_t i = 0; i < folded.size(); ++i) {
      const std::string& name = layout->tensors[layout->fragments[i].tensor].name;
      EXPECT_EQ(folded[i], name.find("gate_proj") != std::string::npos ? 1 : 0) << name;
    }
  }
  // Both sides take gate's members whole, so the intersection need not map them; down's stay.
  for (const Layout* layout : {&src, &dst}) {
    const StackSide& side = layout == &src ? fold.source : fold.destination;
    for (size_t t = 0; t < layout->tensors.size(); ++t) {
      const std::string& name = layout->tensors[t].name;
      EXPECT_EQ(side.TakesWholeTensor(static_cast<int>(t)), name.find("gate_proj") != std::string::npos)
          << name;
    }
  }
  // The planner plans gate as a stack and the down members one by one.
  Result<PlanResult> r = PlanReshard(src, dst, Topology::Uniform(7, 2));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->stacks, 1);
}

TEST(FoldStacks, PlanningErrorsNameTheOriginalTensors) {
  Layout src, dst;
  StackExperts(src, "gate_proj", 8, 16, 0, "fc1", 0, 3);
  StackHalves(dst, "gate_proj", 8, 16);
  // Destination expert 2 with another shape: its family stays unfolded and planning reports it.
  Layout bad = dst;
  bad.tensors[2].shape = {8, 8};
  Result<PlanResult> r = PlanReshard(src, bad, Topology::Uniform(6, 2));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(Expert(2, "gate_proj")), std::string::npos)
      << r.status().ToString();
  // A destination expert the source lacks.
  Layout extra = dst;
  const int t = extra.AddTensor({Expert(7, "gate_proj"), {8, 16}, DType::kBF16}).value();
  extra.AppendFragment(t, Box::FromShape({8, 16}), 4, "w13.7");
  r = PlanReshard(src, extra, Topology::Uniform(6, 2));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(Expert(7, "gate_proj")), std::string::npos)
      << r.status().ToString();
  // The good pair plans folded.
  r = PlanReshard(src, dst, Topology::Uniform(6, 2));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->stacks, 1);
}

}  // namespace
}  // namespace ferry
