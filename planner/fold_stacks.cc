// Stack folding: families by name, fragment runs merged in one pass over each layout.
//
// Cost: a look for stacked runs in the smaller layout (HasStackedRuns), one pass over each
// layout's tensor names (a name is compared with the families joined last, else hashed without
// its number), and one pass over the smaller layout's fragments in index order, up front. A
// fragment joins the open run of its family, rank, buffer, box and strides (the run its stack
// used last, else a direct-mapped table of open runs: layouts write a rank's members one after
// another, so a run is found where it was left) or starts a new one. The larger layout's
// fragments are merged the same way as the intersection's own pass reads them
// (StackSide::Divert), so folding never reads them a second time.
#include "planner/fold_stacks.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>


namespace ferry {
namespace {

constexpr uint64_t kMix = 0x9e3779b97f4a7c15ull;

uint64_t Mix(uint64_t hash, uint64_t value) { return (hash ^ value) * kMix; }

uint64_t HashBytes(uint64_t hash, std::string_view bytes) {
  size_t i = 0;
  for (; i + 8 <= bytes.size(); i += 8) {
    uint64_t word;
    std::memcpy(&word, bytes.data() + i, 8);
    hash = Mix(hash, word);
  }
  uint64_t tail = 0;
  std::memcpy(&tail, bytes.data() + i, bytes.size() - i);
  return Mix(hash, tail ^ (static_cast<uint64_t>(bytes.size()) << 56));
}

// The last '.'-separated component of a name made only of decimal digits: the member number.
struct NumberComponent {
  size_t begin = 0, end = 0;  // [begin, end) of the name
  int64_t value = -1;         // -1: the name has none
};

NumberComponent FindNumber(std::string_view name) {
  size_t end = name.size();
  while (end > 0) {
    const size_t dot = name.rfind('.', end - 1);
    const size_t begin = dot == std::string_view::npos ? 0 : dot + 1;
    const size_t length = end - begin;
    if (length > 0 && length <= 18) {
      int64_t value = 0;
      bool digits = true;
      for (size_t i = begin; i < end && digits; ++i) {
        const char c = name[i];
        digits = c >= '0' && c <= '9';
        value = value * 10 + (c - '0');
      }
      if (digits) return {begin, end, value};
    }
    if (dot == std::string_view::npos) break;
    end = dot;
  }
  return {};
}

// A family's key: the name without its number, the dtype and the shape.
uint64_t FamilyHash(std::string_view name, const NumberComponent& n, const TensorSpec& t) {
  uint64_t h = HashBytes(0x51ed27u, name.substr(0, n.begin));
  h = HashBytes(h, name.substr(n.end));
  h = Mix(h, static_cast<uint64_t>(t.dtype));
  for (int64_t extent : t.shape) h = Mix(h, static_cast<uint64_t>(extent));
  return Mix(h, t.shape.size());
}

bool SameKey(const TensorSpec& a, const NumberComponent& na, const TensorSpec& b,
             const NumberComponent& nb) {
  const std::string_view x = a.name, y = b.name;
  return a.dtype == b.dtype && a.shape == b.shape &&
         x.substr(0, na.begin) == y.substr(0, nb.begin) && x.substr(na.end) == y.substr(nb.end);
}

// Whether `spec` belongs to the family whose first member is `first` (number component
// `first_number`): a name made of the first member's name before its number, 1 to 18 digits, and
// the first member's name after its number, with equal dtype and shape (SameKey). Then `n` is its
// number component, as FindNumber would find it: the text after the digits has no all-digit
// component, since the first member's number is its name's last one.
bool MatchesFamily(const TensorSpec& first, const NumberComponent& first_number,
                   const TensorSpec& spec, NumberComponent& n) {
  const size_t prefix = first_number.begin, suffix = first.name.size() - first_number.end;
  const size_t size = spec.name.size();
  if (size <= prefix + suffix || size - prefix - suffix > 18) return false;
  NumberComponent candidate{prefix, size - suffix, 0};
  for (size_t i = candidate.begin; i < candidate.end; ++i) {
    const char c = spec.name[i];
    if (c < '0' || c > '9') return false;
    candidate.value = candidate.value * 10 + (c - '0');
  }
  if (!SameKey(first, first_number, spec, candidate)) return false;
  n = candidate;
  return true;
}

struct Family {
  int first = 0;                // the source tensor that defines the key
  NumberComponent first_number;
  std::vector<std::pair<int64_t, int>> members;  // (number, source tensor), sorted by number
  std::vector<int> destination;                  // destination tensor per member, or -1
  int64_t esize = 1;            // bytes per element
  bool broken = false;          // a destination tensor contradicts it, or numbers repeat
  // Fragments of the side merged first before and after merging.
  int64_t first_in = 0, first_out = 0;
  int stack = -1;               // index of its stacked tensor when kept
};

// Where a tensor goes: member `position` of family `family`, or nowhere (family < 0).
struct Membership {
  int family = -1;
  int position = 0;
};

// A hash of where and how a fragment lies: `seed`, its rank, buffer, box and strides. Fragments
// that can join one run have equal placement hashes for equal seeds.
uint64_t PlacementHash(uint64_t seed, const FragmentView& f) {
  const int ndim = f.ndim;
  uint64_t h = Mix(Mix(Mix(seed, static_cast<uint64_t>(f.rank)), static_cast<uint64_t>(f.buffer)),
                   static_cast<uint64_t>(ndim));
  for (int d = 0; d < ndim; ++d) {
    h = Mix(Mix(Mix(h, static_cast<uint64_t>(f.lo[d])), static_cast<uint64_t>(f.hi[d])),
            static_cast<uint64_t>(f.strides[d]));
  }
  return h;
}

// Whether `g`, from its dim `first` on, lies as `f` does: same rank and buffer, equal box and
// strides (first = 1 compares a stack fragment with a member's).
[[gnu::always_inline]] inline bool SamePlacement(const FragmentView& g, int first,
                                                 const FragmentView& f) {
  const int ndim = f.ndim;
  bool same = g.rank == f.rank && g.buffer == f.buffer && g.ndim == ndim + first;
  for (int d = 0; same && d < ndim; ++d) {
    same = g.lo[d + first] == f.lo[d] && g.hi[d + first] == f.hi[d] &&
           g.strides[d + first] == f.strides[d];
  }
  return same;
}

// Whether `layout` stores three or more fragments of different tensors with equal boxes and
// strides in one buffer of one rank, each at the same positive byte distance after the previous
// one: without such a run no family can merge there. A cheap look at the smaller layout before any
// name is read: models without stacked buffers, and trainers that keep one buffer per expert,
// stop here. (Its runs need not be of one family, so it may say yes where nothing folds.)
bool HasStackedRuns(const Layout& layout) {
  struct Probe {
    int64_t last = -1;  // fragment id
    int64_t stride = 0;
    int count = 0;
  };
  constexpr int kTableBits = 10;
  std::vector<Probe> table(size_t{1} << kTableBits);
  const FragmentTable& fragments = layout.fragments;
  for (size_t i = 0; i < fragments.size(); ++i) {
    const FragmentView f = fragments.View(i);
    if (f.ndim < 1 || f.ndim > kMaxDims) continue;
    Probe& p = table[PlacementHash(0, f) >> (64 - kTableBits)];
    const int64_t id = static_cast<int64_t>(i);
    if (p.last >= 0) {
      const FragmentView g = fragments.View(static_cast<size_t>(p.last));
      const bool same = g.tensor != f.tensor && SamePlacement(g, 0, f);
      const int64_t step = f.byte_offset - g.byte_offset;
      if (same && step > 0 && (p.count == 1 || step == p.stride)) {
        p = {id, step, p.count + 1};
        if (p.count >= 3) return true;
        continue;
      }
    }
    p = {id, 0, 1};
  }
  return false;
}

}  // namespace

bool StackSide::Merge(const FragmentView& f, int stack, int position, int64_t esize) {
  const int ndim = f.ndim;
  FragmentTable& out = stacks_.fragments;
  // The run `f` may continue: the run this stack used last first (a layout writes a rank's members
  // one after another, interleaving a few stacks, such as an expert's gate, up and down slices),
  // compared by stack and position before its fragment is read; a run there that lies as `f` does
  // sits in the slot f's placement hash names, so this finds what the hash would, without
  // computing it.
  // Whether the run in `slot` is of `stack`, expects `position` and lies as f.
  auto continued_at = [&](size_t slot) {
    const Run& r = runs_[slot];
    return r.stack == stack && r.next_position == position &&
           SamePlacement(out.View(static_cast<size_t>(r.fragment)), 1, f);
  };
  size_t& last = last_run_of_stack_[static_cast<size_t>(stack)];
  size_t slot = last;
  bool continues = continued_at(slot);
  if (!continues) {
    slot = PlacementHash(static_cast<uint64_t>(stack), f) >> (64 - kRunTableBits);
    continues = continued_at(slot);
  }
  last = slot;
  Run& run = runs_[slot];
  if (continues) {
    const int64_t step = f.byte_offset - run.last_offset;
    if (run.stride == 0 ? step > 0 && step % esize == 0 : step == run.stride) {
      const size_t g = static_cast<size_t>(run.fragment);
      if (run.stride == 0) {  // the second member sets the stride; later ones keep to it
        run.stride = step;
        out.MutableStrides(g)[0] = step / esize;
      }
      out.MutableHi(g)[0] = position + 1;
      run.next_position = position + 1;
      run.last_offset = f.byte_offset;
      return false;
    }
  }
  run = {static_cast<int64_t>(out.size()), position + 1, stack, f.byte_offset, 0};
  const int n = ndim + 1;
  int64_t* lo = out.Append(stack, n, f.rank, f.buffer, f.byte_offset);
  int64_t* hi = lo + n;
  int64_t* strides = hi + n;
  lo[0] = position;
  hi[0] = position + 1;
  // A one-member run's stride is that of a dense stack of such boxes, so a contiguous fragment
  // stays contiguous.
  strides[0] = f.strides[0] * std::max<int64_t>(1, f.hi[0] - f.lo[0]);
  for (int d = 0; d < ndim; ++d) {
    lo[d + 1] = f.lo[d];
    hi[d + 1] = f.hi[d];
    strides[d + 1] = f.strides[d];
  }
  return true;
}

bool StackSide::Divert(const FragmentTable& fragments, size_t id) {
  if (!folded_.empty()) return folded_[id] != 0;
  const int t = fragments.Tensor(id);
  if (t < 0 || static_cast<size_t>(t) >= member_of_tensor_.size()) return false;
  const StackMember m = member_of_tensor_[t];
  const int ndim = fragments.Ndim(id);
  if (m.stack < 0 || ndim < 1 || ndim >= kMaxDims) return false;
  Merge(fragments.View(id), m.stack, m.position, m.esize);
  return true;
}

// FoldTensorStacks' state for one pair of layouts: the source's tensor families, each tensor's
// membership on both sides, and the order in which the sides are merged (the smaller up front).
class StackFolder {
 public:
  StackFolder(const Layout& source, const Layout& destination, StackFold& out)
      : source_(source), destination_(destination), out_(out),
        source_first_(source.fragments.size() <= destination.fragments.size()),
        first_(source_first_ ? source : destination), second_(source_first_ ? destination : source) {}

