// `ferry run` into SGLang servers whose EPLB moved their experts: the real binary refits a
// Megatron trainer into two `sglang:...,eplb_map=FILE` servers in host memory over tcp (direct
// reads off), each server's experts where its own map puts them, and verifies every destination
// byte with both strategies. Runs under a deadline and kills the process group.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "tests/tools/cli/ferry_process.h"

namespace {

using ferry::cli::testing::Count;
using ferry::cli::testing::Outcome;
using ferry::cli::testing::RunFerry;

// One server's map of Qwen3-30B-A3B (48 layers, 128 experts, 2 redundant): every row `row`.
std::string ServerMap(const std::string& row) {
  std::string rows = "[";
  for (int l = 0; l < 48; ++l) rows += (l == 0 ? "" : ", ") + row;
  return rows + "]";
}

// Server 0 (ranks 2, 3) reversed (physical p holds 127 - p, then 5 and 6), server 1 (ranks 4, 5)
// shifted by one (p + 1 mod 128, then 0 and 1).
TEST(RunSglangEplbTest, EachServersMapVerifiedOverTcp) {
  std::string reversed = "[", shifted = "[";
  for (int p = 0; p < 128; ++p) {
    reversed += std::to_string(127 - p) + ", ";
    shifted += std::to_string((p + 1) % 128) + ", ";
  }
  reversed += "5, 6]";
  shifted += "0, 1]";
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(dir != nullptr ? dir : "/tmp") + "/sglang_eplb_maps.json";
  std::ofstream(path) << "{\"engines\": [" << ServerMap(reversed) << ", " << ServerMap(shifted)
                      << "]}";
  const Outcome o =
      RunFerry({"run", "--model", "qwen3-30b-a3b", "--scale", "1/64", "--src",
                "megatron:tp=2,ep=2", "--dst",
                "sglang:tp=2,ep=2,redundant=2,engines=2,eplb_map=" + path, "--memory", "host",
                "--transport", "tcp", "--strategy", "both", "--verify", "--iterations", "1",
                "--warmup", "0", "--set", "executor.direct_intra_node=false"},
               120);
  EXPECT_FALSE(o.timed_out) << o.output;
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_FALSE(o.group_left_processes);
  EXPECT_EQ(Count(o.output, "bit-exact"), 2) << o.output;  // reshard, gather-broadcast
}

}  // namespace
