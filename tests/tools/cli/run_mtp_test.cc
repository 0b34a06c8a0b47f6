// `ferry run` into vLLM engines serving with an MTP drafter, bit-exact through the real binary:
// the drafter's experts placed by EPLB (its own physical_to_logical_map, eplb_map's "drafter"),
// the drafter of an FP8 block-quantized engine (its decoder layer quantized, eh_proj in bf16,
// tools/models/fp8_block_weights.h), and a trainer with Megatron's repeated MTP layer. Each case runs under a deadline and kills the process group.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "core/layout/layout_io.h"
#include "tests/tools/cli/ferry_process.h"
#include "tests/tools/models/framework_layouts_testutil.h"
#include "tools/models/framework_layouts.h"

namespace {

using ferry::cli::testing::Count;
using ferry::cli::testing::Outcome;
using ferry::cli::testing::RunFerry;

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

// A row of 256 logical experts + 2 redundant: `reversed` puts 255 - p at physical p (then 7, 9),
// else the initial arrangement (p, then 0, 1).
std::string Row(bool reversed) {
  std::string r = "[";
  for (int p = 0; p < 256; ++p) r += std::to_string(reversed ? 255 - p : p) + ", ";
  return r + (reversed ? "7, 9]" : "0, 1]");
}

// DeepSeek-V3's 58 MoE layers keep the initial arrangement; its drafter's one MoE layer (layer
// 61) is reversed, so a layout that placed the drafter's experts by the target's map, or by the
// initial one, would write other experts into its slots than the ones the verify expects.
TEST(RunMtpTest, DrafterExpertsByItsOwnEplbMapVerifiedOverTcp) {
  std::string text = "{\"physical_to_logical_map\": [";
  for (int l = 0; l < 58; ++l) text += (l == 0 ? "" : ", ") + Row(false);
  text += "], \"drafter\": {\"physical_to_logical_map\": [" + Row(true) + "]}}";
  const std::string path = TempPath("drafter_eplb_map.json");
  std::ofstream(path) << text;
  Outcome o = RunFerry({"run", "--model", "deepseek-v3", "--scale", "1/64", "--src",
                        "megatron:tp=2,ep=2,mtp=1", "--dst",
                        "vllm:tp=2,ep=2,redundant=2,eplb_map=" + path + ",mtp=1", "--memory",
                        "host", "--transport", "tcp", "--strategy", "both", "--verify",
                        "--iterations", "1", "--warmup", "0", "--set",
                        "executor.direct_intra_node=false"},
                       120);
  EXPECT_FALSE(o.timed_out) << o.output;
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_FALSE(o.group_left_processes);
  EXPECT_EQ(Count(o.output, "bit-exact"), 2) << o.output;  // reshard, gather-broadcast
}

// Megatron's --mtp-use-repeated-layer with mtp=2: the trainer holds one MTP layer, mtp.layers.0 on
// the last pipeline stage (ranks 2, 3 of 4), applied twice; vLLM's drafter holds the checkpoint's
// one MTP layer (model.layers.61) and cycles it over its speculative steps.
TEST(RunMtpTest, RepeatedMtpLayerIntoTheDrafterVerifiedOverTcp) {
  Outcome o = RunFerry({"run", "--model", "deepseek-v3", "--scale", "1/64", "--src",
                        "megatron:tp=2,pp=2,first=31,ep=2,mtp=2,mtp_repeated=1", "--dst",
                        "vllm:tp=2,mtp=1", "--memory", "host", "--transport", "tcp", "--strategy",
                        "both", "--verify", "--iterations", "1", "--warmup", "0", "--set",
                        "executor.direct_intra_node=false"},
                       120);
  EXPECT_FALSE(o.timed_out) << o.output;
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_FALSE(o.group_left_processes);
  EXPECT_EQ(Count(o.output, "bit-exact"), 2) << o.output;
}

// A DeepSeek-like model whose partitions are whole 128-blocks (DeepSeek-V3's own are only at
// full size; BlockAlignedDeepseek): hidden 256, 4 MLA heads, 4 experts of FFN 256, one MTP layer
// (model.layers.2).
ferry::models::ModelPreset Fp8Deepseek() {
  return ferry::models::ModelPreset::FromConfig(ferry::models::BlockAlignedDeepseek(4)).value();
}

// Megatron tp 2, ep 2 with the MTP layer into vLLM tp 2 quant=fp8_block with its drafter: the
// Quantize ops write the drafter's mtp_block projections and experts as fp8 with block scales,
// eh_proj arrives as bf16; the verify checks values and scales against the CPU reference and
// every other byte as copied.
TEST(RunMtpTest, Fp8DrafterQuantizedAndVerified) {
  for (const char* fmt : {"float32", "ue8m0"}) {
    using ferry::models::ParseFrameworkSpec;
    ferry::models::RefitLayouts refit =
        ferry::models::BuildRefitLayouts(
            Fp8Deepseek(), ParseFrameworkSpec("megatron:tp=2,ep=2,mtp=1").value(),
            ParseFrameworkSpec(std::string("vllm:tp=2,quant=fp8_block,scale_fmt=") + fmt + ",mtp=1")
                .value())
            .value();
    const std::string src = TempPath(std::string("mtp_src_") + fmt + ".yaml");
    const std::string dst = TempPath(std::string("mtp_fp8_dst_") + fmt + ".yaml");
    ASSERT_TRUE(ferry::SaveLayoutFile(refit.source, src).ok());
    ASSERT_TRUE(ferry::SaveLayoutFile(refit.destination, dst).ok());
    Outcome o = RunFerry({"run", "--src-layout", src, "--dst-layout", dst, "--strategy", "reshard",
                          "--verify", "--iterations", "1", "--warmup", "0"},
                         60);
    EXPECT_FALSE(o.timed_out) << o.output;
    EXPECT_EQ(o.exit_code, 0) << o.output;
    EXPECT_EQ(Count(o.output, "fp8 values and scales to the CPU block-quantization reference"), 1)
        << o.output;
  }
}

}  // namespace