  bool Fold() {
    if (!HasStackedRuns(first_)) return false;
    FindSourceFamilies();
    if (families_.empty()) return false;
    SealFamilies();
    out_ = StackFold();
    ForgetBroken(src_member_);
    if (source_first_ && !MergeFirstSide(src_member_)) return false;
    JoinDestination();
    // A destination tensor whose name matches a member's but whose shape or dtype does not hashes
    // elsewhere and stays unfolded; its source member may be folded, so the folded layouts then
    // fail to plan, and the caller plans the originals to report the mismatch.
    ForgetBroken(src_member_);
    ForgetBroken(dst_member_);
    if (!source_first_ && !MergeFirstSide(dst_member_)) return false;
    std::vector<TensorSpec> stacks = MakeStacks();
    if (stacks.empty()) return false;
    KeepFirstSideStacks();
    PrepareSecondSide(stacks.size());
    out_.stacks = static_cast<int>(stacks.size());
    FirstSide().stacks_.tensors = stacks;
    SecondSide().stacks_.tensors = std::move(stacks);
    return true;
  }

 private:
  StackSide& FirstSide() { return source_first_ ? out_.source : out_.destination; }
  StackSide& SecondSide() { return source_first_ ? out_.destination : out_.source; }

  // Families of the source's tensors. Members of a family mostly come near each other (a layer's
  // experts, interleaving a few families), so a tensor is first matched against the families
  // recently joined (MatchesFamily) and only otherwise parsed and hashed. A tensor that matches
  // a family's key is the one the hash would find: the first family of each hash is the only one
  // ever created with it.
  void FindSourceFamilies() {
    src_member_.assign(source_.tensors.size(), {});
    for (size_t t = 0; t < source_.tensors.size(); ++t) {
      const TensorSpec& spec = source_.tensors[t];
      if (spec.shape.empty() || spec.shape.size() >= static_cast<size_t>(kMaxDims)) continue;
      NumberComponent n;
      int family_index = MatchRecentFamily(spec, n);
      if (family_index < 0) {
        family_index = FamilyByHash(t, n);
        if (family_index < 0) continue;
        std::copy_backward(recent_, recent_ + kRecentFamilies - 1, recent_ + kRecentFamilies);
      }
      recent_[0] = family_index;
      families_[static_cast<size_t>(family_index)].members.emplace_back(n.value, static_cast<int>(t));
      src_member_[t].family = family_index;
    }
  }

