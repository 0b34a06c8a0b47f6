// Tests for tools/models/framework_layouts: spec parsing, hand-checked fragments of Megatron and
// vLLM layouts (QKV interleave, gate_up, expert ownership, stacked w13) and exact coverage of every
// tensor on both sides.
#include "tools/models/framework_layouts.h"

#include "core/layout/tensor_stack.h"
#include "core/layout/validate.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <functional>
#include <map>
#include <tuple>

namespace ferry::models {
namespace {

ModelPreset Preset(const std::string& name, double scale) {
  Result<ModelPreset> p = MakePreset(name, scale);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return std::move(p).value();
}

FrameworkSpec Spec(const std::string& text) {
  Result<FrameworkSpec> s = ParseFrameworkSpec(text);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.value();
}

// Builds the layout as `spec` says and checks it passes core/layout's ValidateLayout (bounds,
// buffers, memory overlap, full coverage).
Layout BuildAsSpecified(const ModelPreset& p, const std::string& spec, int first_rank = 0) {
  Result<Layout> l = BuildFrameworkLayout(p, Spec(spec), first_rank);
  EXPECT_TRUE(l.ok()) << l.status().ToString();
  Status valid = ValidateLayout(*l);
  EXPECT_TRUE(valid.ok()) << spec << ": " << valid.ToString();
  return std::move(l).value();
}

// The layout with its expert stacks (the default) expanded into the checkpoint's expert tensors,
// which the hand-checked tests below name; valid as well.
Layout Build(const ModelPreset& p, const std::string& spec, int first_rank = 0) {
  Result<Layout> members = UnstackTensors(BuildAsSpecified(p, spec, first_rank));
  EXPECT_TRUE(members.ok()) << members.status().ToString();
  Status valid = ValidateLayout(*members);
  EXPECT_TRUE(valid.ok()) << spec << " (members): " << valid.ToString();
  return std::move(members).value();
}

// Fragments of `hf_name` placed in buffer `buffer` on `rank`, in placement order.
std::vector<Fragment> FragmentsIn(const Layout& l, int rank, const std::string& buffer,
                                  const std::string& hf_name) {
  std::vector<Fragment> out;
  int b = l.FindBuffer(rank, buffer);
  int t = l.FindTensor(hf_name);
  for (const Fragment& f : l.fragments) {
    if (f.loc.buffer == b && f.tensor == t) out.push_back(f);
  }
  return out;
}

// Asserts every element of every tensor is covered exactly expected(name) times, that fragments of
// one buffer do not overlap in memory and fit in it, and that the layout holds every model tensor.
void ExpectCoverage(const Layout& l, const ModelPreset& p,
                    const std::function<int(const std::string&)>& expected) {
  ASSERT_EQ(l.tensors.size(), p.tensors().size());
  std::vector<std::vector<uint16_t>> counts(l.tensors.size());
  for (size_t t = 0; t < l.tensors.size(); ++t) counts[t].assign(l.tensors[t].NumElements(), 0);
  for (const Fragment& f : l.fragments) {
    const TensorSpec& t = l.tensors[f.tensor];
    const auto strides = RowMajorStrides(t.shape);
    const int nd = f.box.ndim;
    std::vector<int64_t> idx(f.box.lo.begin(), f.box.lo.begin() + nd);
    if (f.box.Empty()) continue;
    while (true) {
      int64_t flat = 0;
      for (int d = 0; d < nd; ++d) flat += idx[d] * strides[d];
      ++counts[f.tensor][flat];
      int d = nd - 1;
      while (d >= 0 && ++idx[d] == f.box.hi[d]) {
        idx[d] = f.box.lo[d];
        --d;
      }
      if (d < 0) break;
    }
  }
  for (size_t t = 0; t < l.tensors.size(); ++t) {
    const int want = expected(l.tensors[t].name);
    for (size_t i = 0; i < counts[t].size(); ++i) {
      if (counts[t][i] != want) {
        ADD_FAILURE() << l.tensors[t].name << " element " << i << " covered " << counts[t][i]
                      << " times, expected " << want;
        break;
      }
    }
  }
  std::map<int, std::vector<std::pair<int64_t, int64_t>>> spans;
  for (const Fragment& f : l.fragments) spans[f.loc.buffer].push_back(l.FragmentSpan(f));
  for (auto& [b, list] : spans) {
    std::sort(list.begin(), list.end());
    for (size_t i = 0; i < list.size(); ++i) {
      ASSERT_LE(list[i].first + list[i].second, l.buffers[b].bytes) << l.buffers[b].name;
      if (i > 0) {
        ASSERT_LE(list[i - 1].first + list[i - 1].second, list[i].first)
            << "overlap in " << l.buffers[b].name << " on rank " << l.buffers[b].rank;
      }
    }
  }
}

bool IsExpert(const std::string& name) { return name.find(".mlp.experts.") != std::string::npos; }

// Weights every TP rank holds whole: norms (not Mamba's gated norm, which is TP-sharded), routers,
// MLA's down projections.
bool TpReplicated(const std::string& name) {
  for (const char* part : {"layernorm", "_norm.", "norm.weight", "norm_f.", "mlp.gate.",
                           "q_a_proj", "kv_a_proj_with_mqa"}) {
    if (name.find(part) != std::string::npos) return name.find("mixer.norm.") == std::string::npos;
  }
  return false;
}

// Expected copies of each element: experts once per expert-DP replica, TP-replicated weights on
// every rank of each DP replica, everything else once per DP replica.
std::function<int(const std::string&)> Copies(int dp, int tp, int expert_copies) {
  return [=](const std::string& n) {
    if (IsExpert(n)) return expert_copies;
    return TpReplicated(n) ? dp * tp : dp;
  };
}

TEST(FrameworkSpecTest, ParsesAndResolves) {
  FrameworkSpec m = Spec("megatron:tp=2,pp=4,ep=16");
  EXPECT_EQ(m.kind, FrameworkSpec::Kind::kMegatron);
  EXPECT_EQ(m.megatron.tp, 2);
  EXPECT_EQ(m.megatron.pp, 4);
  EXPECT_EQ(m.megatron.ep, 16);
  ModelConfig qwen = PresetConfig("qwen3-235b-a22b").value();
  FrameworkSpec r = ResolveFrameworkSpec(m, qwen).value();
  EXPECT_EQ(r.megatron.etp, 2);  // Megatron's default: etp = tp
  EXPECT_EQ(r.megatron.dp, 16);  // 2 * 16 / 2
  EXPECT_EQ(NumRanks(r), 128);
  EXPECT_EQ(r.ToString(), "megatron:tp=2,pp=4,ep=16,etp=2,dp=16,cp=1");
  FrameworkSpec v = Spec("vllm:tp=8, dp=2 ,ep=16");
  EXPECT_EQ(NumRanks(v), 16);
  EXPECT_EQ(v.ToString(), "vllm:tp=8,dp=2,ep=16");
  EXPECT_EQ(NumRanks(Spec("vllm")), 1);
  EXPECT_FALSE(m.megatron.separate_expert_buffers);
  FrameworkSpec separate = Spec("megatron:ep=4,experts=separate");
  EXPECT_TRUE(separate.megatron.separate_expert_buffers);
  EXPECT_EQ(separate.ToString(), "megatron:tp=1,pp=1,ep=4,cp=1,experts=separate");
  EXPECT_FALSE(Spec("megatron:ep=4,experts=stacked").megatron.separate_expert_buffers);
  EXPECT_TRUE(m.stack_expert_tensors);
  EXPECT_TRUE(Spec("vllm:ep=2,expert_tensors=stacks").stack_expert_tensors);
  FrameworkSpec members = Spec("vllm:tp=2,ep=2,expert_tensors=members");
  EXPECT_FALSE(members.stack_expert_tensors);
  EXPECT_EQ(members.ToString(), "vllm:tp=2,dp=1,ep=2,expert_tensors=members");
  EXPECT_EQ(Spec("megatron:ep=4,experts=separate,expert_tensors=members").ToString(),
            "megatron:tp=1,pp=1,ep=4,cp=1,experts=separate,expert_tensors=members");

  for (const char* bad :
       {"fsdp:tp=2", "megatron:tp=0", "megatron:tq=2", "vllm:tp=2,tp=4", "vllm:pp=2",
        "megatron:tp=x", "megatron:tp=", "megatron:experts=fused", "megatron:experts",
        "vllm:experts=separate", "megatron:experts=stacked,experts=separate",
        "vllm:expert_tensors=stacked", "megatron:expert_tensors",
        "vllm:expert_tensors=members,expert_tensors=stacks"}) {
    EXPECT_FALSE(ParseFrameworkSpec(bad).ok()) << bad;
  }
  // Qwen3-235B has 4 KV heads: Megatron cannot split its query groups 8 ways.
  Result<FrameworkSpec> tp8 = ResolveFrameworkSpec(Spec("megatron:tp=8"), qwen);
  ASSERT_FALSE(tp8.ok());
  EXPECT_NE(tp8.status().message().find("num_kv_heads"), std::string::npos);
  EXPECT_FALSE(ResolveFrameworkSpec(Spec("vllm:tp=2,ep=3"), qwen).ok());
  EXPECT_FALSE(ResolveFrameworkSpec(Spec("megatron:ep=2"), PresetConfig("llama-3.1-8b").value()).ok());
}

TEST(MegatronLayoutTest, LlamaQkvInterleaveGateUpAndStages) {
  ModelPreset p = Preset("llama-3.1-8b", 1.0 / 64);  // hidden 64, 32 heads, 8 kv, head_dim 2
  ASSERT_EQ(p.config().hidden, 64);
  ASSERT_EQ(p.config().intermediate, 224);
  Layout l = Build(p, "megatron:tp=2,pp=2,dp=2");
  EXPECT_EQ(l.Ranks(), (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  ExpectCoverage(l, p, Copies(2, 2, 0));

  // linear_qkv on TP rank 1: groups 4..7; group rows = 4 q heads * 2 + k 2 + v 2 = 12 rows of 64.
  const std::string qkv = "decoder.layers.0.self_attention.linear_qkv.weight";
  auto q = FragmentsIn(l, 1, qkv, "model.layers.0.self_attn.q_proj.weight");
  auto k = FragmentsIn(l, 1, qkv, "model.layers.0.self_attn.k_proj.weight");
  auto v = FragmentsIn(l, 1, qkv, "model.layers.0.self_attn.v_proj.weight");
  ASSERT_EQ(q.size(), 4u);
  ASSERT_EQ(k.size(), 4u);
  ASSERT_EQ(v.size(), 4u);
  const int64_t row = 64 * 2;  // bytes
  EXPECT_EQ(q[0].box.lo[0], 32);
  EXPECT_EQ(q[0].box.hi[0], 40);
  EXPECT_EQ(q[0].loc.byte_offset, 0);
  EXPECT_EQ(k[0].box.lo[0], 8);
  EXPECT_EQ(k[0].loc.byte_offset, 8 * row);
  EXPECT_EQ(v[0].loc.byte_offset, 10 * row);
  EXPECT_EQ(q[1].box.lo[0], 40);
  EXPECT_EQ(q[1].loc.byte_offset, 12 * row);
  EXPECT_EQ(v[3].box.lo[0], 14);
  EXPECT_EQ(v[3].loc.byte_offset, (3 * 12 + 10) * row);
  EXPECT_EQ(l.buffers[l.FindBuffer(1, qkv)].bytes, 48 * row);

  // linear_fc1 on TP rank 1 = [gate rows 112..223; up rows 112..223].
  const std::string fc1 = "decoder.layers.0.mlp.linear_fc1.weight";
  auto gate = FragmentsIn(l, 1, fc1, "model.layers.0.mlp.gate_proj.weight");
  auto up = FragmentsIn(l, 1, fc1, "model.layers.0.mlp.up_proj.weight");
  ASSERT_EQ(gate.size(), 1u);
  ASSERT_EQ(up.size(), 1u);
  EXPECT_EQ(gate[0].box.lo[0], 112);
  EXPECT_EQ(gate[0].loc.byte_offset, 0);
  EXPECT_EQ(up[0].box.lo[0], 112);
  EXPECT_EQ(up[0].loc.byte_offset, 112 * row);
  // linear_fc2 (down, row-parallel) on TP rank 1: columns 112..223.
  auto down = FragmentsIn(l, 1, "decoder.layers.0.mlp.linear_fc2.weight",
                          "model.layers.0.mlp.down_proj.weight");
  ASSERT_EQ(down.size(), 1u);
  EXPECT_EQ(down[0].box.lo[1], 112);
  EXPECT_EQ(down[0].box.hi[1], 224);

  // Stage 1 = ranks 4..7 holds layers 16..31 under local numbers, the output layer, no embedding.
  EXPECT_EQ(FragmentsIn(l, 6, "decoder.layers.0.self_attention.linear_proj.weight",
                        "model.layers.16.self_attn.o_proj.weight").size(), 1u);
  EXPECT_EQ(l.FindBuffer(4, "embedding.word_embeddings.weight"), -1);
  EXPECT_GE(l.FindBuffer(4, "output_layer.weight"), 0);
  EXPECT_GE(l.FindBuffer(2, "embedding.word_embeddings.weight"), 0);  // DP replica 1 of stage 0
  EXPECT_EQ(l.FindBuffer(0, "decoder.layers.16.self_attention.linear_proj.weight"), -1);
}

TEST(MegatronLayoutTest, FirstRankOffsetsEveryRank) {
  ModelPreset p = Preset("llama-3.1-8b", 1.0 / 64);
  Layout l = Build(p, "megatron:tp=2,pp=2", 10);
  EXPECT_EQ(l.Ranks(), (std::vector<int>{10, 11, 12, 13}));
}

TEST(MegatronLayoutTest, MoeExpertOwnershipAndReplication) {
  ModelPreset p = Preset("qwen3-30b-a3b", 1.0 / 64);  // 128 experts, moe_intermediate 16
  // tp=2, ep=4, etp=1: dp = lcm(2, 4) / 2 = 2, 4 ranks a stage, expert-dp 1.
  Layout l = Build(p, "megatron:tp=2,pp=2,ep=4,etp=1");
  EXPECT_EQ(l.Ranks().size(), 8u);
  ExpectCoverage(l, p, Copies(2, 2, 1));
  // Expert 40 of layer 3 (stage 0): EP rank 1 (experts 32..63), local index 8, on rank 1. The
  // local experts are stacked in one buffer: [gate; up] of 2 x 16 rows of 32 columns each.
  const int64_t fc1_bytes = 2 * 16 * 32 * 2;
  auto e = FragmentsIn(l, 1, "decoder.layers.3.mlp.experts.linear_fc1.weight",
                       "model.layers.3.mlp.experts.40.up_proj.weight");
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].loc.byte_offset, 8 * fc1_bytes + 16 * 32 * 2);  // after expert 8's gate rows
  EXPECT_TRUE(FragmentsIn(l, 0, "decoder.layers.3.mlp.experts.linear_fc1.weight",
                          "model.layers.3.mlp.experts.40.up_proj.weight").empty());
  // Layer 24 is local layer 0 of stage 1 (ranks 4..7): expert 127 on EP rank 3 = rank 7, local 31.
  auto down = FragmentsIn(l, 7, "decoder.layers.0.mlp.experts.linear_fc2.weight",
                          "model.layers.24.mlp.experts.127.down_proj.weight");
  ASSERT_EQ(down.size(), 1u);
  EXPECT_EQ(down[0].loc.byte_offset, 31 * 32 * 16 * 2);
  // experts=separate: one buffer per local expert, as before stacking.
  Layout separate = Build(p, "megatron:tp=2,pp=2,ep=4,etp=1,experts=separate");
  ExpectCoverage(separate, p, Copies(2, 2, 1));
  auto own = FragmentsIn(separate, 1, "decoder.layers.3.mlp.experts.linear_fc1.weight8",
                         "model.layers.3.mlp.experts.40.up_proj.weight");
  ASSERT_EQ(own.size(), 1u);
  EXPECT_EQ(own[0].loc.byte_offset, 16 * 32 * 2);
  EXPECT_EQ(FragmentsIn(separate, 7, "decoder.layers.0.mlp.experts.linear_fc2.weight31",
                        "model.layers.24.mlp.experts.127.down_proj.weight").size(), 1u);
  // With etp=2 each expert FFN is split over 2 ranks and expert-dp is 2.
  Layout etp = Build(p, "megatron:tp=2,ep=2,etp=2,dp=4");
  ExpectCoverage(etp, p, Copies(4, 2, 2));
  auto half = FragmentsIn(etp, 1, "decoder.layers.0.mlp.experts.linear_fc1.weight",
                          "model.layers.0.mlp.experts.0.gate_proj.weight");
  ASSERT_EQ(half.size(), 1u);
  EXPECT_EQ(half[0].box.lo[0], 8);
  EXPECT_EQ(half[0].box.hi[0], 16);
}

TEST(MegatronLayoutTest, DeepseekAndNemotronCoverage) {
  ModelPreset ds = Preset("deepseek-v3", 1.0 / 64);
  Layout l = Build(ds, "megatron:tp=2,pp=4,ep=8,etp=1");  // dp 4, expert-dp 1
  ExpectCoverage(l, ds, Copies(4, 2, 1));
  EXPECT_GE(l.FindBuffer(0, "decoder.layers.0.self_attention.linear_kv_up_proj.weight"), 0);
  EXPECT_GE(l.FindBuffer(0, "decoder.layers.3.mlp.shared_experts.linear_fc1.weight"), 0);

  ModelPreset nh = Preset("nemotron-h-8b", 1.0 / 16);
  Layout m = Build(nh, "megatron:tp=2,pp=2,cp=2");
  ExpectCoverage(m, nh, Copies(2, 2, 0));  // CP ranks hold replicas
  // in_proj on TP rank 1 = [z_1; x_1; B_1; C_1; dt_1].
  const ModelConfig& c = nh.config();
  const int64_t di = c.MambaInner(), gs = c.mamba_groups * c.ssm_state_size;
  auto in = FragmentsIn(m, 1, "decoder.layers.0.mixer.in_proj.weight",
                        "backbone.layers.0.mixer.in_proj.weight");
  ASSERT_EQ(in.size(), 5u);
  EXPECT_EQ(in[0].box.lo[0], di / 2);
  EXPECT_EQ(in[1].box.lo[0], di + di / 2);
  EXPECT_EQ(in[2].box.lo[0], 2 * di + gs / 2);
  EXPECT_EQ(in[3].box.lo[0], 2 * di + gs + gs / 2);
  EXPECT_EQ(in[4].box.lo[0], 2 * di + 2 * gs + c.mamba_num_heads / 2);
  EXPECT_EQ(in[4].loc.byte_offset, (di + gs) * c.hidden * 2);
}

TEST(VllmLayoutTest, LlamaQkvGateUpAndDpReplicas) {
  ModelPreset p = Preset("llama-3.1-8b", 1.0 / 64);
  Layout l = Build(p, "vllm:tp=2,dp=2", 8);
  EXPECT_EQ(l.Ranks(), (std::vector<int>{8, 9, 10, 11}));
  ExpectCoverage(l, p, Copies(2, 2, 0));
  const std::string qkv = "model.layers.5.self_attn.qkv_proj.weight";
  const int64_t row = 64 * 2;
  auto q = FragmentsIn(l, 11, qkv, "model.layers.5.self_attn.q_proj.weight");
  auto k = FragmentsIn(l, 11, qkv, "model.layers.5.self_attn.k_proj.weight");
  auto v = FragmentsIn(l, 11, qkv, "model.layers.5.self_attn.v_proj.weight");
  ASSERT_EQ(q.size(), 1u);
  EXPECT_EQ(q[0].box.lo[0], 32);  // 16 heads * 2 rows per TP rank
  EXPECT_EQ(k[0].box.lo[0], 8);   // KV heads 4..7
  EXPECT_EQ(k[0].loc.byte_offset, 32 * row);
  EXPECT_EQ(v[0].loc.byte_offset, 40 * row);
  auto up = FragmentsIn(l, 9, "model.layers.5.mlp.gate_up_proj.weight", "model.layers.5.mlp.up_proj.weight");
  ASSERT_EQ(up.size(), 1u);
  EXPECT_EQ(up[0].box.lo[0], 112);
  EXPECT_EQ(up[0].loc.byte_offset, 112 * row);
}

TEST(VllmLayoutTest, KvHeadsReplicatedWhenTpExceedsThem) {
  ModelPreset p = Preset("llama-3.1-8b", 1.0 / 64);  // 8 KV heads
  Layout l = Build(p, "vllm:tp=16");
  auto kv_replicas = [](const std::string& n) {
    if (TpReplicated(n)) return 16;
    return n.find("k_proj") != std::string::npos || n.find("v_proj") != std::string::npos ? 2 : 1;
  };
  ExpectCoverage(l, p, kv_replicas);
  auto k5 = FragmentsIn(l, 5, "model.layers.0.self_attn.qkv_proj.weight",
                        "model.layers.0.self_attn.k_proj.weight");
  ASSERT_EQ(k5.size(), 1u);
  EXPECT_EQ(k5[0].box.lo[0], 2 * 2);  // rank 5 -> KV head 2 (head_dim 2)
  EXPECT_EQ(k5[0].box.hi[0], 3 * 2);
}

TEST(VllmLayoutTest, MoeStackedW13AndExpertParallel) {
  ModelPreset p = Preset("qwen3-30b-a3b", 1.0 / 64);  // hidden 32, moe_intermediate 16
  Layout ep = Build(p, "vllm:tp=2,dp=2,ep=4");
  ExpectCoverage(ep, p, Copies(2, 2, 1));
  // Rank 2 owns experts 64..95; local expert 5 = expert 69 at 5 * (2*16*32) elements.
  const std::string w13 = "model.layers.7.mlp.experts.w13_weight";
  auto up = FragmentsIn(ep, 2, w13, "model.layers.7.mlp.experts.69.up_proj.weight");
  ASSERT_EQ(up.size(), 1u);
  EXPECT_EQ(up[0].loc.byte_offset, (5 * 2 * 16 * 32 + 16 * 32) * 2);
  EXPECT_EQ(ep.buffers[ep.FindBuffer(2, w13)].bytes, 32 * 2 * 16 * 32 * 2);
  auto w2 = FragmentsIn(ep, 2, "model.layers.7.mlp.experts.w2_weight",
                        "model.layers.7.mlp.experts.69.down_proj.weight");
  ASSERT_EQ(w2.size(), 1u);
  EXPECT_EQ(w2[0].loc.byte_offset, 5 * 32 * 16 * 2);
  // ep=1: every rank holds every expert, its FFN split 4 ways.
  Layout tp = Build(p, "vllm:tp=2,dp=2");
  ExpectCoverage(tp, p, Copies(2, 2, 1));
  auto g = FragmentsIn(tp, 3, "model.layers.0.mlp.experts.w13_weight",
                       "model.layers.0.mlp.experts.127.gate_proj.weight");
  ASSERT_EQ(g.size(), 1u);
  EXPECT_EQ(g[0].box.lo[0], 12);
  EXPECT_EQ(g[0].box.hi[0], 16);
}

TEST(VllmLayoutTest, EnginesAreWholeIndependentCopies) {
  ModelPreset p = Preset("qwen3-30b-a3b", 1.0 / 64);
  Layout one = Build(p, "vllm:tp=2,dp=2,ep=4");
  Layout three = Build(p, "vllm:tp=2,dp=2,ep=4,engines=3");
  // Each engine holds every expert once and everything else once per DP replica.
  auto copies = Copies(2, 2, 1);
  ExpectCoverage(three, p, [&](const std::string& n) { return 3 * copies(n); });
  EXPECT_EQ(three.fragments.size(), 3 * one.fragments.size());
  EXPECT_EQ(three.Ranks(), (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}));
  // Engine 2's rank 10 mirrors engine 0's rank 2: experts 64..95 of layer 7 in the same place.
  const std::string w13 = "model.layers.7.mlp.experts.w13_weight";
  const std::string up = "model.layers.7.mlp.experts.69.up_proj.weight";
  auto first = FragmentsIn(three, 2, w13, up);
  auto third = FragmentsIn(three, 10, w13, up);
  ASSERT_EQ(first.size(), 1u);
  ASSERT_EQ(third.size(), 1u);
  EXPECT_EQ(third[0].box, first[0].box);
  EXPECT_EQ(third[0].loc.byte_offset, first[0].loc.byte_offset);
  EXPECT_EQ(Spec("vllm:tp=2,dp=2,ep=4,engines=3").ToString(), "vllm:tp=2,dp=2,ep=4,engines=3");
  EXPECT_EQ(NumRanks(Spec("vllm:tp=2,dp=2,ep=4,engines=3")), 12);
}

TEST(VllmLayoutTest, DeepseekAndNemotronCoverage) {
  ModelPreset ds = Preset("deepseek-v3", 1.0 / 64);
  Layout l = Build(ds, "vllm:tp=4,dp=2,ep=8");
  ExpectCoverage(l, ds, Copies(2, 4, 1));
  auto kv_a = FragmentsIn(l, 0, "model.layers.0.self_attn.fused_qkv_a_proj.weight",
                          "model.layers.0.self_attn.kv_a_proj_with_mqa.weight");
  ASSERT_EQ(kv_a.size(), 1u);
  EXPECT_EQ(kv_a[0].loc.byte_offset, ds.config().q_lora_rank * ds.config().hidden * 2);
  ModelPreset nh = Preset("nemotron-h-8b", 1.0 / 16);
  Layout m = Build(nh, "vllm:tp=4,dp=2");
  ExpectCoverage(m, nh, Copies(2, 4, 0));
  EXPECT_GE(m.FindBuffer(0, "model.layers.0.mixer.A"), 0);
}

// A fragment in terms that do not depend on tensor or buffer numbering.
using PlacedFragment = std::tuple<std::string, std::string, int, std::string, int64_t,
                                  std::vector<int64_t>>;
std::vector<PlacedFragment> Placed(const Layout& l) {
  std::vector<PlacedFragment> out;
  for (const Fragment& f : l.fragments) {
    out.emplace_back(
        l.tensors[f.tensor].name, f.box.ToString(), f.loc.rank, l.buffers[f.loc.buffer].name,
        f.loc.byte_offset,
        std::vector<int64_t>(f.loc.strides.begin(), f.loc.strides.begin() + f.box.ndim));
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Experts as tensor stacks (the default) and as the checkpoint's expert tensors are the same bytes
// in the same buffers: the stacked layout expanded into members equals the member layout, fragment
// for fragment, with equal buffer sizes, and stacks take one fragment per rank and projection
// (per expert where each expert has its own buffer).
TEST(FrameworkLayoutTest, ExpertStacksHoldTheMembersBytes) {
  for (const auto& [model, scale] : {std::pair<const char*, double>{"qwen3-30b-a3b", 1.0 / 64},
                                     {"deepseek-v3", 1.0 / 64}}) {
    ModelPreset p = Preset(model, scale);
    for (const std::string spec :
         {"megatron:tp=2,pp=2,ep=4,etp=1", "megatron:tp=2,pp=2,ep=4,etp=2",
          "megatron:tp=2,pp=2,ep=4,etp=1,experts=separate", "vllm:tp=2,dp=2,ep=4", "vllm:tp=2,dp=2",
          "vllm:tp=2,dp=2,ep=4,engines=2"}) {
      SCOPED_TRACE(std::string(model) + " " + spec);
      const Layout stacked = BuildAsSpecified(p, spec, 3);
      const Layout members = BuildAsSpecified(p, spec + ",expert_tensors=members", 3);
      const Layout expanded = UnstackTensors(stacked).value();
      EXPECT_EQ(Placed(expanded), Placed(members));
      ASSERT_EQ(stacked.buffers.size(), members.buffers.size());
      std::map<std::pair<int, std::string>, int64_t> sizes;
      for (const BufferSpec& b : members.buffers) sizes[{b.rank, b.name}] = b.bytes;
      for (const BufferSpec& b : stacked.buffers) EXPECT_EQ((sizes[{b.rank, b.name}]), b.bytes);
      int stacks = 0;
      for (const TensorSpec& t : stacked.tensors) stacks += ParseTensorStackName(t.name) ? 1 : 0;
      EXPECT_EQ(stacked.tensors.size() - stacks,
                members.tensors.size() - stacks * p.config().num_experts);
      if (spec.find("separate") == std::string::npos) {
        EXPECT_LT(stacked.fragments.size(), members.fragments.size());
      } else {  // one buffer per expert: one fragment per expert either way
        EXPECT_EQ(stacked.fragments.size(), members.fragments.size());
      }
    }
  }
}

TEST(RefitLayoutsTest, RanksAndTopology) {
  ModelPreset p = Preset("qwen3-30b-a3b", 1.0 / 64);
  RefitOptions options;
  options.gpus_per_node = 4;
  Result<RefitLayouts> r =
      BuildRefitLayouts(p, Spec("megatron:tp=2,pp=2,ep=4,etp=1"), Spec("vllm:tp=2,dp=2"), options);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->source.Ranks().front(), 0);
  EXPECT_EQ(r->source.Ranks().back(), 7);
  EXPECT_EQ(r->destination_first_rank, 8);
  EXPECT_EQ(r->destination.Ranks().front(), 8);
  EXPECT_EQ(r->destination.Ranks().back(), 11);
  EXPECT_EQ(r->topology.NumRanks(), 12);
  EXPECT_EQ(r->topology.NumNodes(), 3);
  options.colocated = true;
  r = BuildRefitLayouts(p, Spec("megatron:tp=2,pp=2,ep=4,etp=1"), Spec("vllm:tp=2,dp=2"), options);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->destination.Ranks().front(), 0);
  EXPECT_EQ(r->topology.NumRanks(), 8);
  options.gpus_per_node = 0;
  EXPECT_FALSE(BuildRefitLayouts(p, Spec("vllm"), Spec("vllm"), options).ok());
}

#if defined(__SANITIZE_ADDRESS__)
constexpr double kCpuBudgetSeconds = 20.0;  // ASan/UBSan builds run several times slower
#else
constexpr double kCpuBudgetSeconds = 2.0;
#endif

// Building the full DeepSeek-V3 and Kimi-K2 layouts at 512-1024 ranks must stay interactive.
TEST(FrameworkLayoutSpeedTest, DeepseekAndKimiAtScale) {
  for (const char* model : {"deepseek-v3", "kimi-k2"}) {
    ModelPreset p = Preset(model, 1.0);
    const std::clock_t cpu_start = std::clock();
    const auto start = std::chrono::steady_clock::now();
    Result<RefitLayouts> r = BuildRefitLayouts(p, Spec("megatron:tp=1,pp=16,ep=64"),  // 1024 ranks
                                               Spec("vllm:tp=8,dp=64,ep=128"));     // 512 ranks
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double cpu_seconds = static_cast<double>(std::clock() - cpu_start) / CLOCKS_PER_SEC;
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->source.Ranks().size(), 1024u);
    EXPECT_EQ(r->destination.Ranks().size(), 512u);
    RecordProperty(std::string(model) + "_cpu_seconds", std::to_string(cpu_seconds));
    std::printf("%s: %zu + %zu fragments in %.3f s wall, %.3f s CPU\n", model,
                r->source.fragments.size(), r->destination.fragments.size(), seconds, cpu_seconds);
    // CPU time, not wall time, so a loaded machine does not fail the test.
    EXPECT_LT(cpu_seconds, kCpuBudgetSeconds) << "expected well under 1 s";
  }
}

}  // namespace
}  // namespace ferry::models
