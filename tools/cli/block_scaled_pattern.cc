// The refit test pattern of block-scaled fp8 destinations (tools/cli/block_scaled_pattern.h).
#include "tools/cli/block_scaled_pattern.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "core/base/fp8_block.h"
#include "tools/cli/fragment_rows.h"
#include "tools/cli/parallel_for.h"
#include "tools/cli/pattern_word.h"

namespace ferry::cli {
namespace {

std::string Hex(const unsigned char* bytes, int n) {
  static const char* digits = "0123456789abcdef";
  std::string out = "0x";
  for (int i = n - 1; i >= 0; --i) {
    out += digits[bytes[i] >> 4];
    out += digits[bytes[i] & 15];
  }
  return out;
}

// The source's values of block-scaled buffer `s` in its matrices, in `dtype` (the source
// tensors'): the pattern of each element at the place its fragment gives it.
std::vector<unsigned char> SourceImage(const Layout& layout, const BlockScaledBuffer& s,
                                       const std::vector<Fragment>& frags, DType dtype) {
  const int64_t elem = DTypeSize(dtype);
  std::vector<unsigned char> image(static_cast<size_t>(s.matrices * s.rows * s.cols * elem));
  for (const Fragment& f : frags) {
    const TensorSpec& t = layout.tensors[static_cast<size_t>(f.tensor)];
    const uint64_t seed = PatternSeed(t.name);
    // fp8 fragments: byte offsets and strides are element positions in the buffer.
    ForEachRow(layout, f, DTypeSize(t.dtype), [&](int64_t global, int64_t offset, int64_t count, int64_t stride) {
      for (int64_t i = 0; i < count; ++i) {
        const uint64_t word = FinitePatternWord(seed, global + i, dtype);
        std::memcpy(image.data() + (offset + i * stride) * elem, &word, static_cast<size_t>(elem));
      }
    });
  }
  return image;
}

// Compares `n` items of `size` bytes; Internal naming the first that differs through `where`.
template <typename WhereFn>
Status CompareItems(const unsigned char* want, const unsigned char* got, int64_t n, int size,
                    const std::string& what, WhereFn&& where) {
  int64_t first = -1, differ = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (std::memcmp(want + i * size, got + i * size, static_cast<size_t>(size)) == 0) continue;
    if (differ++ == 0) first = i;
  }
  if (differ == 0) return Status::Ok();
  return Internal(what + " " + where(first) + ": expected " + Hex(want + first * size, size) + ", got " +
                  Hex(got + first * size, size) + " (" + std::to_string(differ) + " of " +
                  std::to_string(n) + " differ)");
}

// Word `w` of the scales of `s`: a block of fp32 scales, or a packed word's matrix, weight row
// and block columns (core/base/fp8_packed_scales.h).
std::string ScaleWordName(const BlockScaledBuffer& s, int64_t w) {
  if (s.scale_fmt != Fp8ScaleFormat::kUe8m0Packed) return "block " + std::to_string(w);
  const int64_t stride = Fp8PackedScaleRowStride(s.rows);
  const int64_t per_matrix = Fp8PackedScaleMatrixBytes(s.rows, s.cols) / 4;
  const int64_t p = w % per_matrix / stride;
  return "matrix " + std::to_string(w / per_matrix) + " row " + std::to_string(w % stride) +
         " packed word of block columns " + std::to_string(4 * p) + ".." + std::to_string(4 * p + 3);
}

// Checks one block-scaled buffer `s` of `rank` (its fragments `frags`) against the source's
// pattern quantized by the CPU reference; returns the bytes checked.
Result<int64_t> VerifyOneBlockScaled(const Layout& layout, int rank, const std::vector<char*>& buffers,
                                     const Layout& source, const BlockScaledBuffer& s,
                                     const std::vector<Fragment>& frags) {
  const std::string& name = layout.buffers[static_cast<size_t>(s.buffer)].name;
  const int t = source.FindTensor(layout.tensors[static_cast<size_t>(frags.front().tensor)].name);
  if (t < 0) return InvalidArgument("verify: the source has no tensor of block-scaled buffer '" + name + "'");
  const DType dtype = source.tensors[static_cast<size_t>(t)].dtype;
  const std::vector<unsigned char> image = SourceImage(layout, s, frags, dtype);
  const int64_t n = s.matrices * s.rows * s.cols;
  const int64_t scale_words = s.matrices * Fp8ScaleMatrixBytes(s.scale_fmt, s.rows, s.cols) / 4;
  std::vector<unsigned char> want(static_cast<size_t>(n));
  std::vector<unsigned char> want_scales(static_cast<size_t>(scale_words * 4));
  Fp8BlockQuantizeMatrices(dtype, image.data(), s.matrices, s.rows, s.cols, want.data(), want_scales.data(),
                           s.scale_fmt);
  const std::string what = "verify: rank " + std::to_string(rank) + " buffer '" + name + "'";
  FERRY_RETURN_IF_ERROR(CompareItems(
      want.data(), reinterpret_cast<const unsigned char*>(buffers[static_cast<size_t>(s.buffer)]), n, 1, what,
      [&](int64_t e) {
        return "matrix " + std::to_string(e / (s.rows * s.cols)) + " element [" +
               std::to_string(e % (s.rows * s.cols) / s.cols) + ", " + std::to_string(e % s.cols) + "]";
      }));
  FERRY_RETURN_IF_ERROR(CompareItems(
      want_scales.data(), reinterpret_cast<const unsigned char*>(buffers[static_cast<size_t>(s.scales)]),
      scale_words, 4, what + " scale_inv", [&](int64_t w) { return ScaleWordName(s, w); }));
  return n + scale_words * 4;
}

}  // namespace

