// The deterministic refit test pattern: fill source fragments, verify destination fragments.
#include "tools/cli/refit_pattern.h"

#include <cstring>
#include <string>
#include <sstream>
#include <unordered_set>
#include <vector>

#include "core/base/checksum_term.h"
#include "core/base/dtype.h"
#include "tools/cli/block_scaled_pattern.h"
#include "tools/cli/fragment_rows.h"
#include "tools/cli/parallel_for.h"

namespace ferry::cli {
namespace {

std::string Hex(const char* bytes, int64_t n) {
  static const char* digits = "0123456789abcdef";
  std::string out = "0x";
  for (int64_t i = n - 1; i >= 0; --i) {  // little-endian: most significant byte first
    const auto b = static_cast<unsigned char>(bytes[i]);
    out += digits[b >> 4];
    out += digits[b & 15];
  }
  return out;
}

std::string Coordinates(const TensorSpec& t, int64_t index) {
  std::vector<int64_t> c(t.shape.size());
  for (int d = static_cast<int>(t.shape.size()) - 1; d >= 0; --d) {
    c[d] = index % t.shape[d];
    index /= t.shape[d];
  }
  std::ostringstream out;
  out << "[";
  for (size_t d = 0; d < c.size(); ++d) out << (d ? ", " : "") << c[d];
  out << "]";
  return out.str();
}

Status CheckBuffers(const Layout& layout, const RankBuffers& buffers) {
  if (buffers.buffers.size() != layout.buffers.size()) {
    return InvalidArgument("pattern: " + std::to_string(buffers.buffers.size()) +
                           " buffer pointers for a layout of " +
                           std::to_string(layout.buffers.size()) + " buffers");
  }
  for (size_t b = 0; b < layout.buffers.size(); ++b) {
    if (layout.buffers[b].rank == buffers.rank && buffers.buffers[b] == nullptr) {
      return InvalidArgument("pattern: buffer '" + layout.buffers[b].name + "' of rank " +
                             std::to_string(buffers.rank) + " has no memory");
    }
  }
  return Status::Ok();
}


}  // namespace

Status FillPattern(const Layout& layout, const RankBuffers& buffers, const Layout* destination) {
  FERRY_RETURN_IF_ERROR(CheckBuffers(layout, buffers));
  const std::unordered_set<std::string> finite =
      destination != nullptr ? BlockScaledTensors(*destination) : std::unordered_set<std::string>{};
  std::vector<size_t> mine;  // this rank's fragments, by index (the table yields them by value)
  for (size_t i = 0; i < layout.fragments.size(); ++i) {
    if (layout.fragments[i].loc.rank == buffers.rank) mine.push_back(i);
  }
  // A rank's fragments do not overlap (ValidateLayout), so they are filled on up to 8 threads.
  ParallelFor(mine.size(), 8, [&](size_t k) {
    const Fragment f = layout.fragments[mine[k]];
    const TensorSpec& t = layout.tensors[f.tensor];
    const uint64_t seed = PatternSeed(t.name);
    const int64_t esize = DTypeSize(t.dtype);
    const bool is_finite = finite.count(t.name) > 0;
    char* base = buffers.buffers[f.loc.buffer];
    ForEachRow(layout, f, esize, [&](int64_t global, int64_t offset, int64_t count, int64_t stride) {
      char* p = base + offset;
      for (int64_t i = 0; i < count; ++i, p += stride) {
        const uint64_t word =
            is_finite ? FinitePatternWord(seed, global + i, t.dtype) : PatternWord(seed, global + i);
        std::memcpy(p, &word, esize);
      }
    });
  });
  return Status::Ok();
}

Result<int64_t> VerifyPattern(const Layout& layout, const RankBuffers& buffers,
                              const Layout* source) {
  FERRY_RETURN_IF_ERROR(CheckBuffers(layout, buffers));
  std::vector<char> scaled(layout.buffers.size(), 0);
  for (const BlockScaledBuffer& s : layout.block_scaled) scaled[static_cast<size_t>(s.buffer)] = 1;
  int64_t checked = 0;
  const std::vector<StoredForm> forms = StoredForms(layout);
  if (!layout.block_scaled.empty()) {
    if (source == nullptr) return InvalidArgument("verify: block-scaled buffers need the source layout");
    FERRY_ASSIGN_OR_RETURN(checked, VerifyBlockScaled(layout, buffers.rank, buffers.buffers, *source));
  }
  for (const Fragment& f : layout.fragments) {
    if (f.loc.rank != buffers.rank || scaled[static_cast<size_t>(f.loc.buffer)]) continue;
    const TensorSpec& t = layout.tensors[f.tensor];
    const StoredForm form = forms[static_cast<size_t>(f.tensor)];
    const uint64_t seed = PatternSeed(t.name);
    const int64_t esize = DTypeSize(form.dtype);
    const DType from = PatternDType(t, source);
    const uint64_t mask = ElementMask(form.dtype);
    const char* base = buffers.buffers[f.loc.buffer];
    int64_t mismatches = 0, first_index = -1;
    std::string first_expected, first_actual;
    ForEachRow(layout, f, esize, [&](int64_t global, int64_t offset, int64_t count, int64_t stride) {
      const char* p = base + offset;
      for (int64_t i = 0; i < count; ++i, p += stride) {
        const uint64_t word = PatternElement(seed, global + i, from, form.dtype, mask, form.fn);
        if (std::memcmp(p, &word, esize) != 0) {
          if (mismatches++ == 0) {
            first_index = global + i;
            first_expected = Hex(reinterpret_cast<const char*>(&word), esize);
            first_actual = Hex(p, esize);
          }
        }
      }
    });
    if (mismatches > 0) {
      return Internal(
                    "verify: rank " + std::to_string(buffers.rank) + " buffer '" +
                        layout.buffers[f.loc.buffer].name + "' tensor '" + t.name +
                        "' element " + Coordinates(t, first_index) + ": expected " +
                        first_expected + ", got " + first_actual + " (" +
                        std::to_string(mismatches) + " of " + std::to_string(f.NumElements()) +
                        " elements of this fragment differ)");
    }
    checked += f.NumElements() * esize;
  }
  return checked;
}

std::vector<StoredForm> StoredForms(const Layout& layout) {
  std::vector<StoredForm> forms(layout.tensors.size());
  for (size_t t = 0; t < forms.size(); ++t) forms[t].dtype = layout.tensors[t].dtype;
  for (const StoredTransform& x : layout.transforms) {
    if (x.tensor < 0 || static_cast<size_t>(x.tensor) >= forms.size()) continue;
    forms[static_cast<size_t>(x.tensor)] = {x.stored_dtype, ElementFnOfTransform(x.transform)};
  }
  return forms;
}

DType PatternDType(const TensorSpec& t, const Layout* source) {
  if (source == nullptr) return t.dtype;
  const int s = source->FindTensor(t.name);
  return s < 0 ? t.dtype : source->tensors[s].dtype;
}

std::vector<uint64_t> PatternChecksums(const Layout& layout, int rank, const Layout* source) {
  std::vector<uint64_t> sums;
  const std::vector<StoredForm> forms = StoredForms(layout);
  for (const Fragment& f : layout.fragments) {
    if (f.loc.rank != rank) continue;
    const TensorSpec& t = layout.tensors[f.tensor];
    const StoredForm form = forms[static_cast<size_t>(f.tensor)];
    const uint64_t seed = PatternSeed(t.name);
    const DType from = PatternDType(t, source);
    const uint64_t mask = ElementMask(form.dtype);
    uint64_t sum = 0, element = 0;
    ForEachRow(layout, f, DTypeSize(form.dtype), [&](int64_t global, int64_t, int64_t count, int64_t) {
      for (int64_t i = 0; i < count; ++i) {
        sum += BoxChecksumTerm(element++, PatternElement(seed, global + i, from, form.dtype, mask, form.fn));
      }
    });
    sums.push_back(sum);
  }
  return sums;
}

}  // namespace ferry::cli
