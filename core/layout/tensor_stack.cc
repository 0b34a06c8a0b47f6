// Tensor stack names, the check that two layouts describe their stacks alike, expansion of stacks
// into their members and stacking of members.
#include "core/layout/tensor_stack.h"

#include <algorithm>
#include <charconv>
#include <functional>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "core/base/dtype.h"
#include "core/base/strings.h"

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

// Hash of a (prefix, suffix) pair of a name, for finding a member's stack without building names.
struct AffixHash {
  size_t operator()(const std::pair<std::string_view, std::string_view>& p) const {
    const std::hash<std::string_view> h;
    return h(p.first) * 0x9e3779b97f4a7c15ull ^ h(p.second);
  }
};

// Finds which of a set of tensor stacks a tensor name is a member of, by its '.'-separated
// decimal components (canonical spelling, no leading zeros), without building member names.
class MemberFinder {
 public:
  // `stacks` must outlive the finder.
  explicit MemberFinder(const std::vector<TensorStackName>& stacks) : stacks_(stacks) {
    for (size_t k = 0; k < stacks.size(); ++k) {
      by_affixes_.emplace(std::make_pair(std::string_view(stacks[k].prefix),
                                         std::string_view(stacks[k].suffix)),
                          static_cast<int>(k));
    }
  }
  // The stack `name` is a member of and the member's number, or (-1, -1).
  std::pair<int, int64_t> Find(std::string_view name) const {
    if (by_affixes_.empty()) return {-1, -1};
    size_t end = name.size();
    while (end > 0) {
      const size_t dot = name.rfind('.', end - 1);
      const size_t begin = dot == std::string_view::npos ? 0 : dot + 1;
      const std::string_view digits = name.substr(begin, end - begin);
      const int64_t number = ParseDecimal(digits);
      if (number >= 0 && (digits.size() == 1 || digits[0] != '0')) {
        const auto it = by_affixes_.find({name.substr(0, begin), name.substr(end)});
        if (it != by_affixes_.end() && number >= stacks_[it->second].first &&
            number < stacks_[it->second].end) {
          return {it->second, number};
        }
      }
      if (dot == std::string_view::npos) break;
      end = dot;
    }
    return {-1, -1};
  }

 private:
  const std::vector<TensorStackName>& stacks_;
  std::unordered_map<std::pair<std::string_view, std::string_view>, int, AffixHash> by_affixes_;
};

}  // namespace

std::string TensorStackName::MemberName(int64_t member) const {
  std::string name;
  AssignMemberName(member, name);
  return name;
}

