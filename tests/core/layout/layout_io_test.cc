// Tests for layout and topology files: round trips, JSON input and clear errors for bad files.
#include "core/layout/layout_io.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "core/layout/builders.h"
#include "core/layout/validate.h"

namespace ferry {
namespace {

Box B(std::vector<int64_t> lo, std::vector<int64_t> hi) { return *Box::Make(lo, hi); }

void ExpectSameLayout(const Layout& a, const Layout& b) {
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    EXPECT_EQ(a.tensors[i].name, b.tensors[i].name);
    EXPECT_EQ(a.tensors[i].shape, b.tensors[i].shape);
    EXPECT_EQ(a.tensors[i].dtype, b.tensors[i].dtype);
  }
  ASSERT_EQ(a.buffers.size(), b.buffers.size());
  for (size_t i = 0; i < a.buffers.size(); ++i) {
    EXPECT_EQ(a.buffers[i].rank, b.buffers[i].rank);
    EXPECT_EQ(a.buffers[i].name, b.buffers[i].name);
    EXPECT_EQ(a.buffers[i].bytes, b.buffers[i].bytes) << a.buffers[i].name;
  }
  ASSERT_EQ(a.fragments.size(), b.fragments.size());
  for (size_t i = 0; i < a.fragments.size(); ++i) {
    const Fragment& x = a.fragments[i];
    const Fragment& y = b.fragments[i];
    EXPECT_EQ(x.tensor, y.tensor);
    EXPECT_EQ(x.box, y.box);
    EXPECT_EQ(x.loc.rank, y.loc.rank);
    EXPECT_EQ(x.loc.buffer, y.loc.buffer);
    EXPECT_EQ(x.loc.byte_offset, y.loc.byte_offset);
    for (int d = 0; d < x.box.ndim; ++d) EXPECT_EQ(x.loc.strides[d], y.loc.strides[d]);
  }
  ASSERT_EQ(a.padding.size(), b.padding.size());
  for (size_t i = 0; i < a.padding.size(); ++i) {
    EXPECT_EQ(a.padding[i].tensor, b.padding[i].tensor);
    EXPECT_EQ(a.padding[i].box, b.padding[i].box);
  }
}

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name;
}

Layout RichLayout() {
  Layout l;
  EXPECT_TRUE(AddMeshSharded(l, {"model.layers.0.mlp.down_proj.weight", {10, 6}, DType::kBF16},
                             DeviceMesh::Iota({2, 2}), {Shard(0), Shard(1)})
                  .ok());
  EXPECT_TRUE(AddVocabParallel(l, {"embed", {10, 4}, DType::kFP32}, {0, 1, 2, 3}, 2).ok());
  EXPECT_TRUE(AddFsdpFlatSharded(l, {{"a", {7, 5, 3}, DType::kBF16}, {"b", {11}, DType::kBF16}},
                                 {0, 1, 2}, "flat", 4)
                  .ok());
  EXPECT_TRUE(AddMegatronQkvInterleaved(l, {"q", {32, 3}, DType::kFP8E4M3},
                                        {"k", {8, 3}, DType::kFP8E4M3},
                                        {"v", {8, 3}, DType::kFP8E4M3}, 8, 2, 4, {0, 1}, "qkv")
                  .ok());
  // Names YAML would read as null, a boolean or a number unless quoted.
  EXPECT_TRUE(AddReplicated(l, {"null", {3}, DType::kInt64}, {5}, "true").ok());
  EXPECT_TRUE(AddReplicated(l, {"123", {3}, DType::kInt64}, {5}, "~").ok());
  // A tensor stack, whose name holds YAML's flow indicators '[', ':' and ']'.
  const int stack = *l.AddTensor({"experts.[0:4].w", {4, 2, 3}, DType::kBF16});
  l.PlaceFragment(stack, B({0, 0, 0}, {4, 2, 3}), 2, "w13", 0, {12, 3, 1});
  int t = *l.AddTensor({"partial", {4, 4}, DType::kFP16});
  l.AppendFragment(t, B({0, 0}, {2, 4}), 1, "partial");
  l.AddPadding(t, B({2, 0}, {4, 4}));
  return l;
}

