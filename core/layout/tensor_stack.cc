// Tensor stack names, the check that two layouts describe their stacks alike, and expansion of
// stacks into their members.
#include "core/layout/tensor_stack.h"

#include <algorithm>
#include <unordered_set>
#include <utility>
#include <vector>

#include "core/base/dtype.h"

namespace ferry {
namespace {

// The value of `digits` (1 to 18 decimal digits), or -1.
int64_t ParseDecimal(std::string_view digits) {
  if (digits.empty() || digits.size() > 18) return -1;
  int64_t value = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return -1;
    value = value * 10 + (c - '0');
  }
  return value;
}

// [first, end) of component "[first:end]" when `component` is one.
std::optional<std::pair<int64_t, int64_t>> ParseRange(std::string_view component) {
  if (component.size() < 5 || component.front() != '[' || component.back() != ']') return {};
  const std::string_view inner = component.substr(1, component.size() - 2);
  const size_t colon = inner.find(':');
  if (colon == std::string_view::npos) return {};
  const int64_t first = ParseDecimal(inner.substr(0, colon));
  const int64_t end = ParseDecimal(inner.substr(colon + 1));
  if (first < 0 || end <= first) return {};
  return std::make_pair(first, end);
}

}  // namespace

std::string TensorStackName::MemberName(int64_t member) const {
  return prefix + std::to_string(member) + suffix;
}

std::string TensorStackName::ToString() const {
  return prefix + "[" + std::to_string(first) + ":" + std::to_string(end) + "]" + suffix;
}

std::optional<TensorStackName> ParseTensorStackName(std::string_view name) {
  // Components right to left; most names have no '[' at all and return at once.
  size_t end = name.size();
  if (name.find('[') == std::string_view::npos) return {};
  while (true) {
    const size_t dot = end == 0 ? std::string_view::npos : name.rfind('.', end - 1);
    const size_t begin = dot == std::string_view::npos ? 0 : dot + 1;
    if (const auto range = ParseRange(name.substr(begin, end - begin))) {
      return TensorStackName{std::string(name.substr(0, begin)), range->first, range->second,
                             std::string(name.substr(end))};
    }
    if (dot == std::string_view::npos) return {};
    end = dot;
  }
}

bool TensorStacksAgree(const Layout& source, const Layout& destination) {
  std::unordered_set<std::string_view> source_stacks, destination_stacks;
  for (const TensorSpec& t : source.tensors) {
    if (ParseTensorStackName(t.name)) source_stacks.insert(t.name);
  }
  for (const TensorSpec& t : destination.tensors) {
    if (!ParseTensorStackName(t.name)) continue;
    if (!source_stacks.count(t.name)) return false;
    destination_stacks.insert(t.name);
  }
  // A source stack the destination does not have: the destination must not name its members.
  std::unordered_set<std::string_view> destination_names;
  for (std::string_view name : source_stacks) {
    if (destination_stacks.count(name)) continue;
    if (destination_names.empty()) {
      for (const TensorSpec& t : destination.tensors) destination_names.insert(t.name);
    }
    const TensorStackName stack = *ParseTensorStackName(name);
    for (int64_t m = stack.first; m < stack.end; ++m) {
      if (destination_names.count(stack.MemberName(m))) return false;
    }
  }
  return true;
}

