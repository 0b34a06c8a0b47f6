// Tests for cluster presets, quantity parsing, the YAML loader and rank mapping.
#include "tools/sim/cluster.h"

#include <gtest/gtest.h>

namespace ferry::sim {
namespace {

TEST(ClusterTest, PresetsAreValidAndDescribeTheirHardware) {
  for (const std::string& name : ClusterPresetNames()) {
    Result<ClusterSpec> c = ClusterPreset(name);
    ASSERT_TRUE(c.ok()) << name;
    EXPECT_TRUE(c->Validate().ok()) << name;
    EXPECT_EQ(c->name, name);
  }
  ClusterSpec h100 = *ClusterPreset("dgx-h100");
  EXPECT_EQ(h100.gpus_per_node, 8);
  EXPECT_EQ(h100.nics_per_node, 8);
  EXPECT_DOUBLE_EQ(h100.nic_bandwidth, 50e9);  // 400 Gb/s
  EXPECT_DOUBLE_EQ(h100.nvlink_bandwidth, 450e9);
  ClusterSpec nvl72 = *ClusterPreset("gb200-nvl72");
  EXPECT_EQ(nvl72.gpus_per_node, 72);
  EXPECT_EQ(nvl72.gpus_per_tray, 4);
  EXPECT_FALSE(ClusterPreset("dgx-a100").ok());
  EXPECT_NE(ClusterPreset("dgx-a100").status().message().find("dgx-h100"), std::string::npos);
}

TEST(ClusterTest, ParsesQuantitiesWithUnits) {
  EXPECT_DOUBLE_EQ(*ParseBandwidth("400Gb/s"), 50e9);
  EXPECT_DOUBLE_EQ(*ParseBandwidth("50 GB/s"), 50e9);
  EXPECT_DOUBLE_EQ(*ParseBandwidth("1e9"), 1e9);
  EXPECT_DOUBLE_EQ(*ParseDuration("5us"), 5e-6);
  EXPECT_DOUBLE_EQ(*ParseDuration("2 ms"), 2e-3);
  EXPECT_EQ(*ParseSize("4MiB"), 4 << 20);
  EXPECT_EQ(*ParseSize("1GB"), 1000000000);
  EXPECT_FALSE(ParseBandwidth("5 furlongs").ok());
  EXPECT_FALSE(ParseDuration("fast").ok());
  EXPECT_FALSE(ParseSize("-1").ok());
}

TEST(ClusterTest, YamlStartsFromABaseAndOverrides) {
  Result<ClusterSpec> c = ParseClusterYaml(
      "name: mine\nbase: dgx-h100\nnum_nodes: 4\nnic_bandwidth: 200Gb/s\nnic_latency: 10us\n"
      "gpu_direct: false\nstaging_chunk_bytes: 8MiB\nquantize_bandwidth: 500GB/s\n"
      "fp8_convert_bandwidth: 600GB/s\n");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->name, "mine");
  EXPECT_EQ(c->gpus_per_node, 8);  // from the base
  EXPECT_EQ(c->num_nodes, 4);
  EXPECT_DOUBLE_EQ(c->nic_bandwidth, 25e9);
  EXPECT_DOUBLE_EQ(c->nic_latency, 10e-6);
  EXPECT_FALSE(c->gpu_direct);
  EXPECT_EQ(c->staging_chunk_bytes, 8 << 20);
  EXPECT_DOUBLE_EQ(c->quantize_bandwidth, 500e9);
  EXPECT_DOUBLE_EQ(c->fp8_convert_bandwidth, 600e9);
  EXPECT_DOUBLE_EQ(c->pack_bandwidth, 1.08e12);  // from the base
}

TEST(ClusterTest, YamlRejectsUnknownKeysAndBadValues) {
  Result<ClusterSpec> c = ParseClusterYaml("gpus_per_nod: 8\n");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("unknown key 'gpus_per_nod'"), std::string::npos);
  c = ParseClusterYaml("nic_bandwidth: lots\n");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("nic_bandwidth"), std::string::npos);
  EXPECT_FALSE(ParseClusterYaml("network_efficiency: 1.5\n").ok());
  EXPECT_FALSE(ParseClusterYaml("quantize_bandwidth: 0\n").ok());
  c = ParseClusterYaml("fp8_convert_bandwidth: 0\n");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("fp8_convert_bandwidth"), std::string::npos);
  EXPECT_FALSE(ParseClusterYaml("[1, 2]").ok());
  EXPECT_FALSE(ParseClusterYaml("base: nope\n").ok());
}