TEST(LayoutIoTest, RoundTripThroughText) {
  Layout l = RichLayout();
  ASSERT_TRUE(ValidateLayout(l).ok()) << ValidateLayout(l).ToString();
  std::string text = LayoutToYaml(l);
  auto back = ParseLayoutYaml(text);
  ASSERT_TRUE(back.ok()) << back.status().ToString() << "\n" << text;
  ExpectSameLayout(l, *back);
  EXPECT_EQ(LayoutToYaml(*back), text);
  EXPECT_TRUE(ValidateLayout(*back).ok());
}

TEST(LayoutIoTest, RoundTripThroughFile) {
  Layout l = RichLayout();
  const std::string path = TempPath("layout.yaml");
  ASSERT_TRUE(SaveLayoutFile(l, path).ok());
  auto back = LoadLayoutFile(path);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ExpectSameLayout(l, *back);
}

TEST(LayoutIoTest, BlockScaledBuffersRoundTripAndAreValidated) {
  // One [256, 130] fp8 matrix and its 2 x 2 fp32 scales on rank 1.
  Layout l;
  const int t = l.AddTensor({"layers.0.x_proj.weight", {256, 130}, DType::kFP8E4M3}).value();
  l.AppendFragment(t, B({0, 0}, {256, 130}), 1, "x");
  const int scales = l.GetOrAddBuffer(1, "x_scale_inv");
  l.buffers.SetBytes(static_cast<size_t>(scales), 16);
  l.transforms.push_back({t, "fp8 e4m3 in 128x128 blocks", DType::kFP8E4M3});
  l.block_scaled.push_back({l.FindBuffer(1, "x"), scales, 1, 256, 130});
  ASSERT_TRUE(ValidateLayout(l).ok()) << ValidateLayout(l).ToString();
  const std::string text = LayoutToYaml(l);
  Result<Layout> back = ParseLayoutYaml(text);
  ASSERT_TRUE(back.ok()) << back.status().ToString() << "\n" << text;
  ASSERT_EQ(back->block_scaled.size(), 1u);
  const BlockScaledBuffer& b = back->block_scaled[0];
  EXPECT_EQ(b.buffer, back->FindBuffer(1, "x"));
  EXPECT_EQ(b.scales, back->FindBuffer(1, "x_scale_inv"));
  EXPECT_EQ(b.matrices, 1);
  EXPECT_EQ(b.rows, 256);
  EXPECT_EQ(b.cols, 130);
  EXPECT_EQ(b.scale_fmt, Fp8ScaleFormat::kFloat32);
  EXPECT_EQ(text.find("scale_fmt"), std::string::npos);  // the default is not written
  EXPECT_EQ(LayoutToYaml(*back), text);
  // UE8M0 scales round-trip as scale_fmt: ue8m0; another format name is refused.
  l.block_scaled[0].scale_fmt = Fp8ScaleFormat::kUe8m0;
  const std::string ue8m0 = LayoutToYaml(l);
  EXPECT_NE(ue8m0.find("scale_fmt: ue8m0"), std::string::npos) << ue8m0;
  Result<Layout> back_ue8m0 = ParseLayoutYaml(ue8m0);
  ASSERT_TRUE(back_ue8m0.ok()) << back_ue8m0.status().ToString();
  EXPECT_EQ(back_ue8m0->block_scaled[0].scale_fmt, Fp8ScaleFormat::kUe8m0);
  std::string e5m2 = ue8m0;
  e5m2.replace(e5m2.find("scale_fmt: ue8m0"), 16, "scale_fmt: e5m2");
  Result<Layout> bad_fmt = ParseLayoutYaml(e5m2);
  ASSERT_FALSE(bad_fmt.ok());
  EXPECT_NE(bad_fmt.status().message().find("block_scaled[0].scale_fmt"), std::string::npos);
  EXPECT_NE(bad_fmt.status().message().find("expected float32, ue8m0 or ue8m0_packed, got 'e5m2'"),
            std::string::npos) << bad_fmt.status().ToString();
  // DeepGEMM's SM100 packed codes: 256 rows of one int32 word (2 block columns), 1024 bytes; the
  // fp32 scales' 16 bytes no longer match, and the message names the format.
  l.block_scaled[0].scale_fmt = Fp8ScaleFormat::kUe8m0Packed;
  const Status packed_size = ValidateLayout(l);
  ASSERT_FALSE(packed_size.ok());
  EXPECT_NE(packed_size.message().find("or their ue8m0_packed scales' 16"), std::string::npos)
      << packed_size.ToString();
  l.buffers.SetBytes(static_cast<size_t>(scales), 1024);
  ASSERT_TRUE(ValidateLayout(l).ok()) << ValidateLayout(l).ToString();
  Result<Layout> back_packed = ParseLayoutYaml(LayoutToYaml(l));
  ASSERT_TRUE(back_packed.ok()) << back_packed.status().ToString();
  EXPECT_EQ(back_packed->block_scaled[0].scale_fmt, Fp8ScaleFormat::kUe8m0Packed);
  l.buffers.SetBytes(static_cast<size_t>(scales), 16);
  l.block_scaled[0].scale_fmt = Fp8ScaleFormat::kFloat32;
  // Scales of the wrong size (3 blocks' worth) are named.
  l.buffers.SetBytes(static_cast<size_t>(scales), 12);
  const Status bad = ValidateLayout(l);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("do not match its 33280 bytes or their float32 scales' 12"), std::string::npos)
      << bad.ToString();
  // A buffer name that the file does not declare.
  Result<Layout> unknown = ParseLayoutYaml(
      "tensors: [{name: w, shape: [4], dtype: fp8_e4m3}]\nfragments: [{tensor: w, box: [[0, 4]], rank: 0}]\n"
      "block_scaled: [{rank: 0, buffer: w, scales: w_scale_inv, rows: 1, cols: 4}]\n");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("block_scaled[0].scales"), std::string::npos)
      << unknown.status().ToString();
}

