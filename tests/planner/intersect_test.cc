// Fragment intersection tests: IntersectLayouts must describe exactly what the layouts say. Every
// destination fragment of a non-empty box is in the one group of its (tensor, box), groups and
// their fragments in order; a group's pieces lie inside its box, are disjoint and cover it; a
// piece's holders are source fragments of the tensor whose boxes contain it, each once;
// the fragment ranks are the layouts'. Checked on the real framework layouts of scaled-down model
// presets and on thousands of random layout pairs (uneven splits, replicas on both sides,
// overlapping and empty source boxes, 1-5 dims, dims beyond 2^32, shuffled fragment order,
// repeated and reordered tensor names, and broken inputs, which must fail with an error).
#include "planner/intersect.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/layout/layout.h"
#include "tools/models/framework_layouts.h"
#include "tools/models/presets.h"

namespace ferry {
namespace {

// Puts the fragments in a random order.
void Shuffle(FragmentTable& fragments, std::mt19937_64& rng) {
  std::vector<Fragment> shuffled = fragments.ToVector();
  std::shuffle(shuffled.begin(), shuffled.end(), rng);
  fragments.Assign(shuffled);
}

// Empty when `a` and `b` are identical, else the first difference. Pieces compare by the boxes
// they cover.
std::string Difference(const Intersection& a, const Intersection& b) {
  auto same_box = [](const Box& x, const Box& y) {
    return x.ndim == y.ndim && x.lo == y.lo && x.hi == y.hi;
  };
  if (a.groups.size() != b.groups.size()) {
    return "groups: " + std::to_string(a.groups.size()) + " vs " + std::to_string(b.groups.size());
  }
  for (size_t i = 0; i < a.groups.size(); ++i) {
    const FragmentGroup& x = a.groups[i];
    const FragmentGroup& y = b.groups[i];
    if (x.dst_tensor != y.dst_tensor || x.src_tensor != y.src_tensor || !same_box(*x.box, *y.box) ||
        x.frags_begin != y.frags_begin || x.frags_end != y.frags_end) {
      return "group " + std::to_string(i);
    }
  }
  if (a.group_frags != b.group_frags) return "group_frags";
  if (a.pieces.size() != b.pieces.size()) {
    return "pieces: " + std::to_string(a.pieces.size()) + " vs " + std::to_string(b.pieces.size());
  }
  for (size_t i = 0; i < a.pieces.size(); ++i) {
    const Piece& x = a.pieces[i];
    const Piece& y = b.pieces[i];
    if (x.group != y.group || !same_box(a.BoxOf(x), b.BoxOf(y)) ||
        a.VolumeOf(x) != a.BoxOf(x).Volume() || x.holders_begin != y.holders_begin ||
        x.holders_end != y.holders_end) {
      return "piece " + std::to_string(i);
    }
  }
  if (a.holders != b.holders) return "holders";
  return "";
}

// Empty when `inter` describes the layouts exactly (see the top of the file), else the first
// fault found.
std::string Fault(const Layout& source, const Layout& destination, const Intersection& inter) {
  if (inter.source_ranks.size() != source.fragments.size() ||
      inter.destination_ranks.size() != destination.fragments.size()) {
    return "fragment rank lists of the wrong size";
  }
  for (size_t f = 0; f < source.fragments.size(); ++f) {
    if (inter.source_ranks[f] != source.fragments.Rank(f)) {
      return "rank of source fragment " + std::to_string(f);
    }
  }
  for (size_t f = 0; f < destination.fragments.size(); ++f) {
    if (inter.destination_ranks[f] != destination.fragments.Rank(f)) {
      return "rank of destination fragment " + std::to_string(f);
    }
  }
  // Every destination fragment of a non-empty box, once, in its (tensor, box) group.
  std::vector<int> group_of(destination.fragments.size(), -1);
  for (size_t gi = 0; gi < inter.groups.size(); ++gi) {
    const FragmentGroup& g = inter.groups[gi];
    const std::string what = "group " + std::to_string(gi);
    if (g.volume != g.box->Volume() || g.volume == 0) return what + ": volume";
    if (source.tensors[g.src_tensor].name != destination.tensors[g.dst_tensor].name) {
      return what + ": source tensor";
    }
    if (gi > 0) {
      const FragmentGroup& prev = inter.groups[gi - 1];
      if (std::make_pair(prev.dst_tensor, *prev.box) >= std::make_pair(g.dst_tensor, *g.box)) {
        return what + ": out of order";
      }
    }
    for (int i = g.frags_begin; i < g.frags_end; ++i) {
      const int f = inter.group_frags[i];
      const Fragment frag = destination.fragments[f];
      if (frag.tensor != g.dst_tensor || frag.box != *g.box) return what + ": a stranger";
      if (group_of[f] >= 0) return what + ": fragment " + std::to_string(f) + " twice";
      group_of[f] = static_cast<int>(gi);
      if (i > g.frags_begin) {
        const int e = inter.group_frags[i - 1];
        if (std::make_pair(destination.fragments.Rank(e), e) >
            std::make_pair(frag.loc.rank, f)) {
          return what + ": fragments out of order";
        }
      }
    }
  }
  for (size_t f = 0; f < destination.fragments.size(); ++f) {
    if (group_of[f] < 0 && destination.fragments.Volume(f) > 0) {
      return "destination fragment " + std::to_string(f) + " in no group";
    }
  }
  // Pieces: inside their group, disjoint, covering it.
  std::vector<int64_t> covered(inter.groups.size(), 0);
  for (size_t pi = 0; pi < inter.pieces.size(); ++pi) {
    const Piece& p = inter.pieces[pi];
    const FragmentGroup& g = inter.groups[p.group];
    const Box box = inter.BoxOf(p);
    const std::string what = "piece " + std::to_string(pi);
    if (pi > 0 && inter.pieces[pi - 1].group > p.group) return what + ": out of order";
    if (inter.VolumeOf(p) != box.Volume() || box.Volume() == 0) return what + ": volume";
    if (!g.box->Contains(box)) return what + ": outside its group";
    for (size_t qi = pi + 1; qi < inter.pieces.size() && inter.pieces[qi].group == p.group; ++qi) {
      if (inter.BoxOf(inter.pieces[qi]).Intersects(box)) return what + ": overlaps another";
    }
    covered[p.group] += box.Volume();
    // Holders: source fragments of the tensor whose boxes contain the piece, each once.
    if (p.holders_end <= p.holders_begin) return what + ": no holder";
    std::vector<int> holders(inter.holders.begin() + p.holders_begin,
                             inter.holders.begin() + p.holders_end);
    for (int h : holders) {
      if (source.fragments.Tensor(h) != g.src_tensor || !source.fragments.BoxOf(h).Contains(box)) {
        return what + ": holder " + std::to_string(h) + " does not hold it";
      }
    }
    std::sort(holders.begin(), holders.end());
    if (std::adjacent_find(holders.begin(), holders.end()) != holders.end()) {
      return what + ": a holder twice";
    }
  }
  for (size_t gi = 0; gi < inter.groups.size(); ++gi) {
    if (covered[gi] != inter.groups[gi].volume) return "group " + std::to_string(gi) + " not covered";
  }
  return "";
}

// Intersects the layouts and checks the result (Fault) or, for a failure, that it says why.
// `ok` counts the cases that succeeded.
void ExpectExact(const Layout& source, const Layout& destination, const std::string& what,
                 int* ok = nullptr) {
  Result<Intersection> inter = IntersectLayouts(source, destination);
  if (!inter.ok()) {
    EXPECT_EQ(inter.status().code(), StatusCode::kInvalidArgument) << what;
    EXPECT_FALSE(inter.status().message().empty()) << what;
    return;
  }
  EXPECT_EQ(Fault(source, destination, *inter), "") << what;
  if (ok != nullptr) ++*ok;
}

TEST(IntersectPresets, FrameworkLayoutsAreDescribedExactly) {
  struct Case {
    const char* model;
    const char* scale;
    const char* src;
    const char* dst;
  };
  const Case cases[] = {
      {"llama-3.1-8b", "1/16", "megatron:tp=2,pp=2", "vllm:tp=4,dp=2"},
      {"llama-3.1-8b", "1/16", "megatron:tp=4,pp=1", "vllm:tp=1,dp=3"},
      {"llama-3.1-8b", "1/16", "megatron:tp=1,pp=4,dp=2", "vllm:tp=8,dp=1"},
      {"qwen3-30b-a3b", "1/16", "megatron:tp=2,ep=2", "vllm:tp=2,dp=2"},
      {"qwen3-30b-a3b", "1/16", "megatron:tp=2,pp=2,ep=4", "vllm:tp=4,dp=2,ep=8"},
      {"qwen3-30b-a3b", "1/16", "megatron:pp=4,ep=8", "vllm:tp=2,dp=4,ep=1"},
      {"deepseek-v3", "1/64", "megatron:pp=4,ep=4,first=16,last=15", "vllm:tp=4,dp=2,ep=8"},
      {"deepseek-v3", "1/64", "megatron:tp=2,pp=2,first=31,ep=8", "vllm:tp=8,dp=1,ep=1"},
      {"deepseek-v3", "1/64", "megatron:pp=2,first=31,ep=16", "vllm:tp=16,dp=2,ep=32"},
      {"nemotron-h-8b", "1/16", "megatron:tp=2,pp=2", "vllm:tp=4,dp=2"},
  };
  for (const Case& c : cases) {
    const std::string what = std::string(c.model) + " " + c.src + " -> " + c.dst;
    Result<double> scale = models::ParseScale(c.scale);
    ASSERT_TRUE(scale.ok());
    Result<models::ModelPreset> preset = models::MakePreset(c.model, *scale);
    ASSERT_TRUE(preset.ok()) << what << ": " << preset.status().ToString();
    Result<models::RefitLayouts> refit =
        models::BuildRefitLayouts(*preset, models::ParseFrameworkSpec(c.src).value(),
                                  models::ParseFrameworkSpec(c.dst).value());
    ASSERT_TRUE(refit.ok()) << what << ": " << refit.status().ToString();
    int ok = 0;
    ExpectExact(refit->source, refit->destination, what, &ok);
    EXPECT_EQ(ok, 1) << what;
    // Both directions: vLLM -> Megatron too.
    ExpectExact(refit->destination, refit->source, what + " (reversed)", &ok);
    EXPECT_EQ(ok, 2) << what;
  }
}

int Uniform(std::mt19937_64& rng, int lo, int hi) {
  return std::uniform_int_distribution<int>(lo, hi)(rng);
}

// Sorted cut points splitting [0, extent) into `parts` uneven (possibly empty) intervals.
std::vector<int64_t> Cuts(std::mt19937_64& rng, int64_t extent, int parts) {
  std::vector<int64_t> cuts = {0, extent};
  for (int i = 1; i < parts; ++i) {
    cuts.push_back(std::uniform_int_distribution<int64_t>(0, extent)(rng));
  }
  std::sort(cuts.begin(), cuts.end());
  return cuts;
}

// Appends a grid sharding of `t` (uneven splits per dim) held by `replicas` sets of ranks.
void AddGrid(std::mt19937_64& rng, Layout& layout, int t, int replicas) {
  const std::vector<int64_t>& shape = layout.tensors[t].shape;
  const int ndim = static_cast<int>(shape.size());
  std::vector<std::vector<int64_t>> cuts(ndim);
  for (int d = 0; d < ndim; ++d) cuts[d] = Cuts(rng, shape[d], Uniform(rng, 1, 3));
  std::vector<Box> boxes(1);
  boxes[0].ndim = ndim;
  for (int d = 0; d < ndim; ++d) {
    std::vector<Box> next;
    for (const Box& b : boxes) {
      for (size_t k = 0; k + 1 < cuts[d].size(); ++k) {
        Box c = b;
        c.lo[d] = cuts[d][k];
        c.hi[d] = cuts[d][k + 1];
        next.push_back(c);
      }
    }
    boxes = std::move(next);
  }
  for (int r = 0; r < replicas; ++r) {
    for (const Box& b : boxes) {
      Fragment f;
      f.tensor = t;
      f.box = b;
      f.loc.rank = Uniform(rng, 0, 15);
      layout.fragments.push_back(f);
    }
  }
}

// A random box inside `shape` (possibly empty).
Box RandomBox(std::mt19937_64& rng, const std::vector<int64_t>& shape) {
  Box b;
  b.ndim = static_cast<int>(shape.size());
  for (int d = 0; d < b.ndim; ++d) {
    std::vector<int64_t> c = Cuts(rng, shape[d], 2);
    b.lo[d] = c[1] == shape[d] && Uniform(rng, 0, 1) ? c[0] : c[1] / 2;
    b.hi[d] = std::max(b.lo[d], c[1]);
  }
  return b;
}

struct RandomPair {
  Layout source, destination;
};

RandomPair MakeRandomPair(std::mt19937_64& rng) {
  RandomPair p;
  const DType dtypes[] = {DType::kBF16, DType::kFP32};
  const int num_tensors = Uniform(rng, 1, 4);
  std::vector<TensorSpec> tensors;
  for (int i = 0; i < num_tensors; ++i) {
    TensorSpec t;
    t.name = "layers." + std::to_string(i) + ".weight";
    const int ndim = Uniform(rng, 1, 5);
    for (int d = 0; d < ndim; ++d) t.shape.push_back(Uniform(rng, 1, ndim <= 2 ? 9 : 4));
    const int kind = Uniform(rng, 0, 19);
    if (kind == 0) t.shape[Uniform(rng, 0, ndim - 1)] = 0;                   // no elements
    if (kind == 1) t.shape[Uniform(rng, 0, ndim - 1)] = (int64_t{1} << 32) + 5;  // beyond 2^32
    if (kind == 2) t.shape[Uniform(rng, 0, ndim - 1)] = 0xffffffff;          // the largest compact
    t.dtype = dtypes[Uniform(rng, 0, 1)];
    tensors.push_back(t);
  }
  // Through AddTensor (the layout's name index knows the names are distinct) or appended.
  for (Layout* l : {&p.source, &p.destination}) {
    if (Uniform(rng, 0, 1)) {
      for (const TensorSpec& t : tensors) EXPECT_TRUE(l->AddTensor(t).ok());
    } else {
      l->tensors = tensors;
    }
  }
  // Destination tensors in another order (found by name), or a source name repeated.
  if (Uniform(rng, 0, 3) == 0) std::shuffle(p.destination.tensors.begin(), p.destination.tensors.end(), rng);
  if (Uniform(rng, 0, 9) == 0) p.source.tensors.push_back(p.source.tensors[0]);
  if (Uniform(rng, 0, 9) == 0) {
    p.source.tensors.insert(p.source.tensors.begin(), p.source.tensors[Uniform(rng, 0, num_tensors - 1)]);
  }
  if (Uniform(rng, 0, 9) == 0) p.destination.tensors.push_back(p.destination.tensors[0]);
  // Source: one to three shardings with replicas, sometimes extra overlapping or empty boxes.
  for (int t = 0; t < static_cast<int>(p.source.tensors.size()); ++t) {
    const int shardings = Uniform(rng, 1, 3);
    for (int s = 0; s < shardings; ++s) AddGrid(rng, p.source, t, Uniform(rng, 1, 3));
    for (int extra = Uniform(rng, 0, 3) - 1; extra > 0; --extra) {
      Fragment f;
      f.tensor = t;
      f.box = RandomBox(rng, p.source.tensors[t].shape);
      f.loc.rank = Uniform(rng, 0, 15);
      p.source.fragments.push_back(f);
    }
    // Sometimes the whole tensor (replicated), the planner's common case.
    if (Uniform(rng, 0, 3) == 0) {
      std::vector<Fragment> kept = p.source.fragments.ToVector();
      kept.erase(std::remove_if(kept.begin(), kept.end(),
                                [&](const Fragment& f) { return f.tensor == t; }),
                 kept.end());
      p.source.fragments.Assign(kept);
      for (int r = Uniform(rng, 1, 3); r > 0; --r) {
        Fragment f;
        f.tensor = t;
        f.box = Box::FromShape(p.source.tensors[t].shape);
        f.loc.rank = Uniform(rng, 0, 15);
        p.source.fragments.push_back(f);
      }
    }
  }
  for (int t = 0; t < static_cast<int>(p.destination.tensors.size()); ++t) {
    AddGrid(rng, p.destination, t, Uniform(rng, 1, 4));
    if (Uniform(rng, 0, 4) == 0) {
      Fragment f;
      f.tensor = t;
      f.box = RandomBox(rng, p.destination.tensors[t].shape);
      f.loc.rank = Uniform(rng, 0, 15);
      p.destination.fragments.push_back(f);
    }
  }
  // Fragment order: by tensor (as built), shuffled, or by rank.
  for (Layout* l : {&p.source, &p.destination}) {
    const int order = Uniform(rng, 0, 2);
    if (order == 1) Shuffle(l->fragments, rng);
    if (order == 2) {
      std::vector<Fragment> fragments = l->fragments.ToVector();
      std::stable_sort(
          fragments.begin(), fragments.end(),
          [](const Fragment& a, const Fragment& b) { return a.loc.rank < b.loc.rank; });
      l->fragments.Assign(fragments);
    }
  }
  // Broken inputs.
  switch (Uniform(rng, 0, 19)) {
    case 0:  // a source fragment lost: destination regions uncovered
      if (!p.source.fragments.empty()) {
        p.source.fragments.Erase(Uniform(rng, 0, static_cast<int>(p.source.fragments.size()) - 1));
      }
      break;
    case 1:  // a destination tensor missing in the source
      p.destination.tensors.back().name = "missing.weight";
      break;
    case 2: {  // shape or dtype mismatch
      TensorSpec& t = p.destination.tensors[Uniform(rng, 0, static_cast<int>(p.destination.tensors.size()) - 1)];
      if (Uniform(rng, 0, 1)) {
        t.dtype = t.dtype == DType::kBF16 ? DType::kFP32 : DType::kBF16;
      } else {
        t.shape.push_back(2);
      }
      break;
    }
    case 3:
    case 4: {  // a box outside its tensor (on either side)
      Layout& l = Uniform(rng, 0, 1) ? p.source : p.destination;
      if (l.fragments.empty()) break;
      l.fragments.Edit(Uniform(rng, 0, static_cast<int>(l.fragments.size()) - 1), [&](Fragment& f) {
        const int d = Uniform(rng, 0, f.box.ndim - 1);
        switch (Uniform(rng, 0, 4)) {
          case 0:
            f.box.lo[d] = -1;
            break;
          case 1:
            f.box.hi[d] = l.tensors[f.tensor].shape[d] + 1;
            break;
          case 2:
            f.box.lo[d] = f.box.hi[d] + 1;
            break;
          case 3:
            f.box.ndim = f.box.ndim == 1 ? 2 : f.box.ndim - 1;
            break;
          default:
            f.box.hi[d] = -1;
            break;
        }
      });
      break;
    }
    case 5:  // the source sharding with a hole: a source box shrunk
      for (size_t i = 0; i < p.source.fragments.size(); ++i) {
        if (p.source.fragments.Hi(i)[0] > p.source.fragments.Lo(i)[0]) {
          --p.source.fragments.MutableHi(i)[0];
          break;
        }
      }
      break;
    default:
      break;
  }
  return p;
}

TEST(IntersectProperty, RandomLayoutsAreDescribedExactly) {
  std::mt19937_64 rng(20261129);
  int ok = 0;
  const int cases = 20000;
  for (int i = 0; i < cases; ++i) {
    RandomPair p = MakeRandomPair(rng);
    ExpectExact(p.source, p.destination, "case " + std::to_string(i), &ok);
    if (HasFatalFailure() || HasFailure()) return;
  }
  // Both outcomes are exercised.
  EXPECT_GT(ok, cases / 3);
  EXPECT_LT(ok, cases - cases / 10);
}

// A tensor stack that the source holds one whole member per fragment (a trainer with a buffer per
// expert: the intersection's member-by-member path), sometimes with replicas or a member missing,
// against random destination grids.
TEST(IntersectProperty, StacksHeldMemberByMemberAreDescribedExactly) {
  std::mt19937_64 rng(20261130);
  int ok = 0;
  const int cases = 3000;
  for (int i = 0; i < cases; ++i) {
    Layout source, destination;
    TensorSpec t;
    t.name = "layers.0.experts.[0:8].w";
    const int ndim = Uniform(rng, 2, 4);
    t.shape.push_back(Uniform(rng, 2, 8));
    for (int d = 1; d < ndim; ++d) t.shape.push_back(Uniform(rng, 1, 5));
    t.shape[0] = std::min<int64_t>(t.shape[0], 8);
    t.name = "layers.0.experts.[0:" + std::to_string(t.shape[0]) + "].w";
    source.tensors = {t};
    destination.tensors = {t};
    const int missing =
        Uniform(rng, 0, 9) == 0 ? Uniform(rng, 0, static_cast<int>(t.shape[0]) - 1) : -1;
    for (int64_t e = 0; e < t.shape[0]; ++e) {
      if (e == missing) continue;
      for (int r = Uniform(rng, 0, 3) == 0 ? 2 : 1; r > 0; --r) {
        Fragment f;
        f.box = Box::FromShape(t.shape);
        f.box.lo[0] = e;
        f.box.hi[0] = e + 1;
        f.loc.rank = Uniform(rng, 0, 15);
        source.fragments.push_back(f);
      }
    }
    if (Uniform(rng, 0, 1)) Shuffle(source.fragments, rng);
    AddGrid(rng, destination, 0, Uniform(rng, 1, 4));
    ExpectExact(source, destination, "case " + std::to_string(i), &ok);
    if (HasFatalFailure() || HasFailure()) return;
  }
  EXPECT_GT(ok, cases / 2);           // most cover every member
  EXPECT_LT(ok, cases - cases / 20);  // and some miss one
}

// A stack the source holds member by member, cut into one piece per member: the pieces are member
// cuts that store no box (Piece::box), their boxes and volumes read back as the group's cut at the
// member, and a group of a single member keeps the group's box.
TEST(Intersect, MemberCutsStoreNoBoxes) {
  const TensorSpec stack{"layers.0.experts.[0:4].w", {4, 2, 3}, DType::kBF16};
  Layout source, destination;
  const int s = source.AddTensor(stack).value();
  for (int e = 0; e < 4; ++e) {
    source.PlaceFragment(s, *Box::Make({e, 0, 0}, {e + 1, 2, 3}), e % 2, "fc1." + std::to_string(e),
                         0, {6, 3, 1});
  }
  const int d = destination.AddTensor(stack).value();
  // Rank 2 holds experts 0-2, column 0-1; rank 3 expert 3 whole.
  destination.PlaceFragment(d, *Box::Make({0, 0, 0}, {3, 2, 2}), 2, "w", 0, {4, 2, 1});
  destination.PlaceFragment(d, *Box::Make({3, 0, 0}, {4, 2, 3}), 3, "w", 0, {6, 3, 1});
  Result<Intersection> r = IntersectLayouts(source, destination);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const Intersection& inter = *r;
  ASSERT_EQ(inter.groups.size(), 2u);
  ASSERT_EQ(inter.pieces.size(), 4u);
  EXPECT_TRUE(inter.piece_boxes.empty());
  for (int e = 0; e < 3; ++e) {
    const Piece& p = inter.pieces[static_cast<size_t>(e)];
    EXPECT_EQ(p.group, 0);
    EXPECT_EQ(Intersection::MemberOf(p), e);
    EXPECT_EQ(inter.StoredBoxOf(p), nullptr);
    EXPECT_EQ(inter.BoxOf(p), *Box::Make({e, 0, 0}, {e + 1, 2, 2}));
    EXPECT_EQ(inter.VolumeOf(p), 4);
    ASSERT_EQ(p.holders_end - p.holders_begin, 1);
    EXPECT_EQ(
        source.fragments[static_cast<size_t>(inter.holders[static_cast<size_t>(p.holders_begin)])]
            .box.lo[0],
        e);
  }
  const Piece& whole = inter.pieces[3];
  EXPECT_EQ(whole.group, 1);
  EXPECT_EQ(Intersection::MemberOf(whole), -1);
  EXPECT_EQ(inter.StoredBoxOf(whole), inter.groups[1].box);
  EXPECT_EQ(inter.VolumeOf(whole), 6);
}

// Member cuts past Intersection::kMaxMemberCut store their boxes, as other pieces do.
TEST(Intersect, MemberCutsPastTheLimitStoreTheirBoxes) {
  const int64_t members = Intersection::kMaxMemberCut + 3;
  const TensorSpec stack{
      "experts.[0:" + std::to_string(members) + "].w", {members, 2}, DType::kBF16};
  Layout source, destination;
  const int s = source.AddTensor(stack).value();
  for (int64_t e = 0; e < members; ++e) {
    source.PlaceFragment(s, *Box::Make({e, 0}, {e + 1, 2}), 0, "w." + std::to_string(e), 0, {2, 1});
  }
  const int d = destination.AddTensor(stack).value();
  destination.AppendFragment(d, Box::FromShape(stack.shape), 1, "w");
  Result<Intersection> r = IntersectLayouts(source, destination);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->pieces.size(), static_cast<size_t>(members));
  EXPECT_EQ(r->piece_boxes.size(), 2u);  // members kMaxMemberCut + 1 and + 2
  for (int64_t e : {int64_t{0}, Intersection::kMaxMemberCut, members - 1}) {
    const Piece& p = r->pieces[static_cast<size_t>(e)];
    EXPECT_EQ(Intersection::MemberOf(p), e <= Intersection::kMaxMemberCut ? e : -1);
    EXPECT_EQ(r->BoxOf(p), *Box::Make({e, 0}, {e + 1, 2}));
    EXPECT_EQ(r->VolumeOf(p), 2);
  }
}

// BoxList keeps every box where it was first written: references taken early stay valid across
// blocks, values read back equal, and a moved list keeps them.
TEST(BoxListTest, BoxesStayPutAcrossBlocks) {
  BoxList list;
  EXPECT_TRUE(list.empty());
  std::vector<const Box*> where;
  for (int i = 0; i < 3000; ++i) {
    list.push_back(*Box::Make({i, 0}, {i + 1, i % 7 + 1}));
    where.push_back(&list[static_cast<size_t>(i)]);
  }
  ASSERT_EQ(list.size(), 3000u);
  for (int i = 0; i < 3000; ++i) {
    EXPECT_EQ(&list[static_cast<size_t>(i)], where[static_cast<size_t>(i)]);
    EXPECT_EQ(list[static_cast<size_t>(i)], *Box::Make({i, 0}, {i + 1, i % 7 + 1}));
  }
  BoxList moved = std::move(list);
  EXPECT_EQ(moved.size(), 3000u);
  EXPECT_EQ(&moved[2999], where[2999]);
}

// Takes the fragments marked in a mask, as stack folding's diverters do.
class MaskDiverter final : public FragmentDiverter {
 public:
  explicit MaskDiverter(std::vector<uint8_t> take) : take_(std::move(take)) {}
  bool Divert(const FragmentTable&, size_t id) override { return take_[id] != 0; }

