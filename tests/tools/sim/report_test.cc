// Tests for the simulator's reports: the Chrome trace parses and holds every op, the SVG has a line
// per node, and the text tables name the link classes and the critical path.
#include "tools/sim/report.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace ferry::sim {
namespace {

TransferPlan TwoMessagePlan() {
  TransferPlan plan;
  plan.num_ranks = 4;
  for (int m = 0; m < 2; ++m) {
    Op s;
    s.kind = OpKind::kSend;
    s.rank = m;
    s.peer = 2 + m;
    s.message = m;
    s.bytes = 1 << 20;
    Op r = s;
    r.kind = OpKind::kRecv;
    r.rank = 2 + m;
    r.peer = m;
    plan.AddOp(s);
    plan.AddOp(r);
  }
  return plan;
}

SimResult Simulated(const TransferPlan& plan) {
  ClusterSpec c = *ClusterPreset("dgx-h100");
  c.gpus_per_node = 2;
  c.nics_per_node = 2;
  SimOptions o;
  o.record_op_times = true;
  o.record_ingress = true;
  Result<SimResult> r = Simulate(plan, c, RankMapping::Identity(plan.num_ranks), o);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return *r;
}

TEST(ReportTest, ChromeTraceHasOneEventPerOp) {
  TransferPlan plan = TwoMessagePlan();
  SimResult r = Simulated(plan);
  Result<std::string> json = ChromeTraceJson(plan, r);
  ASSERT_TRUE(json.ok());
  nlohmann::json doc = nlohmann::json::parse(*json);
  ASSERT_EQ(doc["traceEvents"].size(), 4u);
  for (const auto& e : doc["traceEvents"]) {
    EXPECT_EQ(e["ph"], "X");
    EXPECT_GT(e["dur"].get<double>(), 0);
  }
  EXPECT_EQ(doc["traceEvents"][0]["pid"], 0);  // senders are on node 0
  ASSERT_TRUE(ChromeTraceJson(plan, r, 1).ok());
  EXPECT_EQ(nlohmann::json::parse(*ChromeTraceJson(plan, r, 1))["traceEvents"].size(), 1u);
  SimResult without = r;
  without.op_times.clear();
  EXPECT_FALSE(ChromeTraceJson(plan, without).ok());
}

TEST(ReportTest, SvgDrawsOneLinePerNode) {
  SimResult r = Simulated(TwoMessagePlan());
  Result<std::string> svg = IngressSvg(r);
  ASSERT_TRUE(svg.ok());
  EXPECT_EQ(svg->rfind("<svg", 0), 0u);
  size_t lines = 0;
  for (size_t p = svg->find("<polyline"); p != std::string::npos; p = svg->find("<polyline", p + 1)) {
    ++lines;
  }
  EXPECT_EQ(lines, 2u);
  Result<std::string> envelope = IngressSvg(r, 1);
  ASSERT_TRUE(envelope.ok());
  EXPECT_NE(envelope->find("max over nodes"), std::string::npos);
}

TEST(ReportTest, TextReportsNameLinkClassesAndPath) {
  SimResult r = Simulated(TwoMessagePlan());
  std::string table = UtilisationTable(r);
  EXPECT_NE(table.find("nic_rx"), std::string::npos);
  EXPECT_NE(table.find("nic_tx"), std::string::npos);
  std::string path = CriticalPathText(r);
  EXPECT_NE(path.find("send r"), std::string::npos);
}

}  // namespace
}  // namespace ferry::sim