  // A recently joined family that `spec` belongs to (moved to the front of the recent list), or -1.
  int MatchRecentFamily(const TensorSpec& spec, NumberComponent& n) {
    for (int k = 0; k < kRecentFamilies && recent_[k] >= 0; ++k) {
      const Family& candidate = families_[static_cast<size_t>(recent_[k])];
      if (MatchesFamily(source_.tensors[candidate.first], candidate.first_number, spec, n)) {
        const int family_index = recent_[k];
        std::copy_backward(recent_, recent_ + k, recent_ + k + 1);
        return family_index;
      }
    }
    return -1;
  }

  // Source tensor t's family by the hash of its name without its number (a new family when the
  // hash is new), or -1 when its name has no number or it collides with another family's key.
  int FamilyByHash(size_t t, NumberComponent& n) {
    const TensorSpec& spec = source_.tensors[t];
    n = FindNumber(spec.name);
    if (n.value < 0) return -1;
    const auto [it, inserted] =
        family_of_hash_.try_emplace(FamilyHash(spec.name, n, spec), static_cast<int>(families_.size()));
    if (inserted) {
      families_.emplace_back();
      families_.back().first = static_cast<int>(t);
      families_.back().first_number = n;
      families_.back().esize = DTypeSize(spec.dtype);
    } else if (!SameKey(source_.tensors[families_[it->second].first], families_[it->second].first_number, spec, n)) {
      return -1;
    }
    return it->second;
  }

