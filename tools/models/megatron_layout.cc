// The Megatron-LM layout of a model preset (tools/models/megatron_layout.h): MegatronWriter builds
// one replica with core/layout's builders and copies it to the DP/CP and expert-DP replicas.
#include "tools/models/megatron_layout.h"

#include <algorithm>
#include <array>
#include <numeric>
#include <string>
#include <vector>

#include "core/layout/builders.h"
#include "tools/models/layout_writer.h"
#include "tools/models/megatron_expert_storage.h"
#include "tools/models/megatron_param_buffers.h"
#include "tools/models/pipeline_stages.h"
#include "tools/models/vocab_padding.h"

namespace ferry::models {

namespace {

class MegatronWriter : public LayoutWriter {
 public:
  MegatronWriter(const ModelPreset& preset, const MegatronParallel& m, bool stack_experts,
                 int first_rank, Layout& out)
      : LayoutWriter(preset, stack_experts, out), m_(m), first_(first_rank) {
    stage_size_ = m.tp * m.cp * m.dp;
    edp_ = stage_size_ / (m.ep * m.etp);
  }

  // Builds DP/CP replica 0 of the dense weights and expert-DP replica 0 of the experts with the
  // builders, then copies them to the other replicas.
  Status Build() {
    FERRY_ASSIGN_OR_RETURN(const MegatronPipeline pipeline, MegatronPipelineFor(c_, m_));
    std::vector<int> stage_of(c_.num_layers);
    std::vector<std::string> prefix(c_.num_layers);
    for (int64_t l = 0; l < c_.num_layers; ++l) {
      const LayerPlace& at = pipeline.layers[static_cast<size_t>(l)];
      stage_of[l] = at.pp_rank;
      // megatron/core/transformer/transformer_block.py (megatron/core/models/hybrid/
      // hybrid_block.py for hybrid models): a model chunk's self.layers count from 0
      prefix[l] = Chunk(pipeline.vpp, at.vstage) + "decoder.layers." + Num(at.local) + ".";
    }
    Section dense = BeginSection(out_);
    FERRY_RETURN_IF_ERROR(DenseParts(pipeline, stage_of, prefix));
    EndSection(out_, dense);
    ReserveReplicas(dense);
    Section experts = BeginSection(out_);
    FERRY_RETURN_IF_ERROR(AllExperts(pipeline, stage_of, prefix));
    EndSection(out_, experts);
    FERRY_RETURN_IF_ERROR(CloneSection(out_, dense, Shifts(m_.cp * m_.dp, m_.tp)));
    FERRY_RETURN_IF_ERROR(CloneSection(out_, experts, Shifts(edp_, m_.etp * m_.ep)));
    return m_.distopt_buffers ? InDistributedOptimizerBuffers() : Status::Ok();
  }

 private:
  // DP replica 0 of everything but the routed experts: the decoder layers, the embedding, the
  // final norm, the output layer and the MTP block.
  Status DenseParts(const MegatronPipeline& pipeline, const std::vector<int>& stage_of,
                    const std::vector<std::string>& prefix) {
    for (int64_t l = 0; l < c_.num_layers; ++l) {
      Status st = Layer(l, stage_of[l], prefix[l]);
      if (!st.ok()) {
        return st.WithContext("megatron layer " + Num(l) + " (stage " + Num(stage_of[l]) + ")");
      }
    }
    const std::string first_chunk = Chunk(pipeline.vpp, 0);
    const std::string last_chunk = Chunk(pipeline.vpp, pipeline.vpp - 1);
    const int last = m_.pp - 1;
    FERRY_ASSIGN_OR_RETURN(const int64_t padded, MegatronPaddedVocab(c_.vocab, m_.tp,
                                                                     m_.vocab_divisible_by,
                                                                     m_.pad_vocab));
    // megatron/training/training.py get_model: the embedding is in chunk 0 of the first rank
    // (pre_process), the final norm and output layer in the last chunk of the last (post_process)
    // megatron/core/tensor_parallel/layers.py VocabParallelEmbedding: padded / tp rows a TP rank
    FERRY_RETURN_IF_ERROR(Vocab(EmbeddingName(), TpGroup(0), padded / m_.tp,
                                first_chunk + "embedding.word_embeddings.weight"));
    FERRY_RETURN_IF_ERROR(Replicated(FinalNormName(), TpGroup(last),
                                     last_chunk + (c_.family == ModelFamily::kNemotronH
                                                       ? "decoder.final_norm.weight"
                                                       : "decoder.final_layernorm.weight")));
    // megatron/core/models/gpt/gpt_model.py: with tied embeddings the output layer allocates no
    // weight on a stage that also holds the embedding (pp=1); a later last stage keeps its own copy
    if (!c_.tie_embeddings || m_.pp > 1) {
      // megatron/core/tensor_parallel/layers.py ColumnParallelLinear over the padded vocabulary
      FERRY_RETURN_IF_ERROR(
          Vocab(OutputName(), TpGroup(last), padded / m_.tp, last_chunk + "output_layer.weight"));
    }
    return MtpBlock(pipeline, padded);
  }