TEST(LayoutIoTest, JsonInputWithDefaults) {
  // Fragments without byte_offset are appended row-major; buffer defaults to the tensor's name.
  const std::string json = R"({
    "tensors": [{"name": "w", "shape": [8, 4], "dtype": "bfloat16"}],
    "buffers": [{"rank": 1, "name": "w", "bytes": 64}],
    "fragments": [
      {"tensor": "w", "box": [[0, 4], [0, 4]], "rank": 0},
      {"tensor": "w", "box": [[4, 8], [0, 4]], "rank": 1, "buffer": "w",
       "byte_offset": 0, "strides": [4, 1]}
    ]
  })";
  auto l = ParseLayoutYaml(json);
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  ASSERT_EQ(l->tensors.size(), 1u);
  EXPECT_EQ(l->tensors[0].dtype, DType::kBF16);
  ASSERT_EQ(l->fragments.size(), 2u);
  EXPECT_EQ(l->fragments[0].box, B({0, 0}, {4, 4}));
  EXPECT_EQ(l->fragments[0].loc.strides[0], 4);
  EXPECT_EQ(l->buffers[l->fragments[0].loc.buffer].bytes, 32);
  EXPECT_EQ(l->buffers[l->fragments[1].loc.buffer].bytes, 64);  // declared, larger than needed
  EXPECT_EQ(l->fragments[1].loc.rank, 1);
  EXPECT_TRUE(ValidateLayout(*l).ok());
}

void ExpectParseError(const std::string& text, const std::vector<std::string>& parts) {
  auto l = ParseLayoutYaml(text);
  ASSERT_FALSE(l.ok()) << text;
  EXPECT_EQ(l.status().code(), StatusCode::kInvalidArgument);
  for (const std::string& p : parts) {
    EXPECT_NE(l.status().message().find(p), std::string::npos)
        << "'" << p << "' not in: " << l.status().message();
  }
}