  // Members in number order, each source tensor's position; a family with repeated numbers or
  // fewer than two members is broken (planned as it is).
  void SealFamilies() {
    for (Family& family : families_) {
      if (!std::is_sorted(family.members.begin(), family.members.end())) {
        std::sort(family.members.begin(), family.members.end());
      }
      for (size_t i = 1; i < family.members.size(); ++i) {
        family.broken |= family.members[i - 1].first == family.members[i].first;
      }
      family.broken |= family.members.size() < 2;
      for (size_t i = 0; i < family.members.size(); ++i) {
        src_member_[family.members[i].second].position = static_cast<int>(i);
      }
      family.destination.assign(family.members.size(), -1);
    }
  }

  // Members of broken families are planned as they are.
  void ForgetBroken(std::vector<Membership>& member) const {
    for (Membership& m : member) {
      if (m.family >= 0 && families_[m.family].broken) m = {};
    }
  }

  // Merges the side merged first, up front: a family is kept (planned as a stack) when its
  // fragments merged there. True when some fragments merged.
  bool MergeFirstSide(const std::vector<Membership>& member) {
    StackSide& side = FirstSide();
    const size_t n = first_.fragments.size();
    side.runs_.assign(size_t{1} << StackSide::kRunTableBits, {});
    side.last_run_of_stack_.assign(families_.size(), 0);
    side.stacks_.fragments.reserve(n);  // only what is written is touched
    side.folded_.resize(n);
    folded_ids_.reserve(n);
    partly_folded_.assign(first_.tensors.size(), 0);
    const FragmentTable& frags = first_.fragments;
    bool merged = false;
    for (size_t i = 0; i < n; ++i) {
      const int tensor = frags.Tensor(i);
      if (tensor < 0 || static_cast<size_t>(tensor) >= member.size()) continue;
      const Membership m = member[tensor];
      if (m.family < 0) continue;
      const FragmentView f = frags.View(i);
      if (f.ndim < 1 || f.ndim >= kMaxDims) {
        partly_folded_[static_cast<size_t>(f.tensor)] = 1;
        continue;
      }
      Family& family = families_[m.family];
      ++family.first_in;
      if (side.Merge(f, m.family, m.position, family.esize)) {
        ++family.first_out;
      } else {
        merged = true;
      }
      side.folded_[i] = 1;
      folded_ids_.emplace_back(m.family, static_cast<int>(i));
    }
    return merged;
  }