TEST(ClusterTest, YamlReadsARowRateTableAndRefusesABadOne) {
  Result<ClusterSpec> c = ParseClusterYaml(
      "host_memory_ranks: true\nhost_copy_row_rates:\n  - [64B, 128B, 4.9GB/s]\n"
      "  - [64KiB, 64KiB, 11GB/s]\n");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(c->host_copy_row_rates.size(), 2u);
  EXPECT_EQ(c->host_copy_row_rates[1].row_bytes, 65536);
  EXPECT_EQ(c->host_copy_row_rates[1].pitch_bytes, 65536);
  EXPECT_DOUBLE_EQ(c->host_copy_row_rates[0].rate, 4.9e9);
  EXPECT_TRUE(ParseClusterYaml("name: x\n")->host_copy_row_rates.empty());
  // Each refusal names the field and what is wrong.
  for (const char* bad : {"host_copy_row_rates: 5GB/s\n",
                          "host_copy_row_rates:\n  - [64B, 128B]\n",
                          "host_copy_row_rates:\n  - [64B, 128B, fast]\n",
                          "host_copy_row_rates:\n  - [64B, 32B, 1GB/s]\n",
                          "host_copy_row_rates:\n  - [1KiB, 2KiB, 1GB/s]\n  - [64B, 128B, 1GB/s]\n",
                          "host_copy_row_rates:\n  - [64B, 128B, 0GB/s]\n"}) {
    Result<ClusterSpec> r = ParseClusterYaml(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("host_copy_row_rates"), std::string::npos)
        << r.status().message();
  }
  EXPECT_NE(ParseClusterYaml("host_copy_row_rates:\n  - [64B, 128B, fast]\n")
                .status().message().find("point 1"),
            std::string::npos);
}

TEST(ClusterTest, YamlReadsAConversionRateTableAndRefusesABadOne) {
  const std::string rows = "host_memory_ranks: true\nhost_copy_row_rates:\n  - [64KiB, 64KiB, 11GB/s]\n";
  Result<ClusterSpec> c = ParseClusterYaml(rows + "host_convert_rates:\n  - [bf16, fp8_e4m3, 3.4GB/s]\n"
                                                  "  - [float32, bfloat16, 5GB/s]\n");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(c->host_convert_rates.size(), 2u);
  EXPECT_EQ(c->host_convert_rates[0].from, DType::kBF16);
  EXPECT_EQ(c->host_convert_rates[0].to, DType::kFP8E4M3);
  EXPECT_DOUBLE_EQ(c->host_convert_rates[0].rate, 3.4e9);
  EXPECT_EQ(c->host_convert_rates[1].from, DType::kFP32);
  // Each refusal names the field, and the entry where one is at fault.
  for (const std::string& bad : {rows + "host_convert_rates: 3GB/s\n",
                                rows + "host_convert_rates:\n  - [bf16, fp8_e4m3]\n",
                                rows + "host_convert_rates:\n  - [bf16, fp7, 3GB/s]\n",
                                rows + "host_convert_rates:\n  - [bf16, bf16, 3GB/s]\n",
                                rows + "host_convert_rates:\n  - [bf16, fp32, 1GB/s]\n  - [bf16, fp32, 2GB/s]\n"}) {
    Result<ClusterSpec> r = ParseClusterYaml(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("host_convert_rates"), std::string::npos) << r.status().message();
  }
  EXPECT_NE(ParseClusterYaml(rows + "host_convert_rates:\n  - [bf16, fp7, 3GB/s]\n")
                .status().message().find("entry 1"),
            std::string::npos);
  EXPECT_DOUBLE_EQ(ParseClusterYaml(rows + "host_quantize_rate: 0.5GB/s\n")->host_quantize_rate, 0.5e9);
  const Result<ClusterSpec> quantize_alone = ParseClusterYaml("host_memory_ranks: true\nhost_quantize_rate: 1GB/s\n");
  ASSERT_FALSE(quantize_alone.ok());
  EXPECT_NE(quantize_alone.status().message().find("'host_quantize_rate' needs 'host_copy_row_rates'"),
            std::string::npos)
      << quantize_alone.status().message();
  // Its rates count against the row table's contiguous rate, so it needs that table.
  Result<ClusterSpec> alone = ParseClusterYaml("host_memory_ranks: true\nhost_convert_rates:\n  - [bf16, fp32, 1GB/s]\n");
  ASSERT_FALSE(alone.ok());
  EXPECT_NE(alone.status().message().find("needs 'host_copy_row_rates'"), std::string::npos)
      << alone.status().message();
}