Result<Layout> UnstackTensors(const Layout& layout) {
  Layout out;
  out.buffers = layout.buffers;
  // Per tensor of `layout`: the first of its tensors in `out` (its members, or itself).
  std::vector<int> first_of(layout.tensors.size());
  std::vector<char> stacked(layout.tensors.size(), 0);
  std::unordered_set<std::string> plain_names;
  for (const TensorSpec& t : layout.tensors) {
    if (!ParseTensorStackName(t.name)) plain_names.insert(t.name);
  }
  for (size_t i = 0; i < layout.tensors.size(); ++i) {
    const TensorSpec& t = layout.tensors[i];
    first_of[i] = static_cast<int>(out.tensors.size());
    const std::optional<TensorStackName> stack = ParseTensorStackName(t.name);
    if (!stack) {
      out.tensors.push_back(t);
      continue;
    }
    if (t.shape.size() < 2 || t.shape[0] != stack->size()) {
      return InvalidArgument("tensor stack '" + t.name + "' has " +
                             std::to_string(stack->size()) + " members but its shape does not " +
                             "start with " + std::to_string(stack->size()) +
                             " followed by the members' shape");
    }
    stacked[i] = 1;
    TensorSpec member{"", std::vector<int64_t>(t.shape.begin() + 1, t.shape.end()), t.dtype};
    for (int64_t m = stack->first; m < stack->end; ++m) {
      member.name = stack->MemberName(m);
      if (plain_names.count(member.name)) {
        return InvalidArgument("tensor '" + member.name + "' is also member " +
                               std::to_string(m) + " of tensor stack '" + t.name + "'");
      }
      out.tensors.push_back(member);
    }
  }
  // Member i of a stack box [lo, hi) x rest: the box `rest`, one dim-0 stride further per member.
  auto unstack_box = [](const Box& box) {
    Box member;
    member.ndim = box.ndim - 1;
    for (int d = 1; d < box.ndim; ++d) {
      member.lo[d - 1] = box.lo[d];
      member.hi[d - 1] = box.hi[d];
    }
    return member;
  };
  size_t fragments = 0;
  for (const Fragment& f : layout.fragments) {
    const bool is_stack = f.tensor >= 0 && static_cast<size_t>(f.tensor) < stacked.size() &&
                          stacked[static_cast<size_t>(f.tensor)];
    fragments += is_stack ? static_cast<size_t>(std::max<int64_t>(0, f.box.Extent(0))) : 1;
  }
  out.fragments.reserve(fragments);
  for (const Fragment& f : layout.fragments) {
    const size_t t = static_cast<size_t>(f.tensor);
    if (f.tensor < 0 || t >= stacked.size() || !stacked[t]) {
      Fragment copy = f;
      if (f.tensor >= 0 && t < first_of.size()) copy.tensor = first_of[t];
      out.fragments.push_back(copy);
      continue;
    }
    const TensorSpec& spec = layout.tensors[t];
    if (f.box.ndim != static_cast<int>(spec.shape.size()) || f.box.lo[0] < 0 ||
        f.box.hi[0] > spec.shape[0]) {
      return InvalidArgument("fragment " + f.box.ToString() + " of tensor stack '" + spec.name +
                             "' does not fit its shape");
    }
    const int64_t esize = DTypeSize(spec.dtype);
    for (int64_t j = f.box.lo[0]; j < f.box.hi[0]; ++j) {
      Fragment member;
      member.tensor = first_of[t] + static_cast<int>(j);
      member.box = unstack_box(f.box);
      member.loc.rank = f.loc.rank;
      member.loc.buffer = f.loc.buffer;
      member.loc.byte_offset = f.loc.byte_offset + (j - f.box.lo[0]) * f.loc.strides[0] * esize;
      for (int d = 1; d < f.box.ndim; ++d) member.loc.strides[d - 1] = f.loc.strides[d];
      out.fragments.push_back(member);
    }
  }
  for (const PaddingRegion& p : layout.padding) {
    const size_t t = static_cast<size_t>(p.tensor);
    if (p.tensor < 0 || t >= stacked.size() || !stacked[t]) {
      out.padding.push_back({p.tensor >= 0 && t < first_of.size() ? first_of[t] : p.tensor, p.box});
      continue;
    }
    for (int64_t j = std::max<int64_t>(p.box.lo[0], 0);
         j < std::min(p.box.hi[0], layout.tensors[t].shape[0]); ++j) {
      out.padding.push_back({first_of[t] + static_cast<int>(j), unstack_box(p.box)});
    }
  }
  return out;
}

}  // namespace ferry