 private:
  std::vector<uint8_t> take_;
};

// `layout` without the fragments marked in `take`; `kept` gets the original id of each kept one.
Layout Without(const Layout& layout, const std::vector<uint8_t>& take, std::vector<int>& kept) {
  Layout out = layout;
  out.fragments.clear();
  kept.clear();
  for (size_t i = 0; i < layout.fragments.size(); ++i) {
    if (take[i]) continue;
    out.fragments.push_back(layout.fragments[i]);
    kept.push_back(static_cast<int>(i));
  }
  return out;
}

// Diverting fragments gives the intersection of the layouts without them, under the original
// fragment ids; the diverted fragments' ranks read -1.
TEST(IntersectProperty, DivertedFragmentsAreLeftOut) {
  std::mt19937_64 rng(4242);
  int compared = 0;
  for (int i = 0; i < 3000; ++i) {
    RandomPair p = MakeRandomPair(rng);
    std::vector<uint8_t> take_src(p.source.fragments.size()), take_dst(p.destination.fragments.size());
    for (auto& t : take_src) t = std::uniform_int_distribution<int>(0, 5)(rng) == 0;
    for (auto& t : take_dst) t = std::uniform_int_distribution<int>(0, 2)(rng) == 0;
    std::vector<int> src_kept, dst_kept;
    const Layout source = Without(p.source, take_src, src_kept);
    const Layout destination = Without(p.destination, take_dst, dst_kept);
    MaskDiverter src_diverter(take_src), dst_diverter(take_dst);
    Result<Intersection> now =
        IntersectLayouts(p.source, p.destination, &src_diverter, &dst_diverter);
    Result<Intersection> expected = IntersectLayouts(source, destination);
    ASSERT_EQ(now.ok(), expected.ok()) << "case " << i << ": " << now.status().ToString() << " / "
                                       << expected.status().ToString();
    if (!now.ok()) continue;
    // Renumber the expected result's fragment ids to the originals.
    for (int& f : expected->group_frags) f = dst_kept[f];
    for (int& h : expected->holders) h = src_kept[h];
    ASSERT_EQ(Difference(*now, *expected), "") << "case " << i;
    for (size_t f = 0; f < take_dst.size(); ++f) {
      ASSERT_EQ(now->destination_ranks[f], take_dst[f] ? -1 : p.destination.fragments[f].loc.rank);
    }
    for (size_t f = 0; f < take_src.size(); ++f) {
      ASSERT_EQ(now->source_ranks[f], take_src[f] ? -1 : p.source.fragments[f].loc.rank);
    }
    ++compared;
  }
  EXPECT_GT(compared, 500);
}

// Takes every fragment of one tensor, or (partial) all but its last, and says it takes the tensor
// whole, as the side of stack folding merged during the pass does.
class TensorDiverter final : public FragmentDiverter {
 public:
  TensorDiverter(const Layout& layout, int tensor, bool partial) : tensor_(tensor) {
    for (size_t i = 0; i < layout.fragments.size(); ++i) {
      if (layout.fragments[i].tensor == tensor) last_ = i;
    }
    if (!partial) last_ = layout.fragments.size();
  }
  bool Divert(const FragmentTable& fragments, size_t id) override {
    return fragments.Tensor(id) == tensor_ && id != last_;
  }
  bool TakesWholeTensor(int tensor) const override { return tensor == tensor_; }