std::unordered_set<std::string> BlockScaledTensors(const Layout& destination) {
  const std::vector<char> quantized = BlockScaledTensorMask(destination);
  std::unordered_set<std::string> names;
  for (size_t t = 0; t < quantized.size(); ++t) {
    if (quantized[t]) names.insert(destination.tensors[t].name);
  }
  return names;
}

Result<int64_t> VerifyBlockScaled(const Layout& layout, int rank, const std::vector<char*>& buffers,
                                  const Layout& source) {
  std::map<int, std::vector<Fragment>> frags;  // block-scaled buffer of `rank` -> its fragments
  for (const BlockScaledBuffer& s : layout.block_scaled) {
    if (layout.buffers[static_cast<size_t>(s.buffer)].rank == rank) frags[s.buffer];
  }
  for (const Fragment& f : layout.fragments) {
    auto it = frags.find(f.loc.buffer);
    if (it != frags.end()) it->second.push_back(f);
  }
  std::vector<const BlockScaledBuffer*> work;
  for (const BlockScaledBuffer& s : layout.block_scaled) {
    auto it = frags.find(s.buffer);
    if (it != frags.end() && !it->second.empty()) work.push_back(&s);
  }
  // The buffers are independent: checked on up to 8 threads (a model's worth of fp8 takes minutes
  // on one), as many as keep the reference images of the largest buffers within 4 GiB (a check
  // holds its buffer's source image, 2-4 bytes an element, and the expected fp8); the first failure
  // in buffer order is reported.
  int64_t largest = 1;
  for (const BlockScaledBuffer* s : work) largest = std::max(largest, s->matrices * s->rows * s->cols * 5);
  const size_t threads = static_cast<size_t>(std::clamp<int64_t>((int64_t{4} << 30) / largest, 1, 8));
  std::vector<Result<int64_t>> results(work.size(), int64_t{0});
  ParallelFor(work.size(), threads, [&](size_t i) {
    results[i] = VerifyOneBlockScaled(layout, rank, buffers, source, *work[i], frags.at(work[i]->buffer));
  });
  int64_t checked = 0;
  for (Result<int64_t>& r : results) {
    FERRY_ASSIGN_OR_RETURN(int64_t bytes, std::move(r));
    checked += bytes;
  }
  return checked;
}

}  // namespace ferry::cli
