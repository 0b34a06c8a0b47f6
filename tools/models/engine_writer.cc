// The inference engines' shared module storage (tools/models/engine_writer.h): fused qkv_proj, MLA
// and FusedMoE expert weights placed on the rank groups the engine writers pass in.
#include "tools/models/engine_writer.h"

#include "core/layout/builders.h"
#include "core/layout/tensor_stack.h"

namespace ferry::models {

// vllm/model_executor/layers/linear.py QKVParallelLinear; sglang srt/layers/linear.py
// QKVParallelLinear (the same rows, its tp_rank/tp_size the attention group's)
Status EngineWriter::GqaAttention(int64_t l, const std::string& p, const std::string& module,
                                  const std::vector<int>& group) {
  const std::string attn = p + (module == "mixer." ? "mixer." : "self_attn.");
  FERRY_RETURN_IF_ERROR(FusedQkv(l, module, "weight", group, attn + "qkv_proj.weight"));
  // Qwen2's biases: vllm/model_executor/models/qwen2.py builds qkv_proj with bias=True, a 1-D
  // parameter of the rank's fused rows (ColumnParallelLinear: output_dim 0) that
  // QKVParallelLinear.weight_loader fills like the weight's rows
  if (c_.qkv_bias)
    FERRY_RETURN_IF_ERROR(FusedQkv(l, module, "bias", group, attn + "qkv_proj.bias"));
  FERRY_RETURN_IF_ERROR(Row(H(l, module + "o_proj.weight"), group, attn + "o_proj.weight"));
  if (!c_.qk_norm) return Status::Ok();
  FERRY_RETURN_IF_ERROR(Replicated(H(l, module + "q_norm.weight"), group, attn + "q_norm.weight"));
  return Replicated(H(l, module + "k_norm.weight"), group, attn + "k_norm.weight");
}

Status EngineWriter::FusedQkv(int64_t l, const std::string& module, const std::string& param,
                              const std::vector<int>& group, const std::string& buffer) {
  FERRY_ASSIGN_OR_RETURN(const TensorSpec* q, LayerTensor(l, module + "q_proj." + param));
  FERRY_ASSIGN_OR_RETURN(const TensorSpec* k, LayerTensor(l, module + "k_proj." + param));
  FERRY_ASSIGN_OR_RETURN(const TensorSpec* v, LayerTensor(l, module + "v_proj." + param));
  const int64_t tp = static_cast<int64_t>(group.size());
  const int64_t kv = c_.num_kv_heads;
  const int64_t hd = c_.head_dim;
  for (int64_t i = 0; i < tp; ++i) {
    // QKVParallelLinear.weight_loader: k and v rows of KV shard tp_rank // num_kv_head_replicas
    Box kv_box = tp <= kv ? RowShard(*k, 0, kv * hd, tp, i)
                          : Rows(*k, i / (tp / kv) * hd, (i / (tp / kv) + 1) * hd);
    FERRY_RETURN_IF_ERROR(
        AddFusedConcat(out_, group[static_cast<size_t>(i)], buffer,
                       {{*q, RowShard(*q, 0, q->shape[0], tp, i)}, {*k, kv_box}, {*v, kv_box}}, 0));
  }
  return Status::Ok();
}

// vllm/model_executor/models/deepseek_v2.py DeepseekV2MLAAttention (fused_qkv_a_proj); sglang
// srt/models/deepseek_v2.py DeepseekV2AttentionMLA (fused_qkv_a_proj_with_mqa, filled by
// load_weights as torch.cat([q_a_proj, kv_a_proj_with_mqa], dim=0))
Status EngineWriter::MlaAttention(int64_t l, const std::string& p, const std::vector<int>& group,
                                  const std::string& fused_a) {
  const std::string a = p + "self_attn.";
  FERRY_ASSIGN_OR_RETURN(const TensorSpec* kv_a,
                         LayerTensor(l, "self_attn.kv_a_proj_with_mqa.weight"));
  if (c_.q_lora_rank > 0) {
    FERRY_ASSIGN_OR_RETURN(const TensorSpec* q_a, LayerTensor(l, "self_attn.q_a_proj.weight"));
    for (int rank : group) {
      FERRY_RETURN_IF_ERROR(AddFusedConcat(
          out_, rank, a + fused_a,
          {{*q_a, Box::FromShape(q_a->shape)}, {*kv_a, Box::FromShape(kv_a->shape)}}, 0));
    }
    FERRY_RETURN_IF_ERROR(
        Replicated(H(l, "self_attn.q_a_layernorm.weight"), group, a + "q_a_layernorm.weight"));
  } else {
    FERRY_RETURN_IF_ERROR(Replicated(H(l, "self_attn.kv_a_proj_with_mqa.weight"), group,
                                     a + "kv_a_proj_with_mqa.weight"));
  }
  FERRY_RETURN_IF_ERROR(
      Replicated(H(l, "self_attn.kv_a_layernorm.weight"), group, a + "kv_a_layernorm.weight"));
  if (c_.q_lora_rank > 0) {
    FERRY_RETURN_IF_ERROR(Column(H(l, "self_attn.q_b_proj.weight"), group, a + "q_b_proj.weight"));
  } else {
    FERRY_RETURN_IF_ERROR(Column(H(l, "self_attn.q_proj.weight"), group, a + "q_proj.weight"));
  }
  FERRY_RETURN_IF_ERROR(Column(H(l, "self_attn.kv_b_proj.weight"), group, a + "kv_b_proj.weight"));
  return Row(H(l, "self_attn.o_proj.weight"), group, a + "o_proj.weight");
}

// vllm/model_executor/layers/fused_moe/routed_experts.py RoutedExperts and sglang
// srt/layers/moe/fused_moe_triton/layer.py FusedMoE: _load_w13 puts gate_proj (w1) in the first
// half of w13, up_proj (w3) in the second, each narrowed to the rank's FFN shard; _load_w2
// narrows down_proj's input dim.
void EngineWriter::PlaceRankExperts(const std::string& p, const std::vector<ExpertIds>& ids,
                                    const ExpertGeometry& g, const ExpertRun& r) {
  const int rank = r.rank;
  const int64_t shard = r.shard, first = r.first, count = r.count, step = r.step;
  const int b13 = out_.GetOrAddBuffer(rank, p + experts_module_ + "w13_weight");
  const int b2 = out_.GetOrAddBuffer(rank, p + experts_module_ + "w2_weight");
  const auto w13 = RowMajorStrides({count, 2 * g.inter, g.hidden});
  const auto w2 = RowMajorStrides({count, g.hidden, g.inter});
  const int64_t up_offset = g.inter * w13[1] * g.elem;  // after the gate rows
  Box rows = Box::FromShape({c_.num_experts, c_.moe_intermediate, g.hidden});
  rows.lo[0] = first;
  rows.hi[0] = first + count;
  rows.lo[1] = shard * g.inter;
  rows.hi[1] = (shard + 1) * g.inter;
  Box cols = Box::FromShape({c_.num_experts, g.hidden, c_.moe_intermediate});
  cols.lo[0] = first;
  cols.hi[0] = first + count;
  cols.lo[2] = shard * g.inter;
  cols.hi[2] = (shard + 1) * g.inter;
  if (stack_experts_) {
    const auto [gate, up, down] = ids[0];
    const int64_t runs = step == 1 ? 1 : count;  // fragments a projection
    for (int64_t le = 0; le < runs; ++le) {
      rows.lo[0] = cols.lo[0] = first + le * step;
      rows.hi[0] = cols.hi[0] = step == 1 ? first + count : first + le * step + 1;
      const int64_t at13 = (r.local + le) * w13[0] * g.elem;
      const int64_t at2 = (r.local + le) * w2[0] * g.elem;
      out_.fragments.push_back({gate, rows, {rank, b13, at13, w13}});
      out_.fragments.push_back({up, rows, {rank, b13, at13 + up_offset, w13}});
      out_.fragments.push_back({down, cols, {rank, b2, at2, w2}});
    }
  } else {
    const Box member_rows = StackMemberBox(rows);
    const Box member_cols = StackMemberBox(cols);
    const std::array<int64_t, kMaxDims> gate_up{w13[1], w13[2]}, down{w2[1], w2[2]};
    for (int64_t le = 0; le < count; ++le) {
      const auto& [gate, up, dn] = ids[static_cast<size_t>(first + le * step)];
      const int64_t at13 = (r.local + le) * w13[0] * g.elem;
      const int64_t at2 = (r.local + le) * w2[0] * g.elem;
      out_.fragments.push_back({gate, member_rows, {rank, b13, at13, gate_up}});
      out_.fragments.push_back({up, member_rows, {rank, b13, at13 + up_offset, gate_up}});
      out_.fragments.push_back({dn, member_cols, {rank, b2, at2, down}});
    }
  }
  out_.buffers.GrowBytes(static_cast<size_t>(b13), r.slots * w13[0] * g.elem);
  out_.buffers.GrowBytes(static_cast<size_t>(b2), r.slots * w2[0] * g.elem);
  fp8_experts_[b13] = {r.slots, 2 * g.inter, g.hidden};
  fp8_experts_[b2] = {r.slots, g.hidden, g.inter};
}

void EngineWriter::PlacePhysicalExperts(const std::string& p, const std::vector<ExpertIds>& ids,
                                        const ExpertGeometry& g, int rank, int64_t shard,
                                        int64_t start, int64_t count, int64_t slots,
                                        const std::vector<int32_t>* arranged) {
  const int64_t e = c_.num_experts;
  auto logical = [e, arranged](int64_t phys) -> int64_t {
    if (arranged != nullptr) return (*arranged)[static_cast<size_t>(phys)];
    return phys < e ? phys : (phys - e) % e;
  };
  int64_t run = 0;
  while (run < count) {
    int64_t len = 1;
    while (run + len < count && logical(start + run + len) == logical(start + run) + len) ++len;
    PlaceRankExperts(p, ids, g, {rank, shard, logical(start + run), len, 1, run, slots});
    run += len;
  }
}

}  // namespace ferry::models