 private:
  int tensor_;
  size_t last_ = 0;
};

// A destination tensor taken whole is neither mapped nor checked against the source (its shape
// differs here, which is otherwise an error); one the diverter does not take whole after all fails
// the intersection instead of forming groups without a source.
TEST(Intersect, WholeTakenTensorsAreNotMapped) {
  Layout src, dst;
  for (const char* name : {"a", "b"}) {
    const int t = src.AddTensor({name, {8, 4}, DType::kFP32}).value();
    src.AppendFragment(t, Box::FromShape({8, 4}), 0, std::string("src.") + name);
  }
  const int a = dst.AddTensor({"a", {8, 4}, DType::kFP32}).value();
  const int b = dst.AddTensor({"b", {16, 4}, DType::kFP32}).value();
  for (int rank = 1; rank <= 2; ++rank) {
    dst.AppendFragment(a, Box::Make({(rank - 1) * 4, 0}, {rank * 4, 4}).value(), rank, "dst.a");
    dst.AppendFragment(b, Box::Make({(rank - 1) * 8, 0}, {rank * 8, 4}).value(), rank, "dst.b");
  }
  EXPECT_FALSE(IntersectLayouts(src, dst).ok());
  TensorDiverter whole(dst, b, /*partial=*/false);
  Result<Intersection> r = IntersectLayouts(src, dst, nullptr, &whole);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->groups.size(), 2u);
  for (const FragmentGroup& g : r->groups) {
    EXPECT_EQ(g.dst_tensor, a);
    EXPECT_EQ(g.src_tensor, 0);
  }
  EXPECT_EQ(r->pieces.size(), 2u);
  TensorDiverter partial(dst, b, /*partial=*/true);
  Result<Intersection> bad = IntersectLayouts(src, dst, nullptr, &partial);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().ToString().find("'b'"), std::string::npos) << bad.status().ToString();
}