void TensorStackName::AssignMemberName(int64_t member, std::string& out) const {
  char digits[24];
  const auto [end, ec] = std::to_chars(digits, digits + sizeof digits, member);
  (void)ec;  // 24 characters hold any int64
  out.assign(prefix).append(digits, end).append(suffix);
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

Status CheckTensorStackShape(const TensorSpec& tensor, const TensorStackName& stack) {
  if (tensor.shape.size() >= 2 && tensor.shape[0] == stack.size()) return Status::Ok();
  return InvalidArgument("tensor stack '" + tensor.name + "' has " + std::to_string(stack.size()) +
                         " members, so its shape must be [" + std::to_string(stack.size()) +
                         ", <member shape>], not " + FormatInts(tensor.shape));
}

std::vector<TensorSpec> StacksMissingIn(const Layout& layout, const Layout& from) {
  std::unordered_set<std::string_view> have;
  for (const TensorSpec& t : layout.tensors) {
    if (ParseTensorStackName(t.name)) have.insert(t.name);
  }
  std::vector<TensorSpec> missing;
  for (const TensorSpec& t : from.tensors) {
    if (ParseTensorStackName(t.name) && !have.count(t.name)) missing.push_back(t);
  }
  return missing;
}

bool TensorStacksAgree(const Layout& source, const Layout& destination) {
  if (!StacksMissingIn(source, destination).empty()) return false;
  // A source stack the destination does not have: the destination must not name its members.
  std::vector<TensorStackName> missing;
  for (const TensorSpec& t : StacksMissingIn(destination, source)) {
    missing.push_back(*ParseTensorStackName(t.name));
  }
  if (missing.empty()) return true;
  const MemberFinder finder(missing);
  for (const TensorSpec& t : destination.tensors) {
    if (finder.Find(t.name).first >= 0) return false;
  }
  return true;
}

Result<UnstackedTensors> UnstackTensorSpecs(const Layout& layout) {
  UnstackedTensors out;
  out.first_of.resize(layout.tensors.size());
  out.stacked.resize(layout.tensors.size());
  std::vector<std::optional<TensorStackName>> stacks(layout.tensors.size());
  std::unordered_set<std::string_view> plain_names;
  size_t tensors = 0;
  for (size_t i = 0; i < layout.tensors.size(); ++i) {
    stacks[i] = ParseTensorStackName(layout.tensors[i].name);
    out.stacked[i] = stacks[i].has_value();
    if (!stacks[i]) plain_names.insert(layout.tensors[i].name);
    tensors += stacks[i] ? static_cast<size_t>(stacks[i]->size()) : 1;
  }
  out.tensors.reserve(tensors);
  std::string name;
  for (size_t i = 0; i < layout.tensors.size(); ++i) {
    const TensorSpec& t = layout.tensors[i];
    out.first_of[i] = static_cast<int>(out.tensors.size());
    const std::optional<TensorStackName>& stack = stacks[i];
    if (!stack) {
      out.tensors.push_back(t);
      continue;
    }
    FERRY_RETURN_IF_ERROR(CheckTensorStackShape(t, *stack));
    const std::vector<int64_t> member_shape(t.shape.begin() + 1, t.shape.end());
    for (int64_t m = stack->first; m < stack->end; ++m) {
      stack->AssignMemberName(m, name);
      if (plain_names.count(name)) {
        return InvalidArgument("tensor '" + name + "' is also member " + std::to_string(m) +
                               " of tensor stack '" + t.name + "'");
      }
      out.tensors.push_back({name, member_shape, t.dtype});
    }
  }
  return out;
}

Box StackMemberBox(const Box& box) {
  Box member;
  member.ndim = box.ndim - 1;
  for (int d = 1; d < box.ndim; ++d) {
    member.lo[d - 1] = box.lo[d];
    member.hi[d - 1] = box.hi[d];
  }
  return member;
}

Status CheckStackFragment(const Fragment& f, const TensorSpec& stack) {
  if (f.box.ndim != static_cast<int>(stack.shape.size()) || f.box.lo[0] < 0 ||
      f.box.hi[0] > stack.shape[0]) {
    return InvalidArgument("fragment " + f.box.ToString() + " of tensor stack '" + stack.name +
                           "' does not fit its shape");
  }
  return Status::Ok();
}

Fragment StackMemberFragment(const Fragment& f, const UnstackedTensors& members, int64_t j,
                             int64_t element_bytes) {
  Fragment member;
  member.tensor = members.first_of[static_cast<size_t>(f.tensor)] + static_cast<int>(j);
  member.box = StackMemberBox(f.box);
  member.loc.rank = f.loc.rank;
  member.loc.buffer = f.loc.buffer;
  member.loc.byte_offset = f.loc.byte_offset + (j - f.box.lo[0]) * f.loc.strides[0] * element_bytes;
  for (int d = 1; d < f.box.ndim; ++d) member.loc.strides[d - 1] = f.loc.strides[d];
  return member;
}

Result<Layout> UnstackTensors(const Layout& layout) {
  FERRY_ASSIGN_OR_RETURN(UnstackedTensors members, UnstackTensorSpecs(layout));
  Layout out;
  out.buffers = layout.buffers;
  out.block_scaled = layout.block_scaled;
  const std::vector<int>& first_of = members.first_of;
  // Whether tensor index `t` (unchecked) is a stack.
  auto is_stack = [&](int t) {
    return t >= 0 && static_cast<size_t>(t) < members.stacked.size() &&
           members.stacked[static_cast<size_t>(t)];
  };
  size_t fragments = 0;
  for (const Fragment& f : layout.fragments) {
    fragments +=
        is_stack(f.tensor) ? static_cast<size_t>(std::max<int64_t>(0, f.box.Extent(0))) : 1;
  }
  out.fragments.reserve(fragments);
  for (const Fragment& f : layout.fragments) {
    const size_t t = static_cast<size_t>(f.tensor);
    if (!is_stack(f.tensor)) {
      Fragment copy = f;
      if (f.tensor >= 0 && t < first_of.size()) copy.tensor = first_of[t];
      out.fragments.push_back(copy);
      continue;
    }
    const TensorSpec& spec = layout.tensors[t];
    FERRY_RETURN_IF_ERROR(CheckStackFragment(f, spec));
    const int64_t esize = DTypeSize(spec.dtype);
    for (int64_t j = f.box.lo[0]; j < f.box.hi[0]; ++j) {
      out.fragments.push_back(StackMemberFragment(f, members, j, esize));
    }
  }
  for (const PaddingRegion& p : layout.padding) {
    const size_t t = static_cast<size_t>(p.tensor);
    if (!is_stack(p.tensor)) {
      out.padding.push_back({p.tensor >= 0 && t < first_of.size() ? first_of[t] : p.tensor, p.box});
      continue;
    }
    for (int64_t j = std::max<int64_t>(p.box.lo[0], 0);
         j < std::min(p.box.hi[0], layout.tensors[t].shape[0]); ++j) {
      out.padding.push_back({first_of[t] + static_cast<int>(j), StackMemberBox(p.box)});
    }
  }
  for (const StoredTransform& x : layout.transforms) {  // a stack's transform is each member's
    const size_t t = static_cast<size_t>(x.tensor);
    if (x.tensor < 0 || t >= first_of.size()) continue;
    const int64_t members = is_stack(x.tensor) ? layout.tensors[t].shape[0] : 1;
    for (int64_t j = 0; j < members; ++j) {
      out.transforms.push_back({first_of[t] + static_cast<int>(j), x.transform, x.stored_dtype});
    }
  }
  out.tensors = std::move(members.tensors);
  return out;
}

namespace {

// The parsed names of `stacks`, each checked against its stack's shape.
Result<std::vector<TensorStackName>> StackNames(const std::vector<TensorSpec>& stacks) {
  std::vector<TensorStackName> names;
  names.reserve(stacks.size());
  for (const TensorSpec& stack : stacks) {
    std::optional<TensorStackName> name = ParseTensorStackName(stack.name);
    if (!name) return InvalidArgument("'" + stack.name + "' is not a tensor stack name");
    FERRY_RETURN_IF_ERROR(CheckTensorStackShape(stack, *name));
    names.push_back(std::move(*name));
  }
  return names;
}

// Which of a layout's tensors are members of which stack, and where the stacked layout puts
// every tensor.
struct MemberIndex {
  std::vector<int> stack_of;        // per tensor of the layout: its stack, or -1
  std::vector<int64_t> index_of;    // its index in that stack
  std::vector<int> new_index;       // per tensor that stays itself: its index in the output
  std::vector<int> stack_index;     // per stack with members: its index in the output, or -1
  int64_t members = 0;
};

// The members among `layout`'s tensors (each must have its stack's member shape and dtype).
Result<MemberIndex> FindMembers(const Layout& layout, const std::vector<TensorSpec>& stacks,
                                const std::vector<TensorStackName>& names) {
  const MemberFinder finder(names);
  MemberIndex m{std::vector<int>(layout.tensors.size(), -1),
                std::vector<int64_t>(layout.tensors.size(), 0),
                std::vector<int>(layout.tensors.size(), -1), std::vector<int>(stacks.size(), -1)};
  for (size_t t = 0; t < layout.tensors.size(); ++t) {
    const auto [k, number] = finder.Find(layout.tensors[t].name);
    if (k < 0) continue;
    const TensorSpec& spec = stacks[static_cast<size_t>(k)];
    const TensorSpec& member = layout.tensors[t];
    if (member.dtype != spec.dtype ||
        !std::equal(member.shape.begin(), member.shape.end(), spec.shape.begin() + 1,
                    spec.shape.end())) {
      return InvalidArgument("tensor '" + member.name + "' has the name of member " +
                             std::to_string(number) + " of tensor stack '" + spec.name +
                             "' but not its member shape and dtype");
    }
    m.stack_of[t] = k;
    m.index_of[t] = number - names[static_cast<size_t>(k)].first;
    m.stack_index[static_cast<size_t>(k)] = 0;  // used; numbered by AddTensors
    ++m.members;
  }
  return m;
}

// The output's tensors: the layout's own that are no member, then each stack with members.
void AddTensors(const Layout& layout, const std::vector<TensorSpec>& stacks, MemberIndex& m,
                Layout& out) {
  for (size_t t = 0; t < layout.tensors.size(); ++t) {
    if (m.stack_of[t] >= 0) continue;
    m.new_index[t] = static_cast<int>(out.tensors.size());
    out.tensors.push_back(layout.tensors[t]);
  }
  for (size_t k = 0; k < stacks.size(); ++k) {
    if (m.stack_index[k] < 0) continue;
    m.stack_index[k] = static_cast<int>(out.tensors.size());
    out.tensors.push_back(stacks[k]);
  }
}

// The output tensor of layout tensor `t`: its stack's, its own renumbered, or `t` unchanged when
// out of range (validation names it later).
int OutputTensor(const MemberIndex& m, int t) {
  const size_t i = static_cast<size_t>(t);
  if (t < 0 || i >= m.stack_of.size()) return t;
  return m.stack_of[i] >= 0 ? m.stack_index[static_cast<size_t>(m.stack_of[i])] : m.new_index[i];
}

// The box `box` of member `index`: [index, index + 1) x box.
Box StackedBox(const Box& box, int64_t index) {
  Box out;
  out.ndim = box.ndim + 1;
  out.lo[0] = index;
  out.hi[0] = index + 1;
  for (int d = 0; d < box.ndim; ++d) {
    out.lo[d + 1] = box.lo[d];
    out.hi[d + 1] = box.hi[d];
  }
  return out;
}

// Member fragments folded into stack fragments: consecutive members of one stack in one buffer,
// with the same box and strides at a constant positive byte step, extend one fragment.
class StackedFragments {
 public:
  StackedFragments(const MemberIndex& m, const std::vector<TensorSpec>& stacks, Layout& out)
      : m_(m), stacks_(stacks), out_(out) {}

  // Appends member fragment `f` of layout tensor `t` (a member).
  void Add(const Fragment& f, size_t t) {
    const size_t k = static_cast<size_t>(m_.stack_of[t]);
    const int64_t index = m_.index_of[t];
    const int64_t esize = DTypeSize(stacks_[k].dtype);
    Run& run = runs_[static_cast<uint64_t>(k) << 32 | static_cast<uint32_t>(f.loc.buffer)];
    if (run.fragment >= 0 && run.next == index && Extend(run, f, esize)) return;
    Fragment slice;
    slice.tensor = m_.stack_index[k];
    slice.box = StackedBox(f.box, index);
    slice.loc = f.loc;
    for (int d = 0; d < f.box.ndim; ++d) slice.loc.strides[d + 1] = f.loc.strides[d];
    // One member: any positive stride describes it; the member's volume, as if dense.
    slice.loc.strides[0] = std::max<int64_t>(1, f.box.Volume());
    run = {static_cast<int64_t>(out_.fragments.size()), index + 1, f.loc.byte_offset, 0};
    out_.fragments.push_back(slice);
  }

 private:
  // Per stack and buffer, the run that may still grow: its fragment in the output, next index,
  // last member's byte offset and the stride between members (0 until the run has two).
  struct Run {
    int64_t fragment = -1;
    int64_t next = 0;
    int64_t last_offset = 0;
    int64_t stride = 0;
  };

  // Extends `run`'s fragment by `f`, the run's next member, where its box, strides and step fit.
  bool Extend(Run& run, const Fragment& f, int64_t esize) {
    const size_t open = static_cast<size_t>(run.fragment);
    FragmentTable& table = out_.fragments;
    bool same = table.Ndim(open) == f.box.ndim + 1;
    for (int d = 0; same && d < f.box.ndim; ++d) {
      same = table.Lo(open)[d + 1] == f.box.lo[d] && table.Hi(open)[d + 1] == f.box.hi[d] &&
             table.Strides(open)[d + 1] == f.loc.strides[d];
    }
    const int64_t step = f.loc.byte_offset - run.last_offset;
    if (!same || step <= 0 || step % esize != 0 || (run.stride != 0 && step != run.stride)) {
      return false;
    }
    run.stride = step;
    table.MutableStrides(open)[0] = step / esize;
    ++table.MutableHi(open)[0];
    ++run.next;
    run.last_offset = f.loc.byte_offset;
    return true;
  }

  const MemberIndex& m_;
  const std::vector<TensorSpec>& stacks_;
  Layout& out_;
  std::unordered_map<uint64_t, Run> runs_;  // key: stack << 32 | buffer (a buffer is on one rank)
};

bool IsMember(const MemberIndex& m, int t) {
  return t >= 0 && static_cast<size_t>(t) < m.stack_of.size() &&
         m.stack_of[static_cast<size_t>(t)] >= 0;
}

}  // namespace

Result<Layout> StackMembers(const Layout& layout, const std::vector<TensorSpec>& stacks,
                            int64_t* stacked) {
  if (stacked != nullptr) *stacked = 0;
  FERRY_ASSIGN_OR_RETURN(const std::vector<TensorStackName> names, StackNames(stacks));
  FERRY_ASSIGN_OR_RETURN(MemberIndex m, FindMembers(layout, stacks, names));
  Layout out;
  out.buffers = layout.buffers;
  out.block_scaled = layout.block_scaled;
  AddTensors(layout, stacks, m, out);
  out.fragments.reserve(layout.fragments.size());
  StackedFragments folded(m, stacks, out);
  for (const Fragment& f : layout.fragments) {
    if (IsMember(m, f.tensor)) {
      folded.Add(f, static_cast<size_t>(f.tensor));
      continue;
    }
    Fragment copy = f;
    copy.tensor = OutputTensor(m, f.tensor);
    out.fragments.push_back(copy);
  }
  for (const PaddingRegion& p : layout.padding) {
    const Box box =
        IsMember(m, p.tensor) ? StackedBox(p.box, m.index_of[static_cast<size_t>(p.tensor)]) : p.box;
    out.padding.push_back({OutputTensor(m, p.tensor), box});
  }
  for (const StoredTransform& x : layout.transforms) {  // members' transforms become the stack's
    if (x.tensor < 0 || static_cast<size_t>(x.tensor) >= m.new_index.size()) continue;
    const int tensor = OutputTensor(m, x.tensor);
    const bool seen = std::any_of(out.transforms.begin(), out.transforms.end(),
                                  [&](const StoredTransform& y) { return y.tensor == tensor; });
    if (!seen) out.transforms.push_back({tensor, x.transform, x.stored_dtype});
  }
  if (stacked != nullptr) *stacked = m.members;
  return out;
}

}  // namespace ferry