TEST(ClusterTest, ShippedClusterFilesLoad) {
  for (const char* path : {"tools/sim/clusters/this-host.yaml", "tools/sim/clusters/this-host-tcp.yaml",
                           "tools/sim/clusters/h200-single.yaml"}) {
    Result<ClusterSpec> c = LoadCluster(path);
    ASSERT_TRUE(c.ok()) << path << ": " << c.status().ToString();
  }
  EXPECT_TRUE(LoadCluster("tools/sim/clusters/this-host.yaml")->host_memory_ranks);
  EXPECT_EQ(LoadCluster("tools/sim/clusters/this-host.yaml")->host_message_bandwidth, 0);
  // Only the direct-read file's copies pay for their row pattern (calibrate_host.py).
  EXPECT_FALSE(LoadCluster("tools/sim/clusters/this-host.yaml")->host_copy_row_rates.empty());
  EXPECT_TRUE(LoadCluster("tools/sim/clusters/this-host-tcp.yaml")->host_copy_row_rates.empty());
  EXPECT_GT(LoadCluster("tools/sim/clusters/this-host-tcp.yaml")->host_message_bandwidth, 0);
  EXPECT_GT(LoadCluster("tools/sim/clusters/this-host-tcp.yaml")->host_message_stream_bandwidth, 0);
  EXPECT_EQ(ParseClusterYaml("host_message_stream_bandwidth: 2GB/s")->host_message_stream_bandwidth, 2e9);
  // The host's files model its ranks as processes sharing one host_mem link at the rate of all of
  // them together (tools/sim/calibrate_host.py), each stream capped at one pair's rate or below.
  for (const char* path : {"tools/sim/clusters/this-host.yaml", "tools/sim/clusters/this-host-tcp.yaml"}) {
    const ClusterSpec host = *LoadCluster(path);
    EXPECT_LE(host.host_copy_bandwidth, host.host_memory_bandwidth) << path;
    EXPECT_EQ(host.copy_bandwidth, host.host_memory_bandwidth) << path;
    EXPECT_LE(host.host_message_bandwidth, host.host_memory_bandwidth) << path;
    EXPECT_LE(host.host_message_stream_bandwidth, host.host_copy_bandwidth) << path;
  }
  EXPECT_FALSE(LoadCluster("/no/such/file.yaml").ok());
}

// A missing file is reported as a file that cannot be read, a name that is no preset and no file
// as an unknown preset; neither message mixes the two.
TEST(ClusterTest, AMissingFileAndAnUnknownPresetAreToldApart) {
  const std::string file = LoadCluster("/no/such/file.yaml").status().message();
  EXPECT_NE(file.find("cannot open cluster file '/no/such/file.yaml'"), std::string::npos) << file;
  EXPECT_EQ(file.find("preset"), std::string::npos) << file;
  const std::string name = LoadCluster("dgx-h300").status().message();
  EXPECT_NE(name.find("unknown cluster preset 'dgx-h300' (known: dgx-h100"), std::string::npos) << name;
  EXPECT_EQ(name.find("cannot open"), std::string::npos) << name;
}

