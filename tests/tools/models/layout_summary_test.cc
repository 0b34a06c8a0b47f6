// Tests for tools/models/layout_summary: counts, per-rank byte statistics and the printed text.
#include "tools/models/layout_summary.h"

#include <gtest/gtest.h>

namespace ferry::models {
namespace {

// Tensor "w" [4, 8] bf16 (64 B) split in half over ranks 2 and 3, plus "n" [8] bf16 (16 B)
// replicated on ranks 2, 3 and 5.
Layout SmallLayout() {
  Layout l;
  int w = l.AddTensor({"w", {4, 8}, DType::kBF16}).value();
  int n = l.AddTensor({"n", {8}, DType::kBF16}).value();
  l.AppendFragment(w, Box::Make({0, 0}, {2, 8}).value(), 2, "w");
  l.AppendFragment(w, Box::Make({2, 0}, {4, 8}).value(), 3, "w");
  for (int r : {2, 3, 5}) l.AppendFragment(n, Box::FromShape({8}), r, "n");
  return l;
}

TEST(LayoutSummaryTest, CountsAndBytesPerRank) {
  LayoutSummary s = SummarizeLayout(SmallLayout(), "m", "vllm:tp=2,dp=1,ep=1");
  EXPECT_EQ(s.num_ranks, 3);
  EXPECT_EQ(s.first_rank, 2);
  EXPECT_EQ(s.last_rank, 5);
  EXPECT_EQ(s.tensors, 2);
  EXPECT_EQ(s.buffers, 5);
  EXPECT_EQ(s.fragments, 5);
  EXPECT_EQ(s.min_rank_bytes, 16);
  EXPECT_EQ(s.min_rank, 5);
  EXPECT_EQ(s.max_rank_bytes, 48);
  EXPECT_EQ(s.max_rank, 2);  // ranks 2 and 3 tie; the lowest is reported
  EXPECT_DOUBLE_EQ(s.mean_rank_bytes, 112.0 / 3);
  EXPECT_EQ(s.total_bytes, 112);
  EXPECT_EQ(s.logical_bytes, 80);
}

TEST(LayoutSummaryTest, FormatsEveryLine) {
  std::string text = FormatLayoutSummary(SummarizeLayout(SmallLayout(), "m", "vllm:tp=2,dp=1,ep=1"));
  for (const char* want : {"model: m\n", "framework: vllm:tp=2,dp=1,ep=1\n", "ranks: 3 (2..5)\n",
                           "tensors: 2\n", "fragments: 5\n",
                           "bytes per rank: min 16 B (rank 5), mean 37 B, max 48 B (rank 2)\n",
                           "total bytes: 112 B (1.40x logical", "logical bytes: 80 B (80 B)\n"}) {
    EXPECT_NE(text.find(want), std::string::npos) << "missing '" << want << "' in:\n" << text;
  }
}

TEST(LayoutSummaryTest, EmptyLayout) {
  LayoutSummary s = SummarizeLayout(Layout{});
  EXPECT_EQ(s.num_ranks, 0);
  EXPECT_EQ(s.fragments, 0);
  std::string text = FormatLayoutSummary(s);
  EXPECT_NE(text.find("ranks: 0\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("model:"), std::string::npos);
}

}  // namespace
}  // namespace ferry::models