// Larger random pairs: many tensors, replicas spread over the whole fragment list (the scratch
// buffers grow and shrink between calls).
TEST(IntersectProperty, ManyTensorsAreDescribedExactly) {
  std::mt19937_64 rng(99);
  for (int i = 0; i < 40; ++i) {
    RandomPair p;
    for (int part = 0; part < 30; ++part) {
      RandomPair q = MakeRandomPair(rng);
      if (!IntersectLayouts(q.source, q.destination).ok()) continue;
      auto append = [&](Layout& into, const Layout& from, const std::string& suffix) {
        const int base = static_cast<int>(into.tensors.size());
        for (TensorSpec t : from.tensors) {
          t.name += suffix;
          into.tensors.push_back(t);
        }
        for (Fragment f : from.fragments) {
          f.tensor += base;
          into.fragments.push_back(f);
        }
      };
      append(p.source, q.source, "#" + std::to_string(part));
      append(p.destination, q.destination, "#" + std::to_string(part));
    }
    if (i % 2 == 1) Shuffle(p.destination.fragments, rng);
    ExpectExact(p.source, p.destination, "big case " + std::to_string(i));
    if (HasFailure()) return;
  }
}

TEST(IntersectErrors, MessagesNameTheProblem) {
  Layout source, destination;
  source.tensors.push_back({"w", {4, 4}, DType::kBF16});
  destination.tensors.push_back({"w", {4, 4}, DType::kBF16});
  Fragment f;
  f.tensor = 0;
  f.box = Box::Make({0, 0}, {2, 4}).value();
  source.fragments.push_back(f);
  f.box = Box::FromShape({4, 4});
  f.loc.rank = 3;
  destination.fragments.push_back(f);
  Result<Intersection> r = IntersectLayouts(source, destination);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("is not fully covered"), std::string::npos)
      << r.status().ToString();
  source.fragments.Edit(0, [&](Fragment& frag) { frag.box = Box::Make({0, 0}, {4, 5}).value(); });
  r = IntersectLayouts(source, destination);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("outside the tensor's shape"), std::string::npos)
      << r.status().ToString();
}

}  // namespace
}  // namespace ferry