  // Room for the dense section's cp*dp replicas and for every expert fragment and buffer.
  void ReserveReplicas(const Section& dense) {
    int64_t moe_layers = 0;
    for (int64_t l = 0; l < c_.num_layers + m_.MtpLayersBuilt(); ++l) moe_layers += c_.IsMoeLayer(l) ? 1 : 0;
    // Each expert: gate and up shards plus a down shard on each of its etp ranks (as stacks in a
    // shared buffer: each EP rank's local experts together), in two buffers per expert or per EP
    // rank.
    const bool shared = m_.experts == MegatronExpertStorage::kSingleGrouped ||
                        m_.experts == MegatronExpertStorage::kLegacyGrouped;
    const int64_t expert_fragments = moe_layers * c_.num_experts * 3 * m_.etp /
                                     (stack_experts_ && shared ? c_.num_experts / m_.ep : 1);
    const int64_t expert_buffers = moe_layers * (shared ? m_.ep : c_.num_experts) * 2 * m_.etp;
    const size_t replicas = static_cast<size_t>(m_.cp * m_.dp);
    out_.fragments.reserve((dense.fragments_end - dense.fragments_begin) * replicas +
                           static_cast<size_t>(expert_fragments * edp_));
    out_.buffers.reserve((dense.buffers_end - dense.buffers_begin) * replicas +
                         static_cast<size_t>(expert_buffers * edp_));
  }

  // Expert-DP replica 0 of the routed experts of every MoE layer and MTP layer.
  Status AllExperts(const MegatronPipeline& pipeline, const std::vector<int>& stage_of,
                    const std::vector<std::string>& prefix) {
    for (int64_t l = 0; l < c_.num_layers; ++l) {
      if (!c_.IsMoeLayer(l)) continue;
      Status st = Experts(l, stage_of[l], prefix[l]);
      if (!st.ok()) return st.WithContext("megatron experts of layer " + Num(l));
    }
    for (int64_t i = 0; i < m_.MtpLayersBuilt(); ++i) {
      if (!c_.IsMoeLayer(c_.num_layers + i)) continue;
      Status st = Experts(c_.num_layers + i, pipeline.mtp.pp_rank,
                          MtpPrefix(pipeline, i) + "mtp_model_layer.");
      if (!st.ok()) return st.WithContext("megatron experts of MTP layer " + Num(i));
    }
    return Status::Ok();
  }

  // buffers=distopt: the parameters moved into the distributed optimizer's DDP buffers.
  Status InDistributedOptimizerBuffers() {
    MegatronBufferGroups groups;
    groups.first_rank = first_;
    groups.num_ranks = stage_size_ * m_.pp;
    groups.stage_size = stage_size_;
    groups.dp_cp = m_.dp * m_.cp;
    groups.expert_dp = edp_;
    // megatron/core/extensions/transformer_engine.py: expert parameters use the expert
    // data-parallel group (allreduce=False) when ep > 1 or etp != tp
    groups.experts_separate = m_.ep > 1 || m_.etp != m_.tp;
    // megatron/core/models/common/language_module/language_module.py: shared_embedding
    groups.shared_embedding = (c_.tie_embeddings || m_.mtp > 0) && m_.pp > 1;
    groups.shared_output_layer = c_.tie_embeddings && m_.pp > 1;
    groups.overlap_grad_reduce = m_.overlap_grad_reduce;
    // megatron/core/ssm/mamba_mixer.py before core_v0.19.0: conv1d a child module after in_proj
    groups.mamba_conv1d_module = m_.mcore_minor < 19;
    FERRY_ASSIGN_OR_RETURN(out_, PackMegatronParamBuffers(out_, groups));
    return Status::Ok();
  }

  // The name prefix of model chunk v's parameters: with interleaving a rank holds vpp models,
  // checkpointed as "model<v>" (megatron/training/checkpointing.py); none without.
  static std::string Chunk(int vpp, int v) { return vpp > 1 ? "model" + Num(v) + "." : ""; }