  // The destination's tensors join their families by name: most often the source tensor of the
  // same index has the name, and the destination tensor its membership; the others are looked up.
  void JoinDestination() {
    dst_member_.assign(destination_.tensors.size(), {});
    for (size_t t = 0; t < destination_.tensors.size(); ++t) {
      const TensorSpec& spec = destination_.tensors[t];
      if (t < source_.tensors.size()) {
        const TensorSpec& same = source_.tensors[t];
        if (same.name == spec.name && same.dtype == spec.dtype && same.shape == spec.shape) {
          if (src_member_[t].family >= 0) Join(t, src_member_[t].family, src_member_[t].position);
          continue;
        }
      }
      LookUpDestination(t, spec);
    }
  }

  void LookUpDestination(size_t t, const TensorSpec& spec) {
    const NumberComponent n = FindNumber(spec.name);
    if (n.value < 0 || spec.shape.empty()) return;
    const auto it = family_of_hash_.find(FamilyHash(spec.name, n, spec));
    if (it == family_of_hash_.end()) return;
    Family& family = families_[it->second];
    // Same hash, different key: not this family. If it differs only in shape or dtype the hash
    // would differ too, so this is a collision and the tensor simply stays unfolded.
    if (family.broken || !SameKey(source_.tensors[family.first], family.first_number, spec, n)) return;
    const auto at = std::lower_bound(family.members.begin(), family.members.end(), std::make_pair(n.value, -1));
    if (at == family.members.end() || at->first != n.value) {
      family.broken = true;  // no such source member: planning reports it
      return;
    }
    Join(t, it->second, static_cast<int>(at - family.members.begin()));
  }

  void Join(size_t t, int family_index, int position) {
    Family& family = families_[family_index];
    family.broken |= family.destination[static_cast<size_t>(position)] >= 0;  // the name twice
    family.destination[static_cast<size_t>(position)] = static_cast<int>(t);
    dst_member_[t] = {family_index, position};
  }

