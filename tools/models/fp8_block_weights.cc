// vLLM's FP8 block-quantized weights (tools/models/fp8_block_weights.h).
#include "tools/models/fp8_block_weights.h"

#include <algorithm>
#include <set>
#include <utility>
#include <vector>

namespace ferry::models {

namespace {

std::string Num(int64_t v) { return std::to_string(v); }

bool EndsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

std::string BlockN(int64_t size, const std::string& what) {
  return what + Num(size) + " is not divisible by weight quantization block_n = " +
         Num(kFp8Block) + ".";
}

std::string Rejects(Fp8Engine engine) {
  return engine == Fp8Engine::kSglang ? "SGLang rejects it: " : "vLLM rejects it: ";
}

// SGLang's DeepSeek loader fuses q_a_proj and kv_a_proj_with_mqa into one ReplicatedLinear by
// concatenating their weights and their block scales (models/deepseek_common/
// deepseek_weight_loader.py): the scales fit the parameter only when every part but the last
// (`parts`: tensor, rows) fills whole blocks.
Status CheckScalesConcatenate(const Layout& l, std::vector<std::pair<int, int64_t>> parts) {
  parts.pop_back();
  for (const auto& [tensor, rows] : parts) {
    if (rows % kFp8Block == 0) continue;
    return InvalidArgument("SGLang cannot load it: its DeepSeek loader concatenates the block "
                           "scales of " + l.tensors[static_cast<size_t>(tensor)].name + " (" +
                           Num(rows) + " rows, not a multiple of " + Num(kFp8Block) +
                           ") and the next tensor, which then do not fit weight_scale_inv");
  }
  return Status::Ok();
}

// The engine's check of one linear buffer's block shape (Fp8Engine), its fragments in byte
// order: a row-parallel partition's input size, and the output partition sizes of a
// column-parallel split or merged weight divide into 128-blocks.
Status CheckLinear(const Layout& l, const std::string& buffer, const std::vector<Fragment>& frags,
                   Fp8Engine engine) {
  bool split_rows = false;
  std::vector<std::pair<int, int64_t>> parts;  // tensor, its rows in the buffer
  for (const Fragment& f : frags) {
    const std::vector<int64_t>& shape = l.tensors[static_cast<size_t>(f.tensor)].shape;
    const int r = f.box.ndim - 2, c = f.box.ndim - 1;
    if (f.box.Extent(c) < shape[static_cast<size_t>(c)] && f.box.Extent(c) % kFp8Block != 0) {
      return InvalidArgument(Rejects(engine) + "Weight input_size_per_partition = " +
                             Num(f.box.Extent(c)) + " is not divisible by weight quantization "
                             "block_k = " + Num(kFp8Block) + ".");
    }
    split_rows = split_rows || f.box.Extent(r) < shape[static_cast<size_t>(r)];
    if (!parts.empty() && parts.back().first == f.tensor) {
      parts.back().second += f.box.Extent(r);
    } else {
      parts.push_back({f.tensor, f.box.Extent(r)});
    }
  }
  if (!split_rows && parts.size() < 2) return Status::Ok();
  if (!split_rows) {
    if (engine == Fp8Engine::kSglang && EndsWith(buffer, "fused_qkv_a_proj_with_mqa.weight")) {
      return CheckScalesConcatenate(l, parts);
    }
    parts.pop_back();
  }
  for (const auto& [tensor, rows] : parts) {
    if (rows % kFp8Block != 0) {
      return InvalidArgument(Rejects(engine) + BlockN(rows, "Weight output_partition_size = "));
    }
  }
  return Status::Ok();
}

// The buffer's matrices: given for expert buffers (where vllm/model_executor/layers/quantization/
// fp8.py Fp8MoEMethod requires the FFN partition in whole blocks), else one row-major matrix
// whose row stride is its fragments' first stride.
Result<MatrixStack> Geometry(const Layout& l, int b, const std::vector<Fragment>& frags,
                             const std::map<int, MatrixStack>& experts, int64_t elem,
                             Fp8Engine engine) {
  auto it = experts.find(b);
  if (it != experts.end()) {
    const MatrixStack& m = it->second;
    if (EndsWith(l.buffers[static_cast<size_t>(b)].name, "w13_weight") &&
        (m.rows / 2) % kFp8Block != 0) {
      return InvalidArgument(Rejects(engine) +
                             BlockN(m.rows / 2, "The output_size of gate's and up's weight = "));
    }
    return m;
  }
  FERRY_RETURN_IF_ERROR(CheckLinear(l, l.buffers[static_cast<size_t>(b)].name, frags, engine));
  const int64_t cols = frags.front().loc.strides[0];
  return MatrixStack{1, l.buffers[static_cast<size_t>(b)].bytes / elem / cols, cols};
}

}  // namespace

bool RequantizedToUe8m0(const MatrixStack& m, bool expert, DType dtype) {
  return expert || (dtype == DType::kBF16 && m.rows % 64 == 0 && m.cols % kFp8Block == 0);
}

bool IsFp8BlockQuantized(const std::string& name) {
  // vllm/model_executor/models/deepseek_mtp.py: an MTP layer's eh_proj is a plain nn.Linear,
  // built without the quant_config, so it stays in the model's dtype
  if (EndsWith(name, ".eh_proj.weight")) return false;
  return name.find(".layers.") != std::string::npos &&
         (EndsWith(name, "_proj.weight") || EndsWith(name, "_proj_with_mqa.weight"));
}

Status StoreFp8BlockWeights(Layout& l, size_t buffers_begin,
                            const std::map<int, MatrixStack>& experts, Fp8ScaleFormat scale_fmt,
                            Fp8Engine engine) {
  std::map<int, std::vector<Fragment>> quantized;  // buffer -> its fragments
  std::set<int> other;                             // buffers holding anything else
  for (const Fragment& f : l.fragments) {
    if (static_cast<size_t>(f.loc.buffer) < buffers_begin) continue;
    if (IsFp8BlockQuantized(l.tensors[static_cast<size_t>(f.tensor)].name)) {
      quantized[f.loc.buffer].push_back(f);
    } else {
      other.insert(f.loc.buffer);
    }
  }
  std::set<int> tensors;
  for (auto& [b, frags] : quantized) {
    const std::string name = l.buffers[static_cast<size_t>(b)].name;  // buffers grow below
    if (other.count(b) > 0) return Internal("buffer '" + name + "' mixes fp8 and other weights");
    std::sort(frags.begin(), frags.end(), [](const Fragment& x, const Fragment& y) {
      return x.loc.byte_offset < y.loc.byte_offset;
    });
    const int64_t elem = DTypeSize(l.tensors[static_cast<size_t>(frags.front().tensor)].dtype);
    Result<MatrixStack> m = Geometry(l, b, frags, experts, elem, engine);
    if (!m.ok()) return m.status().WithContext("fp8 block weights of '" + name + "'");
    const int rank = l.buffers[static_cast<size_t>(b)].rank;
    l.buffers.SetBytes(static_cast<size_t>(b), l.buffers[static_cast<size_t>(b)].bytes / elem);
    const DType dtype = l.tensors[static_cast<size_t>(frags.front().tensor)].dtype;  // still unquantized
    const Fp8ScaleFormat fmt = RequantizedToUe8m0(*m, experts.count(b) > 0, dtype)
                                   ? scale_fmt : Fp8ScaleFormat::kFloat32;
    const int scales = l.GetOrAddBuffer(rank, name + "_scale_inv");
    l.buffers.SetBytes(static_cast<size_t>(scales), m->matrices * Fp8ScaleMatrixBytes(fmt, m->rows, m->cols));
    l.block_scaled.push_back({b, scales, m->matrices, m->rows, m->cols, fmt});
    for (const Fragment& f : frags) tensors.insert(f.tensor);
  }
  for (size_t i = 0; i < l.fragments.size(); ++i) {
    const Fragment f = l.fragments[i];
    if (static_cast<size_t>(f.loc.buffer) < buffers_begin || tensors.count(f.tensor) == 0) continue;
    l.fragments.Edit(i, [&](Fragment& g) {
      g.loc.byte_offset /= DTypeSize(l.tensors[static_cast<size_t>(g.tensor)].dtype);
    });
  }
  for (int t : tensors) {
    l.tensors[static_cast<size_t>(t)].dtype = DType::kFP8E4M3;
    l.transforms.push_back({t, std::string(kFp8BlockTransform), DType::kFP8E4M3});
  }
  return Status::Ok();
}

}  // namespace ferry::models