  // "[model<v>.]mtp.layers.<i>.": MTP layer i in the model chunk that holds the MTP block.
  static std::string MtpPrefix(const MegatronPipeline& pipeline, int64_t i) {
    return Chunk(pipeline.vpp, pipeline.mtp.vstage) + "mtp.layers." + Num(i) + ".";
  }

  // The MTP block (replica 0, routed experts aside), on the stage the pipeline gives it.
  // megatron/core/transformer/multi_token_prediction.py MultiTokenPredictionLayer: enorm and hnorm
  // (norms, whole on every TP rank), eh_proj a ColumnParallelLinear(2h -> h, gather_output=False):
  // TP rank i holds output rows [i*h/tp, (i+1)*h/tp) of [h, 2h] (Megatron-Bridge maps it 1:1 to the
  // checkpoint's model.layers.<L>.eh_proj.weight, both applied to [enorm(embedding); hnorm(hidden)]),
  // then the decoder layer as mtp_model_layer and final_layernorm (the checkpoint's
  // shared_head.norm: src/megatron/bridge/models/deepseek/common.py).
  Status MtpBlock(const MegatronPipeline& pipeline, int64_t padded) {
    if (m_.mtp == 0) return Status::Ok();
    const int s = pipeline.mtp.pp_rank;
    const std::vector<int> g = TpGroup(s);
    for (int64_t i = 0; i < m_.MtpLayersBuilt(); ++i) {
      const std::string q = MtpPrefix(pipeline, i);
      FERRY_RETURN_IF_ERROR(Replicated(MtpTensorName(c_, i, "enorm.weight"), g, q + "enorm.weight"));
      FERRY_RETURN_IF_ERROR(Replicated(MtpTensorName(c_, i, "hnorm.weight"), g, q + "hnorm.weight"));
      FERRY_RETURN_IF_ERROR(Column(MtpTensorName(c_, i, "eh_proj.weight"), g, q + "eh_proj.weight"));
      Status st = Layer(c_.num_layers + i, s, q + "mtp_model_layer.");
      if (!st.ok()) return st.WithContext("megatron MTP layer " + Num(i) + " (stage " + Num(s) + ")");
      FERRY_RETURN_IF_ERROR(Replicated(MtpTensorName(c_, i, "shared_head.norm.weight"), g,
                                       q + "final_layernorm.weight"));
    }
    // megatron/core/models/gpt/gpt_model.py: a stage with the MTP block builds the embedding
    // (pre_process or mtp_process); off the first chunk of the first stage it is a copy of the
    // first stage's, kept equal (language_module.py setup_embeddings_and_output_layer)
    if (s == 0 && pipeline.mtp.vstage == 0) return Status::Ok();
    return Vocab(EmbeddingName(), g, padded / m_.tp,
                 Chunk(pipeline.vpp, pipeline.mtp.vstage) + "embedding.word_embeddings.weight");
  }

  // The TP group of DP/CP replica 0 of stage s; weights replicated over TP live on all of it.
  std::vector<int> TpGroup(int s) const {
    std::vector<int> r(m_.tp);
    std::iota(r.begin(), r.end(), first_ + stage_size_ * s);
    return r;
  }

  Status Layer(int64_t l, int s, const std::string& p) {
    switch (c_.KindOfLayer(l)) {
      case LayerKind::kDecoder: {
        if (c_.IsMla()) {
          FERRY_RETURN_IF_ERROR(Replicated(H(l, "input_layernorm.weight"), TpGroup(s),
                                           p + "input_layernorm.weight"));
          FERRY_RETURN_IF_ERROR(MlaAttention(l, s, p));
        } else {
          FERRY_RETURN_IF_ERROR(GqaAttention(l, s, p, "self_attn.", "input_layernorm.weight"));
        }
        if (c_.IsMoeLayer(l)) return Moe(l, s, p);
        return DenseMlp(l, s, p, "post_attention_layernorm.weight", "mlp.");
      }
      case LayerKind::kAttention: return GqaAttention(l, s, p, "mixer.", "norm.weight");
      case LayerKind::kMlp: return DenseMlp(l, s, p, "norm.weight", "mixer.");
      case LayerKind::kMamba: {
        FERRY_RETURN_IF_ERROR(
            Replicated(H(l, "norm.weight"), TpGroup(s), p + "mixer.in_proj.layer_norm_weight"));
        // megatron/core/ssm/mamba_mixer.py: in_proj [z; x; B; C; dt] per TP rank, A_log as is
        return MambaMixer(l, TpGroup(s), [&](const std::string& x) { return p + "mixer." + x; },
                          "A_log");
      }
    }
    return Internal("unknown layer kind");
  }

