// Tests for FragmentTable: fragments round-trip through the compact records (inline up to 3 dims,
// pooled beyond), in-place reads agree with the built Fragment values, and edits touch only the
// fragment edited.
#include "core/layout/fragment_table.h"

#include <gtest/gtest.h>

#include <type_traits>
#include <vector>

namespace ferry {
namespace {

// A fragment of `ndim` dims whose values all differ (so a mixed-up index shows).
Fragment Numbered(int ndim, int seed) {
  Fragment f;
  f.tensor = seed;
  f.box.ndim = ndim;
  f.loc.rank = seed + 1;
  f.loc.buffer = seed + 2;
  f.loc.byte_offset = 1000 * seed + 7;
  for (int d = 0; d < FragmentTable::Count(ndim); ++d) {
    f.box.lo[d] = 100 * seed + d;
    f.box.hi[d] = 100 * seed + d + 10 + d;
    f.loc.strides[d] = 10000 * seed + d + 1;
  }
  return f;
}

void ExpectSame(const Fragment& a, const Fragment& b) {
  EXPECT_EQ(a.tensor, b.tensor);
  EXPECT_EQ(a.box.ndim, b.box.ndim);
  EXPECT_EQ(a.box.lo, b.box.lo);
  EXPECT_EQ(a.box.hi, b.box.hi);
  EXPECT_EQ(a.loc.rank, b.loc.rank);
  EXPECT_EQ(a.loc.buffer, b.loc.buffer);
  EXPECT_EQ(a.loc.byte_offset, b.loc.byte_offset);
  EXPECT_EQ(a.loc.strides, b.loc.strides);
}

TEST(FragmentTable, FragmentsOfEveryRankRoundTrip) {
  FragmentTable table;
  std::vector<Fragment> added;
  for (int ndim = 1; ndim <= kMaxDims; ++ndim) {
    added.push_back(Numbered(ndim, ndim));
    table.push_back(added.back());
  }
  ASSERT_EQ(table.size(), added.size());
  for (size_t i = 0; i < added.size(); ++i) {
    SCOPED_TRACE(i);
    ExpectSame(table[i], added[i]);
    const int n = added[i].box.ndim;
    EXPECT_EQ(table.Tensor(i), added[i].tensor);
    EXPECT_EQ(table.Ndim(i), n);
    EXPECT_EQ(table.Rank(i), added[i].loc.rank);
    EXPECT_EQ(table.Buffer(i), added[i].loc.buffer);
    EXPECT_EQ(table.ByteOffset(i), added[i].loc.byte_offset);
    EXPECT_EQ(table.BoxOf(i), added[i].box);
    EXPECT_EQ(table.Volume(i), added[i].box.Volume());
    const FragmentView v = table.View(i);
    EXPECT_EQ(table.ValuesOf(i, n), v.lo);
    for (int d = 0; d < n; ++d) {
      EXPECT_EQ(table.Lo(i)[d], added[i].box.lo[d]);
      EXPECT_EQ(table.Hi(i)[d], added[i].box.hi[d]);
      EXPECT_EQ(table.Strides(i)[d], added[i].loc.strides[d]);
      EXPECT_EQ(v.lo[d], added[i].box.lo[d]);
      EXPECT_EQ(v.hi[d], added[i].box.hi[d]);
      EXPECT_EQ(v.strides[d], added[i].loc.strides[d]);
    }
  }
  std::vector<Fragment> iterated;
  for (const Fragment& f : table) iterated.push_back(f);
  ASSERT_EQ(iterated.size(), added.size());
  for (size_t i = 0; i < added.size(); ++i) ExpectSame(iterated[i], added[i]);
  ExpectSame(table.front(), added.front());
  ExpectSame(table.back(), added.back());
}

TEST(FragmentTable, ValuesPastNdimAreNotKept) {
  Fragment f = Numbered(2, 3);
  f.box.lo[5] = 99;  // past ndim: not part of the fragment
  f.loc.strides[4] = 98;
  FragmentTable table;
  table.push_back(f);
  EXPECT_EQ(table[0].box.lo[5], 0);
  EXPECT_EQ(table[0].loc.strides[4], 0);
}

TEST(FragmentTable, InvalidNdimIsKeptForTheValidator) {
  FragmentTable table;
  for (int ndim : {0, -1, kMaxDims + 1}) {
    Fragment f = Numbered(kMaxDims, 1);
    f.box.ndim = ndim;
    table.push_back(f);
  }
  EXPECT_EQ(table.Ndim(0), 0);
  EXPECT_EQ(table.Ndim(1), -1);
  EXPECT_EQ(table.Ndim(2), kMaxDims + 1);
  EXPECT_EQ(table.Volume(0), 0);
  EXPECT_EQ(table.Volume(1), 0);
  // kMaxDims + 1 dims keep kMaxDims values.
  EXPECT_EQ(table[2].box.hi[kMaxDims - 1], Numbered(kMaxDims, 1).box.hi[kMaxDims - 1]);
}

TEST(FragmentTable, ReadsAreConstCopies) {
  // table[i].box = ... would change a temporary: it must not compile.
  FragmentTable table;
  static_assert(std::is_const_v<decltype(table[0])>);
  static_assert(std::is_const_v<decltype(*table.begin())>);
}

TEST(FragmentTable, SetAndEditChangeOnlyTheirFragment) {
  FragmentTable table;
  const std::vector<Fragment> original = {Numbered(2, 1), Numbered(5, 2), Numbered(3, 3),
                                          Numbered(6, 4)};
  table.Assign(original);
  // Inline to pooled, pooled to smaller pooled (in place), pooled to inline, inline to inline.
  const std::vector<Fragment> replacement = {Numbered(7, 11), Numbered(4, 12), Numbered(1, 13),
                                             Numbered(3, 14)};
  for (size_t i = 0; i < replacement.size(); ++i) {
    table.Set(i, replacement[i]);
    for (size_t j = 0; j < original.size(); ++j) {
      SCOPED_TRACE(testing::Message() << "set " << i << ", read " << j);
      ExpectSame(table[j], j <= i ? replacement[j] : original[j]);
    }
  }
  table.Edit(1, [](Fragment& f) {
    f.loc.byte_offset = 5;
    f.box.hi[3] += 1;
  });
  EXPECT_EQ(table.ByteOffset(1), 5);
  EXPECT_EQ(table.Hi(1)[3], replacement[1].box.hi[3] + 1);
  ExpectSame(table[0], replacement[0]);
  ExpectSame(table[2], replacement[2]);
}

TEST(FragmentTable, InPlaceEditsAndAppend) {
  FragmentTable table;
  table.push_back(Numbered(2, 1));
  table.push_back(Numbered(5, 2));
  table.SetTensor(0, 40);
  table.SetByteOffset(1, 41);
  table.MutableLo(0)[1] = 42;
  table.MutableHi(1)[4] = 43;
  table.MutableStrides(1)[0] = 44;
  EXPECT_EQ(table[0].tensor, 40);
  EXPECT_EQ(table[1].loc.byte_offset, 41);
  EXPECT_EQ(table[0].box.lo[1], 42);
  EXPECT_EQ(table[1].box.hi[4], 43);
  EXPECT_EQ(table[1].loc.strides[0], 44);
  for (int ndim : {3, 4}) {
    int64_t* lo = table.Append(7, ndim, 8, 9, 10);
    for (int d = 0; d < 3 * ndim; ++d) lo[d] = d;
    const size_t i = table.size() - 1;
    const Fragment f = table[i];
    EXPECT_EQ(f.tensor, 7);
    EXPECT_EQ(f.box.ndim, ndim);
    EXPECT_EQ(f.loc.rank, 8);
    EXPECT_EQ(f.loc.buffer, 9);
    EXPECT_EQ(f.loc.byte_offset, 10);
    for (int d = 0; d < ndim; ++d) {
      EXPECT_EQ(f.box.lo[d], d);
      EXPECT_EQ(f.box.hi[d], ndim + d);
      EXPECT_EQ(f.loc.strides[d], 2 * ndim + d);
    }
  }
}

TEST(FragmentTable, EraseTruncateAndCopyWithin) {
  std::vector<Fragment> original;
  for (int i = 0; i < 6; ++i) original.push_back(Numbered(i % 2 == 0 ? 2 : 5, i));
  FragmentTable table(original);
  table.Erase(1);
  ASSERT_EQ(table.size(), 5u);
  ExpectSame(table[0], original[0]);
  ExpectSame(table[1], original[2]);
  ExpectSame(table[4], original[5]);
  table.CopyWithin(1, 4);  // fragment 1 becomes a copy of the (pooled) fragment 4
  ExpectSame(table[1], original[5]);
  table.Truncate(2);
  ASSERT_EQ(table.size(), 2u);
  ExpectSame(table[1], original[5]);
  table.pop_back();
  ASSERT_EQ(table.size(), 1u);
  ExpectSame(table[0], original[0]);
  const std::vector<Fragment> all = table.ToVector();
  ASSERT_EQ(all.size(), 1u);
  ExpectSame(all[0], original[0]);
  table.clear();
  EXPECT_TRUE(table.empty());
}

TEST(FragmentTable, SameBoxComparesBoxesOnly) {
  FragmentTable table;
  Fragment a = Numbered(2, 1);
  Fragment b = a;
  b.loc.rank = 9;
  b.loc.strides[0] = 3;
  Fragment c = a;
  c.box.hi[1] += 1;
  Fragment d = a;
  d.box.ndim = 1;
  table.Assign({a, b, c, d});
  EXPECT_TRUE(table.SameBox(0, 1));
  EXPECT_FALSE(table.SameBox(0, 2));
  EXPECT_FALSE(table.SameBox(0, 3));
}

}  // namespace
}  // namespace ferry
