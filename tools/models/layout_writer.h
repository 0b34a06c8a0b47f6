// Machinery that the Megatron, vLLM and SGLang layout writers share (internal to tools/models):
// row blocks of a tensor, sections of a layout copied to replica ranks, and LayoutWriter, which
// looks up a preset's tensors and places the pieces the frameworks shard alike (replicated, column-,
// row- and vocab-parallel weights, [gate; up] pairs, the Mamba-2 mixer, expert tensor stacks).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/layout/builders.h"
#include "core/layout/layout.h"
#include "tools/models/presets.h"

namespace ferry::models {

// The rows [lo, hi) of `t` (all of its other dims).
Box Rows(const TensorSpec& t, int64_t lo, int64_t hi);

// Shard `index` of `parts` equal row blocks of rows [offset, offset + extent).
Box RowShard(const TensorSpec& t, int64_t offset, int64_t extent, int64_t parts, int64_t index);

std::string Num(int64_t v);

// The buffers and fragments appended to a layout between two points of construction.
struct Section {
  size_t buffers_begin = 0, buffers_end = 0;
  size_t fragments_begin = 0, fragments_end = 0;
};

// A section that starts at the layout's current end; EndSection closes it there.
Section BeginSection(const Layout& l);
void EndSection(const Layout& l, Section& s);

// Replicas: appends, for each shift, a copy of the section's buffers and fragments on rank + shift.
// Copying is much cheaper than running the builders again for each replica, which matters for
// layouts of a thousand ranks. The section's fragments must lie in the section's own buffers.
Status CloneSection(Layout& l, const Section& s, const std::vector<int>& shifts);

// step, 2*step, ..., (count-1)*step: the rank shifts of replicas 1..count-1.
std::vector<int> Shifts(int count, int step);

// Shared machinery of both frameworks: tensor lookup and the fused pieces common to them.
class LayoutWriter {
 public:
  LayoutWriter(const ModelPreset& preset, bool stack_experts, Layout& out)
      : preset_(preset), c_(preset.config()), out_(out), stack_experts_(stack_experts) {}

 protected:
  // Adds the tensor stacks of layer `l`'s routed experts (gate, up, down: [E, ...member shape],
  // checked against the preset's expert tensors) and returns their indexes.
  Result<std::array<int, 3>> AddExpertStacks(int64_t l);
  // The tensor ids of layer l's gate, up and down: one entry (the stacks, when stack_experts_) or
  // one per expert (the checkpoint's tensors), indexed by global expert.
  Result<std::vector<std::array<int, 3>>> AddExpertTensors(int64_t l);

  Result<const TensorSpec*> Get(const std::string& name) const;
  Result<const TensorSpec*> LayerTensor(int64_t layer, const std::string& suffix) const;

  Status Replicated(const std::string& hf_name, const std::vector<int>& ranks,
                    const std::string& buffer);
  Status Column(const std::string& hf_name, const std::vector<int>& tp_ranks,
                const std::string& buffer);
  Status Row(const std::string& hf_name, const std::vector<int>& tp_ranks,
             const std::string& buffer);
  // Vocab-parallel rows: TP rank i holds rows [i*rows_per_rank, (i+1)*rows_per_rank) of the
  // padded vocabulary (tools/models/vocab_padding.h) in a buffer of rows_per_rank rows; rows past
  // the tensor's vocabulary are padding, in no fragment. rows_per_rank * tp >= the vocabulary.
  Status Vocab(const std::string& hf_name, const std::vector<int>& tp_ranks,
               int64_t rows_per_rank, const std::string& buffer);

  // [gate shard i; up shard i] per rank of `tp_ranks`, at `base_offset` of each rank's buffer.
  Status GateUp(const std::string& gate_name, const std::string& up_name,
                const std::vector<int>& tp_ranks, const std::string& buffer,
                int64_t base_offset = 0);