  // One stacked tensor per kept family (not broken, and merged on the side merged first).
  std::vector<TensorSpec> MakeStacks() {
    std::vector<TensorSpec> stacks;
    for (Family& family : families_) {
      if (family.broken || family.first_out >= family.first_in) continue;
      family.stack = static_cast<int>(stacks.size());
      const TensorSpec& spec = source_.tensors[family.first];
      TensorSpec stack;
      const std::string_view name = spec.name;
      // A control character keeps the stack's name apart from any real tensor's.
      stack.name = std::string(name.substr(0, family.first_number.begin)) + "*" +
                   std::string(name.substr(family.first_number.end)) + "\x1f" + std::to_string(family.stack);
      stack.shape.reserve(spec.shape.size() + 1);
      stack.shape.push_back(static_cast<int64_t>(family.members.size()));
      stack.shape.insert(stack.shape.end(), spec.shape.begin(), spec.shape.end());
      stack.dtype = spec.dtype;
      stacks.push_back(std::move(stack));
    }
    return stacks;
  }

  // The first side's fragments of families not kept (merged nothing there, or broken by the
  // destination) go back to being planned as they are; their stack fragments are dropped.
  void KeepFirstSideStacks() {
    StackSide& side = FirstSide();
    for (const auto& [family, id] : folded_ids_) {
      if (families_[family].stack < 0) side.folded_[static_cast<size_t>(id)] = 0;
    }
    size_t kept = 0;
    FragmentTable& fragments = side.stacks_.fragments;
    for (size_t k = 0; k < fragments.size(); ++k) {
      const int stack = families_[fragments.Tensor(k)].stack;
      if (stack < 0) continue;
      if (kept != k) fragments.CopyWithin(kept, k);
      fragments.SetTensor(kept++, stack);
    }
    fragments.Truncate(kept);
    side.runs_ = {};
    side.last_run_of_stack_ = {};
    const std::vector<Membership>& member = source_first_ ? src_member_ : dst_member_;
    side.whole_tensor_.assign(first_.tensors.size(), 0);
    for (size_t t = 0; t < first_.tensors.size(); ++t) {
      const Membership m = member[t];
      side.whole_tensor_[t] = m.family >= 0 && families_[m.family].stack >= 0 && !partly_folded_[t];
    }
  }

  // The second side is merged as the intersection reads it (StackSide::Divert): the kept
  // families' members, straight into their stacks.
  void PrepareSecondSide(size_t num_stacks) {
    StackSide& side = SecondSide();
    const std::vector<Membership>& member = source_first_ ? dst_member_ : src_member_;
    side.runs_.assign(size_t{1} << StackSide::kRunTableBits, {});
    side.last_run_of_stack_.assign(num_stacks, 0);
    side.stacks_.fragments.reserve(second_.fragments.size());
    side.member_of_tensor_.assign(second_.tensors.size(), {});
    for (size_t t = 0; t < second_.tensors.size(); ++t) {
      const Membership m = member[t];
      if (m.family < 0 || families_[m.family].stack < 0) continue;
      const Family& family = families_[m.family];
      side.member_of_tensor_[t] = {family.stack, m.position, static_cast<int>(family.esize)};
    }
  }

  static constexpr int kRecentFamilies = 4;

  const Layout& source_;
  const Layout& destination_;
  StackFold& out_;
  const bool source_first_;
  const Layout& first_;   // the side merged up front (the one with fewer fragments)
  const Layout& second_;  // the side merged during the intersection's pass
  std::vector<Family> families_;
  std::unordered_map<uint64_t, int> family_of_hash_;
  int recent_[kRecentFamilies] = {-1, -1, -1, -1};  // most recently joined first
  std::vector<Membership> src_member_, dst_member_;
  std::vector<std::pair<int, int>> folded_ids_;  // (family, fragment id) merged up front
  // By tensor of the side merged first: 1 when a fragment of the member could not be folded.
  std::vector<uint8_t> partly_folded_;
};

bool FoldTensorStacks(const Layout& source, const Layout& destination, StackFold& out) {
  return StackFolder(source, destination, out).Fold();
}

}  // namespace ferry