TEST(LayoutIoTest, BadFilesNameTheKeyPath) {
  const std::string tensors = "tensors:\n  - {name: w, shape: [8, 4], dtype: bf16}\n";
  ExpectParseError("tensors: [\n", {"not valid YAML/JSON", "line"});
  ExpectParseError("", {"empty"});
  ExpectParseError("fragments: []\n", {"tensors", "expected a list"});
  ExpectParseError("tensors:\n  - {name: w, shape: [8, x], dtype: bf16}\n",
                   {"tensors[0].shape[1]", "line 2", "expected an integer", "'x'"});
  ExpectParseError("tensors:\n  - {name: w, shape: [8, 4], dtype: bf17}\n",
                   {"tensors[0].dtype", "bf17"});
  ExpectParseError("tensors:\n  - {name: w, shape: [8, 4]}\n",
                   {"tensors[0]", "missing required key 'dtype'"});
  ExpectParseError("tensors:\n  - {name: w, shape: [8, 4], dtype: bf16, colour: red}\n",
                   {"tensors[0].colour", "unknown key"});
  ExpectParseError(tensors + "fragments:\n  - {tensor: w, box: [[0, 4], [0]], rank: 0}\n",
                   {"fragments[0].box[1]", "line 4", "[lo, hi] pair"});
  ExpectParseError(tensors + "fragments:\n  - {tensor: v, box: [[0, 4], [0, 4]], rank: 0}\n",
                   {"fragments[0].tensor", "unknown tensor 'v'"});
  ExpectParseError(tensors + "fragments:\n  - {tensor: w, box: [[0, 4], [0, 4]], rank: -1}\n",
                   {"fragments[0].rank", "value -1 is not in [0, 1073741824]"});
  ExpectParseError(tensors +
                       "fragments:\n  - {tensor: w, box: [[0, 4], [0, 4]], rank: 0, "
                       "byte_offset: 0, strides: [1]}\n",
                   {"fragments[0].strides", "1 strides for a box of 2 dims"});
  ExpectParseError(tensors +
                       "fragments:\n  - {tensor: w, box: [[0, 4], [0, 4]], rank: 0, "
                       "strides: [4, 1]}\n",
                   {"fragments[0]", "needs an explicit 'byte_offset'"});
  ExpectParseError(tensors + "buffers:\n  - {rank: 0, name: w, bytes: -3}\n",
                   {"buffers[0].bytes", "negative"});
  ExpectParseError(tensors + "padding:\n  - {tensor: w, box: [[4, 2], [0, 4]]}\n",
                   {"padding[0].box", "lo"});
  ExpectParseError("version: 2\n" + tensors, {"version", "unsupported version 2"});
  ExpectParseError(tensors + "fragments:\n  - {tensor: w, box: [[0, 4], [0, 4]], rank: 0, "
                             "byte_offset: 9223372036854775807}\n",
                   {"fragments[0].byte_offset", "9223372036854775807 is over the limit of"});
  ExpectParseError(tensors + "fragments:\n  - {tensor: w, box: [[0, 4], [0, 4]], rank: 0, "
                             "byte_offset: 0, strides: [4611686018427387904, 1]}\n",
                   {"fragments[0].strides", "stride 4611686018427387904 in dim 0 is over the limit"});
}

TEST(LayoutIoTest, MissingFileIsAnIoError) {
  auto l = LoadLayoutFile(TempPath("does-not-exist.yaml"));
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.status().code(), StatusCode::kIoError);
  EXPECT_NE(l.status().message().find("does-not-exist.yaml"), std::string::npos);
}

TEST(LayoutIoTest, FileErrorsNameTheFile) {
  const std::string path = TempPath("bad.yaml");
  {
    std::ofstream out(path);
    out << "tensors:\n  - {name: w, shape: [8, 4], dtype: 3}\n";
  }
  auto l = LoadLayoutFile(path);
  ASSERT_FALSE(l.ok());
  EXPECT_NE(l.status().message().find("bad.yaml"), std::string::npos) << l.status().message();
  EXPECT_NE(l.status().message().find("tensors[0].dtype"), std::string::npos);
}

