// Helpers for the framework layout tests (framework_layouts_testutil.h).
#include "tests/tools/models/framework_layouts_testutil.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <map>
#include <utility>

#include "core/layout/tensor_stack.h"
#include "core/layout/validate.h"

namespace ferry::models {

ModelPreset Preset(const std::string& name, double scale) {
  Result<ModelPreset> p = MakePreset(name, scale);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return std::move(p).value();
}

ModelConfig OneLayerConfig(const std::string& name, ModelFamily family, int64_t hidden,
                           int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t vocab) {
  ModelConfig c;
  c.name = name;
  c.family = family;
  c.hidden = hidden;
  c.num_layers = 1;
  c.vocab = vocab;
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  c.head_dim = head_dim;
  return c;
}

ModelConfig TinyDeepseek(bool moe) {
  ModelConfig c = OneLayerConfig("tiny-ds", ModelFamily::kDeepseekV3, 8, 2, 2, 4, 64);
  c.num_layers = 2;
  c.q_lora_rank = 4;
  c.kv_lora_rank = 4;
  c.qk_nope_head_dim = 2;
  c.qk_rope_head_dim = 2;
  c.v_head_dim = 2;
  c.intermediate = 16;
  if (moe) {
    c.num_experts = 4;
    c.num_shared_experts = 1;
    c.moe_intermediate = 4;
    c.first_dense_layers = 1;
    c.router_bias = true;
  }
  c.nextn_layers = 1;
  return c;
}

ModelConfig BlockAlignedDeepseek(int64_t experts, int64_t q_lora_rank) {
  ModelConfig c = OneLayerConfig("fp8-ds", ModelFamily::kDeepseekV3, 256, 4, 4, 128, 64);
  c.num_layers = 2;
  c.q_lora_rank = q_lora_rank;
  c.kv_lora_rank = 128;
  c.qk_nope_head_dim = 64;
  c.qk_rope_head_dim = 64;
  c.v_head_dim = 64;
  c.intermediate = 512;
  c.num_experts = experts;
  c.num_shared_experts = 1;
  c.moe_intermediate = 256;
  c.first_dense_layers = 1;
  c.router_bias = true;
  c.nextn_layers = 1;
  return c;
}

ModelPreset PresetOf(const ModelConfig& c) {
  Result<ModelPreset> p = ModelPreset::FromConfig(c);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return std::move(p).value();
}

FrameworkSpec Spec(const std::string& text) {
  Result<FrameworkSpec> s = ParseFrameworkSpec(text);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.value();
}

Layout BuildAsSpecified(const ModelPreset& p, const std::string& spec, int first_rank) {
  Result<Layout> l = BuildFrameworkLayout(p, Spec(spec), first_rank);
  EXPECT_TRUE(l.ok()) << l.status().ToString();
  Status valid = ValidateLayout(*l);
  EXPECT_TRUE(valid.ok()) << spec << ": " << valid.ToString();
  return std::move(l).value();
}

Layout Build(const ModelPreset& p, const std::string& spec, int first_rank) {
  Result<Layout> members = UnstackTensors(BuildAsSpecified(p, spec, first_rank));
  EXPECT_TRUE(members.ok()) << members.status().ToString();
  Status valid = ValidateLayout(*members);
  EXPECT_TRUE(valid.ok()) << spec << " (members): " << valid.ToString();
  return std::move(members).value();
}

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
  // Dense fragments (their span is their bytes) must not share a byte; fragments whose rows
  // interleave with others (a transposed or column-strip store) are left to ValidateLayout's
  // exact check, which Build() and BuildAsSpecified() run.
  std::map<int, std::vector<std::pair<int64_t, int64_t>>> spans;
  for (const Fragment& f : l.fragments) {
    const std::pair<int64_t, int64_t> span = l.FragmentSpan(f);
    if (span.second == f.box.Volume() * DTypeSize(l.tensors[f.tensor].dtype)) {
      spans[f.loc.buffer].push_back(span);
    }
  }
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

bool Says(const Status& st, const std::string& part) {
  return st.message().find(part) != std::string::npos;
}

int64_t BytesOf(const Layout& l, int rank, const std::string& buffer) {
  const int b = l.FindBuffer(rank, buffer);
  return b < 0 ? -1 : l.buffers[static_cast<size_t>(b)].bytes;
}

DType DTypeOf(const Layout& l, const std::string& tensor) {
  const int t = l.FindTensor(tensor);
  EXPECT_GE(t, 0) << "no tensor " << tensor;
  return t < 0 ? DType::kUInt8 : l.tensors[static_cast<size_t>(t)].dtype;
}

std::vector<int64_t> SlotsOf(const Layout& l, int rank, const std::string& buffer,
                             const std::string& gate_stack, int64_t slot_bytes) {
  std::vector<int64_t> slots;
  for (const Fragment& f : FragmentsIn(l, rank, buffer, gate_stack)) {
    for (int64_t e = f.box.lo[0]; e < f.box.hi[0]; ++e) {
      const size_t slot = static_cast<size_t>(f.loc.byte_offset / slot_bytes + (e - f.box.lo[0]));
      if (slots.size() <= slot) slots.resize(slot + 1, -1);
      slots[slot] = e;
    }
  }
  return slots;
}

std::string WriteTemp(const std::string& name, const std::string& text) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
  std::ofstream(path) << text;
  return path;
}

bool Holds(const Layout& l, int rank, const std::string& buffer) {
  return l.FindBuffer(rank, buffer) >= 0;
}

std::string Qkv(int layer) {
  return "model.layers." + std::to_string(layer) + ".self_attn.qkv_proj.weight";
}

bool IsExpert(const std::string& name) { return name.find(".mlp.experts.") != std::string::npos; }

bool TpReplicated(const std::string& name) {
  for (const char* part : {"layernorm", "_norm.", "norm.weight", "norm_f.", "mlp.gate.",
                           "q_a_proj", "kv_a_proj_with_mqa"}) {
    if (name.find(part) != std::string::npos) return name.find("mixer.norm.") == std::string::npos;
  }
  return false;
}

std::function<int(const std::string&)> Copies(int dp, int tp, int expert_copies) {
  return [=](const std::string& n) {
    if (IsExpert(n)) return expert_copies;
    return TpReplicated(n) ? dp * tp : dp;
  };
}

}  // namespace ferry::models
