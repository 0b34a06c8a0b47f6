// Export: JSON carries every op with its fields and is stable; DOT names every op and message.
#include "core/plan/export.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/core/plan/plan_fixture.h"

namespace ferry {
namespace {

TEST(PlanExport, JsonRoundTripsFields) {
  TinyPlan t = MakeTinyPlan();
  t.plan.strategy = "reshard";
  const std::string text = PlanToJson(t.plan);
  EXPECT_EQ(text, PlanToJson(t.plan));
  nlohmann::json j = nlohmann::json::parse(text);
  EXPECT_EQ(j["strategy"], "reshard");
  ASSERT_EQ(j["ops"].size(), 3u);
  EXPECT_EQ(j["ops"][0]["kind"], "send");
  EXPECT_EQ(j["ops"][1]["peer"], 0);
  EXPECT_EQ(j["ops"][2]["deps"][0], 1);
  EXPECT_EQ(j["ops"][2]["copies"][0]["to"]["space"], "destination");
}

TEST(PlanExport, DotHasClustersAndMessageEdges) {
  TinyPlan t = MakeTinyPlan();
  const std::string dot = PlanToDot(t.plan);
  EXPECT_NE(dot.find("cluster_rank_0"), std::string::npos);
  EXPECT_NE(dot.find("op0 -> op1 [style=dashed"), std::string::npos);
  EXPECT_NE(dot.find("op1 -> op2;"), std::string::npos);
}

}  // namespace
}  // namespace ferry