void ExpectSameTopology(const Topology& a, const Topology& b) {
  ASSERT_EQ(a.NumRanks(), b.NumRanks());
  for (int r = 0; r < a.NumRanks(); ++r) {
    EXPECT_EQ(a.ranks[r].node, b.ranks[r].node);
    EXPECT_EQ(a.ranks[r].local_device, b.ranks[r].local_device);
    EXPECT_EQ(a.ranks[r].nics, b.ranks[r].nics);
  }
  EXPECT_EQ(a.nic_bandwidth, b.nic_bandwidth);
  EXPECT_EQ(a.intra_node_bandwidth, b.intra_node_bandwidth);
  EXPECT_EQ(a.copy_bandwidth, b.copy_bandwidth);
  EXPECT_EQ(a.network_latency, b.network_latency);
}

TEST(TopologyIoTest, RoundTrip) {
  Topology t = Topology::Uniform(16, 8);
  t.ranks[3].nics = {2, 3};
  t.nic_bandwidth = 25e9 / 3;  // not exactly representable in few digits
  t.network_latency = 1.7e-6;
  auto back = ParseTopologyYaml(TopologyToYaml(t));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ExpectSameTopology(t, *back);
  const std::string path = TempPath("topo.yaml");
  ASSERT_TRUE(SaveTopologyFile(t, path).ok());
  auto loaded = LoadTopologyFile(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  ExpectSameTopology(t, *loaded);
}

TEST(TopologyIoTest, UniformShorthandAndJson) {
  auto u = ParseTopologyYaml("uniform: {num_ranks: 16, gpus_per_node: 8}\nnic_bandwidth: 25e9\n");
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  Topology want = Topology::Uniform(16, 8);
  want.nic_bandwidth = 25e9;
  ExpectSameTopology(want, *u);
  auto j = ParseTopologyYaml(
      R"({"ranks": [{"node": 0, "local_device": 0}, {"node": 1, "local_device": 0, "nics": [0, 1]}],
          "network_latency": 2e-6})");
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  EXPECT_EQ(j->NumNodes(), 2);
  EXPECT_EQ(j->ranks[0].nics, std::vector<int>{0});
  EXPECT_EQ(j->ranks[1].nics, (std::vector<int>{0, 1}));
  EXPECT_EQ(j->network_latency, 2e-6);
}

TEST(TopologyIoTest, BadFiles) {
  auto both = ParseTopologyYaml("uniform: {num_ranks: 2, gpus_per_node: 2}\nranks: []\n");
  ASSERT_FALSE(both.ok());
  EXPECT_NE(both.status().message().find("exactly one of"), std::string::npos);
  auto bad = ParseTopologyYaml("ranks:\n  - {node: 0, local_device: 0}\n  - {node: a}\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("ranks[1].node"), std::string::npos)
      << bad.status().message();
  EXPECT_NE(bad.status().message().find("line 3"), std::string::npos);
  auto neg = ParseTopologyYaml("uniform: {num_ranks: 2, gpus_per_node: 2}\nnic_bandwidth: -1\n");
  ASSERT_FALSE(neg.ok());
  EXPECT_NE(neg.status().message().find("nic_bandwidth"), std::string::npos);
  auto zero = ParseTopologyYaml("uniform: {num_ranks: 0, gpus_per_node: 2}\n");
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.status().message().find("uniform.num_ranks"), std::string::npos);
  EXPECT_NE(zero.status().message().find("value 0 is not in [1, 1073741824]"), std::string::npos)
      << zero.status().message();
  auto nic = ParseTopologyYaml("ranks:\n  - {node: 0, local_device: 0, nics: [-3]}\n");
  ASSERT_FALSE(nic.ok());
  EXPECT_NE(nic.status().message().find("NIC index -3 is not in [0, 65536]"), std::string::npos)
      << nic.status().message();
}

}  // namespace
}  // namespace ferry