  // Mamba-2 mixer sharded over TP the way Megatron's and vLLM's MambaMixer do: in_proj per rank is
  // [z_i; x_i; B_i; C_i; dt_i], conv1d per rank [x_i; B_i; C_i]; per-head vectors and the gated
  // norm split over heads / channels; out_proj row-parallel. `name` maps a mixer suffix (e.g.
  // "in_proj.weight") to the framework's buffer name.
  template <typename NameFn>
  Status MambaMixer(int64_t layer, const std::vector<int>& tp_ranks, NameFn name,
                    const std::string& a_log_buffer_suffix) {
    const int64_t tp = static_cast<int64_t>(tp_ranks.size());
    const int64_t di = c_.MambaInner();
    const int64_t gs = c_.mamba_groups * c_.ssm_state_size;
    const int64_t nh = c_.mamba_num_heads;
    FERRY_ASSIGN_OR_RETURN(const TensorSpec* in_proj, LayerTensor(layer, "mixer.in_proj.weight"));
    FERRY_ASSIGN_OR_RETURN(const TensorSpec* conv_w, LayerTensor(layer, "mixer.conv1d.weight"));
    FERRY_ASSIGN_OR_RETURN(const TensorSpec* conv_b, LayerTensor(layer, "mixer.conv1d.bias"));
    for (int64_t i = 0; i < tp; ++i) {
      const int rank = tp_ranks[i];
      FERRY_RETURN_IF_ERROR(AddFusedConcat(out_, rank, name("in_proj.weight"),
                                           {{*in_proj, RowShard(*in_proj, 0, di, tp, i)},
                                            {*in_proj, RowShard(*in_proj, di, di, tp, i)},
                                            {*in_proj, RowShard(*in_proj, 2 * di, gs, tp, i)},
                                            {*in_proj, RowShard(*in_proj, 2 * di + gs, gs, tp, i)},
                                            {*in_proj, RowShard(*in_proj, 2 * di + 2 * gs, nh, tp, i)}},
                                           0));
      for (const TensorSpec* conv : {conv_w, conv_b}) {
        const std::string suffix = conv == conv_w ? "conv1d.weight" : "conv1d.bias";
        FERRY_RETURN_IF_ERROR(AddFusedConcat(out_, rank, name(suffix),
                                             {{*conv, RowShard(*conv, 0, di, tp, i)},
                                              {*conv, RowShard(*conv, di, gs, tp, i)},
                                              {*conv, RowShard(*conv, di + gs, gs, tp, i)}},
                                             0));
      }
    }
    FERRY_RETURN_IF_ERROR(Column(LayerTensorName(c_, layer, "mixer.A_log"), tp_ranks,
                                 name(a_log_buffer_suffix)));
    FERRY_RETURN_IF_ERROR(Column(LayerTensorName(c_, layer, "mixer.D"), tp_ranks, name("D")));
    FERRY_RETURN_IF_ERROR(
        Column(LayerTensorName(c_, layer, "mixer.dt_bias"), tp_ranks, name("dt_bias")));
    FERRY_RETURN_IF_ERROR(
        Column(LayerTensorName(c_, layer, "mixer.norm.weight"), tp_ranks, name("norm.weight")));
    return Row(LayerTensorName(c_, layer, "mixer.out_proj.weight"), tp_ranks,
               name("out_proj.weight"));
  }

  std::string H(int64_t layer, const std::string& suffix) const {
    return LayerTensorName(c_, layer, suffix);
  }
  std::string EmbeddingName() const;
  std::string FinalNormName() const;
  std::string OutputName() const { return c_.tie_embeddings ? EmbeddingName() : "lm_head.weight"; }

  const ModelPreset& preset_;
  const ModelConfig& c_;
  Layout& out_;
  bool stack_experts_;  // routed experts as tensor stacks (FrameworkSpec::stack_expert_tensors)
};

}  // namespace ferry::models