TEST(ClusterTest, MappingFitsTheClusterAndNicsAreRailAligned) {
  ClusterSpec c = *ClusterPreset("dgx-h100");
  Result<ClusterSpec> fitted = FitClusterToMapping(c, RankMapping::Identity(20));
  ASSERT_TRUE(fitted.ok());
  EXPECT_EQ(fitted->num_nodes, 3);
  c.num_nodes = 2;
  EXPECT_FALSE(FitClusterToMapping(c, RankMapping::Identity(20)).ok());
  EXPECT_EQ(c.NicOfLocalGpu(5), 5);
  c.nics_per_node = 4;
  EXPECT_EQ(c.NicOfLocalGpu(5), 2);

  Topology t = Topology::Uniform(4, 2);
  Result<RankMapping> m = RankMapping::FromTopology(t, *ClusterPreset("dgx-h100"));
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->gpu_of_rank, (std::vector<int>{0, 1, 8, 9}));
  Topology wide = Topology::Uniform(16, 16);
  EXPECT_FALSE(RankMapping::FromTopology(wide, *ClusterPreset("dgx-h100")).ok());

  Topology planner_view = TopologyForCluster(*ClusterPreset("gb200-nvl72"), 144);
  EXPECT_EQ(planner_view.NumNodes(), 2);
  EXPECT_EQ(planner_view.Link(0, 71), LinkClass::kSameNode);
  EXPECT_EQ(planner_view.Link(0, 72), LinkClass::kNetwork);
}

// The lent one-GPU machine: ferry run puts every rank on GPU 0 and plans them as one node
// (Topology::Uniform(ranks, 8)); ranks_per_gpu gives the simulator the same plan and one GPU.
TEST(ClusterTest, RanksSharingAGpuPlanAsOneNodeAndMapToThatGpu) {
  ClusterSpec c = *ClusterPreset("dgx-h100");
  c.gpus_per_node = 2;
  c.nics_per_node = 2;
  c.ranks_per_gpu = 4;
  ASSERT_TRUE(c.Validate().ok());
  EXPECT_EQ(c.RanksPerNode(), 8);
  Topology t = TopologyForCluster(c, 12);
  EXPECT_EQ(t.NumNodes(), 2);
  EXPECT_EQ(t.Link(0, 7), LinkClass::kSameNode);
  EXPECT_EQ(t.Link(7, 8), LinkClass::kNetwork);
  EXPECT_EQ(t.ranks[5].nics, (std::vector<int>{1}));
  Result<RankMapping> m = RankMapping::FromTopology(t, c);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->gpu_of_rank, (std::vector<int>{0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2}));
  Result<ClusterSpec> fitted = FitClusterToMapping(c, *m);
  ASSERT_TRUE(fitted.ok());
  EXPECT_EQ(fitted->num_nodes, 2);

  Result<ClusterSpec> single = LoadCluster("tools/sim/clusters/h200-single.yaml");
  ASSERT_TRUE(single.ok());
  Result<RankMapping> on_one = RankMapping::FromTopology(TopologyForCluster(*single, 8), *single);
  ASSERT_TRUE(on_one.ok()) << on_one.status().ToString();
  EXPECT_EQ(on_one->gpu_of_rank, std::vector<int>(8, 0));

  c.ranks_per_gpu = 0;
  EXPECT_NE(c.Validate().message().find("ranks_per_gpu"), std::string::npos);
  c.ranks_per_gpu = kMaxRanksPerGpu + 1;
  EXPECT_FALSE(c.Validate().ok());
  EXPECT_NE(ParseClusterYaml("ranks_per_gpu: 1e12\n").status().message().find("out of range"),
            std::string::npos);
}

}  // namespace
}  // namespace ferry::sim