  Status GqaAttention(int64_t l, int s, const std::string& p, const std::string& module,
                      const std::string& norm) {
    const std::string qkv = p + "self_attention.linear_qkv.";
    FERRY_RETURN_IF_ERROR(Replicated(H(l, norm), TpGroup(s), qkv + "layer_norm_weight"));
    FERRY_ASSIGN_OR_RETURN(const TensorSpec* q, LayerTensor(l, module + "q_proj.weight"));
    FERRY_ASSIGN_OR_RETURN(const TensorSpec* k, LayerTensor(l, module + "k_proj.weight"));
    FERRY_ASSIGN_OR_RETURN(const TensorSpec* v, LayerTensor(l, module + "v_proj.weight"));
    // megatron/core/transformer/attention.py SelfAttention: linear_qkv per query group [q; k; v]
    FERRY_RETURN_IF_ERROR(AddMegatronQkvInterleaved(out_, *q, *k, *v, static_cast<int>(c_.num_heads),
                                                    static_cast<int>(c_.num_kv_heads), c_.head_dim,
                                                    TpGroup(s), qkv + "weight"));
    if (c_.qkv_bias) FERRY_RETURN_IF_ERROR(QkvBias(l, module, TpGroup(s), qkv + "bias"));
    if (c_.qk_norm) {
      FERRY_RETURN_IF_ERROR(Replicated(H(l, module + "q_norm.weight"), TpGroup(s),
                                       p + "self_attention.q_layernorm.weight"));
      FERRY_RETURN_IF_ERROR(Replicated(H(l, module + "k_norm.weight"), TpGroup(s),
                                       p + "self_attention.k_layernorm.weight"));
    }
    return Row(H(l, module + "o_proj.weight"), TpGroup(s), p + "self_attention.linear_proj.weight");
  }

  // Qwen2's q/k/v biases in linear_qkv.bias (add_qkv_bias: SelfAttention builds linear_qkv with
  // bias=add_bias_linear or add_qkv_bias, megatron/core/transformer/attention.py), interleaved per
  // query group exactly like the weight's rows, since get_query_key_value_tensors views the fused
  // output, bias added, as [groups, (heads/groups + 2) * head_dim]; Megatron-Bridge builds it so
  // (src/megatron/bridge/models/qwen/qwen2_bridge.py QKVMapping of linear_qkv.bias,
  // src/megatron/bridge/models/conversion/param_mapping.py merge_qkv_biases) and splits it over TP
  // along dim 0 as the column-parallel weight.
  Status QkvBias(int64_t l, const std::string& module, const std::vector<int>& tp_ranks,
                 const std::string& buffer) {
    FERRY_ASSIGN_OR_RETURN(const TensorSpec* q, LayerTensor(l, module + "q_proj.bias"));
    FERRY_ASSIGN_OR_RETURN(const TensorSpec* k, LayerTensor(l, module + "k_proj.bias"));
    FERRY_ASSIGN_OR_RETURN(const TensorSpec* v, LayerTensor(l, module + "v_proj.bias"));
    return AddMegatronQkvInterleaved(out_, *q, *k, *v, static_cast<int>(c_.num_heads),
                                     static_cast<int>(c_.num_kv_heads), c_.head_dim, tp_ranks,
                                     buffer);
  }

  // megatron/core/transformer/multi_latent_attention.py: down projections duplicated over TP,
  // their norms fused into the up projections (layer_norm_weight), up projections split by head
  Status MlaAttention(int64_t l, int s, const std::string& p) {
    const std::string a = p + "self_attention.";
    const std::vector<int> all = TpGroup(s);
    const std::vector<int>& g = all;
    if (c_.q_lora_rank > 0) {
      FERRY_RETURN_IF_ERROR(
          Replicated(H(l, "self_attn.q_a_proj.weight"), all, a + "linear_q_down_proj.weight"));
      FERRY_RETURN_IF_ERROR(Replicated(H(l, "self_attn.q_a_layernorm.weight"), all,
                                       a + "linear_q_up_proj.layer_norm_weight"));
    }
    FERRY_RETURN_IF_ERROR(Replicated(H(l, "self_attn.kv_a_proj_with_mqa.weight"), all,
                                     a + "linear_kv_down_proj.weight"));
    FERRY_RETURN_IF_ERROR(Replicated(H(l, "self_attn.kv_a_layernorm.weight"), all,
                                     a + "linear_kv_up_proj.layer_norm_weight"));
    if (c_.q_lora_rank > 0) {
      FERRY_RETURN_IF_ERROR(
          Column(H(l, "self_attn.q_b_proj.weight"), g, a + "linear_q_up_proj.weight"));
    } else {
      FERRY_RETURN_IF_ERROR(Column(H(l, "self_attn.q_proj.weight"), g, a + "linear_q_proj.weight"));
    }
    FERRY_RETURN_IF_ERROR(
        Column(H(l, "self_attn.kv_b_proj.weight"), g, a + "linear_kv_up_proj.weight"));
    return Row(H(l, "self_attn.o_proj.weight"), g, a + "linear_proj.weight");
  }

