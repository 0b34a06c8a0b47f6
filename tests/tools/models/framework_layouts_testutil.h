// Helpers for the framework layout tests (tests/tools/models/*_layout*_test.cc): presets and specs
// that must parse, layouts built and validated, fragments looked up by buffer and tensor, and an
// exact element-coverage check of a whole layout.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "tools/models/framework_layouts.h"

namespace ferry::models {

ModelPreset Preset(const std::string& name, double scale);

// A one-layer model for hand-worked cases: `heads` attention heads and `kv_heads` KV heads of
// `head_dim` over `hidden`, a vocabulary of `vocab`; the caller sets its MLP or experts.
ModelConfig OneLayerConfig(const std::string& name, ModelFamily family, int64_t hidden,
                           int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t vocab);

// Two decoder layers of a tiny DeepSeek-V3 (hidden 8, MLA with 2 heads, q/kv LoRA ranks 4,
// nope/rope/v head dims 2, FFN 16, vocabulary 64) with one next-n layer in its checkpoint; with
// `moe`, a dense first layer, then 4 routed experts of FFN 4, a shared expert and a router bias.
ModelConfig TinyDeepseek(bool moe);
// DeepSeek-V3's shapes at widths whose TP2 partitions fill whole 128x128 blocks, for the FP8
// block-quantized layouts: hidden 256, 4 MLA heads with nope, rope and v head dims 64, LoRA ranks
// `q_lora_rank` and 128, a dense first layer of FFN 512, then `experts` routed experts of FFN 256
// with one shared expert and the router bias; one MTP layer in the checkpoint, vocabulary 64.
ModelConfig BlockAlignedDeepseek(int64_t experts, int64_t q_lora_rank = 128);
// The preset of a config that must be valid.
ModelPreset PresetOf(const ModelConfig& c);

FrameworkSpec Spec(const std::string& text);

// Builds the layout as `spec` says and checks it passes core/layout's ValidateLayout (bounds,
// buffers, memory overlap, full coverage).
Layout BuildAsSpecified(const ModelPreset& p, const std::string& spec, int first_rank = 0);

// The layout with its expert stacks (the default) expanded into the checkpoint's expert tensors,
// which the hand-checked tests name; valid as well.
Layout Build(const ModelPreset& p, const std::string& spec, int first_rank = 0);

// Fragments of `hf_name` placed in buffer `buffer` on `rank`, in placement order.
std::vector<Fragment> FragmentsIn(const Layout& l, int rank, const std::string& buffer,
                                  const std::string& hf_name);

// Asserts every element of every tensor is covered exactly expected(name) times, that dense
// fragments of one buffer do not overlap in memory and fit in it, and that the layout holds every
// model tensor.
void ExpectCoverage(const Layout& l, const ModelPreset& p,
                    const std::function<int(const std::string&)>& expected);

bool IsExpert(const std::string& name);

// Whether `st`'s message contains `part`.
bool Says(const Status& st, const std::string& part);

// The bytes of `rank`'s buffer `buffer`, -1 when it has none.
int64_t BytesOf(const Layout& l, int rank, const std::string& buffer);

// The dtype of tensor `tensor`, which `l` must hold.
DType DTypeOf(const Layout& l, const std::string& tensor);

// The logical expert of each local slot of `rank`'s w13 buffer `buffer` (gate stack fragments
// `gate_stack` in slot order, `slot_bytes` an expert), from a layout with expert stacks; -1 for a
// slot no fragment fills.
std::vector<int64_t> SlotsOf(const Layout& l, int rank, const std::string& buffer,
                             const std::string& gate_stack, int64_t slot_bytes);

// A file under the test's temporary directory (TEST_TMPDIR, else /tmp) holding `text`; returns
// its path.
std::string WriteTemp(const std::string& name, const std::string& text);

// Whether `rank` has a buffer named `buffer`.
bool Holds(const Layout& l, int rank, const std::string& buffer);

// Decoder layer `layer`'s fused qkv_proj buffer, as vLLM and SGLang name it.
std::string Qkv(int layer);

// Weights every TP rank holds whole: norms (not Mamba's gated norm, which is TP-sharded), routers,
// MLA's down projections.
bool TpReplicated(const std::string& name);

// Expected copies of each element: experts once per expert-DP replica, TP-replicated weights on
// every rank of each DP replica, everything else once per DP replica.
std::function<int(const std::string&)> Copies(int dp, int tp, int expert_copies);

}  // namespace ferry::models
