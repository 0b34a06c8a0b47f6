// Box geometry.
#include "core/layout/box.h"

#include <algorithm>

#include "core/base/checked_math.h"

namespace ferry {

Box Box::FromShape(const std::vector<int64_t>& shape) {
  Box b;
  b.ndim = static_cast<int>(shape.size());
  for (int d = 0; d < b.ndim; ++d) b.hi[d] = shape[d];
  return b;
}

Result<Box> Box::Make(const std::vector<int64_t>& lo, const std::vector<int64_t>& hi) {
  if (lo.size() != hi.size()) {
    return InvalidArgument("box lo has " + std::to_string(lo.size()) + " dims but hi has " +
                           std::to_string(hi.size()));
  }
  if (lo.empty() || lo.size() > kMaxDims) {
    return InvalidArgument("box has " + std::to_string(lo.size()) +
                           " dims; ferry supports 1 to 8");
  }
  Box b;
  b.ndim = static_cast<int>(lo.size());
  for (int d = 0; d < b.ndim; ++d) {
    if (lo[d] > hi[d] || lo[d] < 0) {
      return InvalidArgument("box dim " + std::to_string(d) + " has lo " + std::to_string(lo[d]) +
                             " > hi " + std::to_string(hi[d]) + " or negative lo");
    }
    b.lo[d] = lo[d];
    b.hi[d] = hi[d];
  }
  return b;
}

std::vector<int64_t> Box::Shape() const {
  std::vector<int64_t> s(ndim);
  for (int d = 0; d < ndim; ++d) s[d] = hi[d] - lo[d];
  return s;
}

int64_t BoxVolume(int ndim, const int64_t* lo, const int64_t* hi) {
  if (ndim == 0) return 0;
  int64_t v = 1;
  for (int d = 0; d < ndim; ++d) {
    int64_t e = hi[d] - lo[d];
    if (e <= 0) return 0;
    v = SatMul(v, e);  // hostile boxes saturate; validation refuses them by kMaxBytes
  }
  return v;
}

int64_t Box::Volume() const { return BoxVolume(ndim, lo.data(), hi.data()); }

bool Box::Empty() const { return Volume() == 0; }

bool Box::Contains(const Box& o) const {
  if (o.ndim != ndim) return false;
  for (int d = 0; d < ndim; ++d) {
    if (o.lo[d] < lo[d] || o.hi[d] > hi[d]) return false;
  }
  return true;
}

Box Box::Intersect(const Box& o) const {
  Box r;
  r.ndim = ndim;
  if (o.ndim != ndim) {
    r.ndim = 0;
    return r;
  }
  for (int d = 0; d < ndim; ++d) {
    r.lo[d] = std::max(lo[d], o.lo[d]);
    r.hi[d] = std::max(r.lo[d], std::min(hi[d], o.hi[d]));
  }
  return r;
}

std::string Box::ToString() const {
  std::string s = "[";
  for (int d = 0; d < ndim; ++d) {
    if (d) s += ", ";
    s += std::to_string(lo[d]) + ":" + std::to_string(hi[d]);
  }
  return s + ")";
}

bool operator==(const Box& a, const Box& b) {
  if (a.ndim != b.ndim) return false;
  for (int d = 0; d < a.ndim; ++d) {
    if (a.lo[d] != b.lo[d] || a.hi[d] != b.hi[d]) return false;
  }
  return true;
}

bool operator<(const Box& a, const Box& b) {
  if (a.ndim != b.ndim) return a.ndim < b.ndim;
  for (int d = 0; d < a.ndim; ++d) {
    if (a.lo[d] != b.lo[d]) return a.lo[d] < b.lo[d];
  }
  for (int d = 0; d < a.ndim; ++d) {
    if (a.hi[d] != b.hi[d]) return a.hi[d] < b.hi[d];
  }
  return false;
}

}  // namespace ferry