  // Dense MLP: linear_fc1 = [gate; up] per TP shard (SwiGLU) or up alone (Nemotron-H's relu^2).
  Status DenseMlp(int64_t l, int s, const std::string& p, const std::string& norm,
                  const std::string& module) {
    FERRY_RETURN_IF_ERROR(Replicated(H(l, norm), TpGroup(s), p + "mlp.linear_fc1.layer_norm_weight"));
    const std::vector<int> g = TpGroup(s);
    if (c_.family != ModelFamily::kNemotronH) {
      // src/megatron/bridge/models/conversion/param_mapping.py GatedMLPMapping: [gate_i; up_i]
      FERRY_RETURN_IF_ERROR(GateUp(H(l, module + "gate_proj.weight"), H(l, module + "up_proj.weight"),
                                   g, p + "mlp.linear_fc1.weight"));
    } else {
      FERRY_RETURN_IF_ERROR(Column(H(l, module + "up_proj.weight"), g, p + "mlp.linear_fc1.weight"));
    }
    return Row(H(l, module + "down_proj.weight"), g, p + "mlp.linear_fc2.weight");
  }

  // The MoE layer's router, norm and shared expert (replica 0; experts come from Experts()).
  Status Moe(int64_t l, int s, const std::string& p) {
    const std::vector<int> g = TpGroup(s);
    FERRY_RETURN_IF_ERROR(
        Replicated(H(l, "post_attention_layernorm.weight"), g, p + "pre_mlp_layernorm.weight"));
    // megatron/core/transformer/moe/router.py TopKRouter: weight [E, hidden] and the fp32
    // expert_bias buffer, whole on every rank
    FERRY_RETURN_IF_ERROR(Replicated(H(l, "mlp.gate.weight"), g, p + "mlp.router.weight"));
    if (c_.router_bias) {
      FERRY_RETURN_IF_ERROR(Replicated(H(l, "mlp.gate.e_score_correction_bias"), g,
                                       p + "mlp.router.expert_bias"));
    }
    if (c_.num_shared_experts == 0) return Status::Ok();
    // megatron/core/transformer/moe/shared_experts.py SharedExpertMLP: a TP-split MLP
    FERRY_RETURN_IF_ERROR(GateUp(H(l, "mlp.shared_experts.gate_proj.weight"),
                                 H(l, "mlp.shared_experts.up_proj.weight"), g,
                                 p + "mlp.shared_experts.linear_fc1.weight"));
    return Row(H(l, "mlp.shared_experts.down_proj.weight"), g,
               p + "mlp.shared_experts.linear_fc2.weight");
  }

  // Expert-DP replica 0 of the routed experts: EP rank r owns experts [r*E/ep, (r+1)*E/ep), each
  // split over its ETP group (etp fastest within the stage), kept as m_.experts says.
  Status Experts(int64_t l, int s, const std::string& p) {
    FERRY_ASSIGN_OR_RETURN(const auto ids, AddExpertTensors(l));
    // megatron/core/transformer/moe/moe_layer.py: local_expert_indices_offset = ep_rank * E/ep
    const int64_t per_rank = c_.num_experts / m_.ep;
    ExpertShard shard;
    shard.count = per_rank;
    shard.inter = c_.moe_intermediate / m_.etp;
    shard.hidden = c_.hidden;
    shard.elem = DTypeSize(c_.dtype);
    for (int ep = 0; ep < m_.ep; ++ep) {
      for (int i = 0; i < m_.etp; ++i) {
        shard.rank = first_ + stage_size_ * s + m_.etp * ep + i;
        shard.first = ep * per_rank;
        shard.shard = i;
        PlaceMegatronExperts(out_, m_.experts, p + "mlp.experts.", ids, shard);
      }
    }
    return Status::Ok();
  }

  MegatronParallel m_;
  int first_;
  int stage_size_ = 0;
  int edp_ = 0;
};

}  // namespace

Status BuildMegatronLayout(const ModelPreset& preset, const MegatronParallel& resolved,
                           bool stack_expert_tensors, int first_rank, Layout& out) {
  return MegatronWriter(preset, resolved, stack_expert_tensors, first_rank, out).Build();
}

}  // namespace ferry::models
