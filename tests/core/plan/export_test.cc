// Export: JSON carries every op with its fields and is stable, and the streaming writer gives
// exactly nlohmann::json's text (compact and indented, names escaped); files hold the same text;
// DOT names every op and message.
#include "core/plan/export.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

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

// A pair's element function is written as "fn" where it has one, and left out where it has none.
TEST(PlanExport, JsonNamesAPairsElementFunction) {
  TinyPlan t = MakeTinyPlan();
  Op convert;
  convert.kind = OpKind::kConvert;
  convert.rank = 1;
  Region from = Region::Bytes(Space::kStaging, 0, 0, 16);
  from.dtype = DType::kFP32;
  from.shape[0] = 4;
  Region to = from;
  to.space = Space::kDestination;
  t.plan.AddOp(convert, {t.unpack}, {{from, to, ElementFn::kNegExp}});
  nlohmann::json j = nlohmann::json::parse(PlanToJson(t.plan));
  EXPECT_EQ(j["ops"][3]["copies"][0]["fn"], "neg_exp");
  EXPECT_FALSE(j["ops"][2]["copies"][0].contains("fn"));
}

// Reads a whole file.
std::string ReadFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

TEST(PlanExport, StreamedJsonIsNlohmannDumpAtEveryIndent) {
  TinyPlan t = MakeTinyPlan();
  t.plan.strategy = "reshard \"quoted\"";
  // Names that need escaping: quote, backslash, control characters, and UTF-8 kept as it is.
  t.source.buffers.SetName(0, "a\"b\\c\nd\te\x01f\x1f\u00e9");
  const Layout* source = &t.source;
  const Layout* destination = &t.destination;
  for (int indent : {-1, 0, 2, 4}) {
    SCOPED_TRACE("indent " + std::to_string(indent));
    const std::string streamed = PlanToJson(t.plan, indent, source, destination);
    const nlohmann::ordered_json dom = nlohmann::ordered_json::parse(streamed);
    EXPECT_EQ(streamed, dom.dump(indent));
    EXPECT_EQ(dom["source_buffers"][0]["name"], t.source.buffers[0].name);
  }
  // An op without copy pairs or deps, and no slots: empty arrays as nlohmann writes them.
  TransferPlan bare;
  bare.strategy = "reshard";
  Op copy;
  copy.kind = OpKind::kCopy;
  bare.AddOp(copy);
  for (int indent : {-1, 2}) {
    const std::string streamed = PlanToJson(bare, indent);
    EXPECT_EQ(streamed, nlohmann::ordered_json::parse(streamed).dump(indent));
    EXPECT_NE(streamed.find(indent < 0 ? "\"copies\":[]" : "\"copies\": []"), std::string::npos);
  }
}

TEST(PlanExport, FilesHoldTheSameTextAndBadPathsFail) {
  TinyPlan t = MakeTinyPlan();
  const std::string dir = ::testing::TempDir();
  const std::string json_path = dir + "/plan_" + std::to_string(getpid()) + ".json";
  const std::string dot_path = dir + "/plan_" + std::to_string(getpid()) + ".dot";
  ASSERT_TRUE(WritePlanJsonFile(json_path, t.plan, -1, &t.source, &t.destination).ok());
  EXPECT_EQ(ReadFile(json_path), PlanToJson(t.plan, -1, &t.source, &t.destination));
  ASSERT_TRUE(WritePlanDotFile(dot_path, t.plan).ok());
  EXPECT_EQ(ReadFile(dot_path), PlanToDot(t.plan));
  std::remove(json_path.c_str());
  std::remove(dot_path.c_str());
  const Status bad = WritePlanJsonFile(dir + "/no/such/dir/plan.json", t.plan);
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("cannot open"), std::string::npos) << bad.ToString();
  // A full disk (/dev/full fails every write): the export reports it.
  if (std::ifstream("/dev/full").good()) {
    const Status full = WritePlanJsonFile("/dev/full", t.plan);
    EXPECT_FALSE(full.ok());
    EXPECT_NE(full.message().find("writing '/dev/full' failed"), std::string::npos) << full.ToString();
    EXPECT_FALSE(WritePlanDotFile("/dev/full", t.plan).ok());
  }
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
