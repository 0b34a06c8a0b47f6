// FragmentTable: building Fragment values from the compact records and writing them back.
#include "core/layout/fragment_table.h"

namespace ferry {

const Fragment FragmentTable::operator[](size_t i) const {
  const Record& r = records_[i];
  Fragment f;
  f.tensor = r.tensor;
  f.box.ndim = r.ndim;
  f.loc.rank = r.rank;
  f.loc.buffer = r.buffer;
  f.loc.byte_offset = r.byte_offset;
  const int n = Count(r.ndim);
  const int64_t* v = ValuesOf(r);
  for (int d = 0; d < n; ++d) {
    f.box.lo[d] = v[d];
    f.box.hi[d] = v[n + d];
    f.loc.strides[d] = v[2 * n + d];
  }
  return f;
}

std::vector<Fragment> FragmentTable::ToVector() const {
  std::vector<Fragment> out;
  out.reserve(size());
  for (size_t i = 0; i < size(); ++i) out.push_back((*this)[i]);
  return out;
}

void FragmentTable::Write(Record& r, const Fragment& f, bool in_place) {
  const int n = Count(f.box.ndim);
  // Pooled values are rewritten in place when the old ones have room, else appended.
  const bool reuse = in_place && !Inline(r.ndim) && Count(r.ndim) >= n;
  r.tensor = f.tensor;
  r.rank = f.loc.rank;
  r.buffer = f.loc.buffer;
  r.ndim = f.box.ndim;
  r.byte_offset = f.loc.byte_offset;
  if (!reuse) PlaceValues(r);
  int64_t* v = MutableValuesOf(r);
  for (int d = 0; d < n; ++d) {
    v[d] = f.box.lo[d];
    v[n + d] = f.box.hi[d];
    v[2 * n + d] = f.loc.strides[d];
  }
}

void FragmentTable::push_back(const Fragment& f) { Write(records_.emplace_back(), f, false); }

void FragmentTable::Set(size_t i, const Fragment& f) { Write(records_[i], f, /*in_place=*/true); }

void FragmentTable::Assign(const std::vector<Fragment>& fragments) {
  clear();
  records_.reserve(fragments.size());
  for (const Fragment& f : fragments) push_back(f);
}

void FragmentTable::Truncate(size_t n) {
  if (n >= size()) return;
  records_.resize(n);
  // The dropped fragments' pooled values stay (a Set may have moved a kept fragment's values past
  // them) until the table is cleared.
  if (n == 0) pool_.clear();
}

void FragmentTable::Erase(size_t i) {
  records_.erase(records_.begin() + static_cast<std::ptrdiff_t>(i));
}

Box FragmentTable::BoxOf(size_t i) const {
  const Record& r = records_[i];
  Box b;
  b.ndim = r.ndim;
  const int n = Count(r.ndim);
  const int64_t* v = ValuesOf(r);
  for (int d = 0; d < n; ++d) {
    b.lo[d] = v[d];
    b.hi[d] = v[n + d];
  }
  return b;
}

int64_t FragmentTable::Volume(size_t i) const {
  const Record& r = records_[i];
  if (r.ndim <= 0) return 0;
  const int n = Count(r.ndim);
  const int64_t* v = ValuesOf(r);
  return BoxVolume(n, v, v + n);
}

bool FragmentTable::SameBox(size_t i, size_t j) const {
  const Record& a = records_[i];
  const Record& b = records_[j];
  if (a.ndim != b.ndim) return false;
  const int n = Count(a.ndim);
  const int64_t* x = ValuesOf(a);
  const int64_t* y = ValuesOf(b);
  return std::equal(x, x + 2 * n, y);
}

}  // namespace ferry
