// The device-resident work of GPU direct reads: see gpu_read_tables.h.
#include "core/runtime/gpu_read_tables.h"

#include <algorithm>

namespace ferry {
namespace {

bool SameAddresses(const std::vector<const char*>& cached, std::span<const CopyEnds> ends) {
  if (cached.size() != 2 * ends.size()) return false;
  for (size_t c = 0; c < ends.size(); ++c) {
    if (cached[2 * c] != ends[c].from || cached[2 * c + 1] != ends[c].to) return false;
  }
  return true;
}

}  // namespace

GpuReadTables::Generation& GpuReadTables::GenerationOf(uint64_t id) {
  auto hit = std::find_if(generations_.begin(), generations_.end(),
                          [id](const Generation& g) { return g.id == id; });
  if (hit == generations_.end()) {
    if (generations_.size() == kGenerations) generations_.pop_back();
    generations_.insert(generations_.begin(), Generation{id, {}});
    return generations_.front();
  }
  std::rotate(generations_.begin(), hit, hit + 1);
  return generations_.front();
}

Result<const cuda::WorkTables*> GpuReadTables::Find(uint64_t generation, int read,
                                                    std::span<const CopyEnds> ends,
                                                    const Describe& describe,
                                                    cuda::CopyStream& gpu) {
  if (read < 0) return InvalidArgument("GPU work index " + std::to_string(read));
  Generation& g = GenerationOf(generation);
  if (g.reads.size() <= static_cast<size_t>(read)) g.reads.resize(static_cast<size_t>(read) + 1);
  Read& r = g.reads[static_cast<size_t>(read)];
  if (r.tables != nullptr && SameAddresses(r.addresses, ends)) return r.tables.get();
  std::vector<cuda::StridedCopy> copies;
  std::vector<cuda::StridedConvert> converts;
  copies.reserve(ends.size());
  FERRY_RETURN_IF_ERROR(describe(copies, converts));
  r.tables.reset();
  r.addresses.clear();
  FERRY_ASSIGN_OR_RETURN(r.tables, gpu.Upload(copies, converts));
  r.addresses.reserve(2 * ends.size());
  for (const CopyEnds& e : ends) {
    r.addresses.push_back(e.from);
    r.addresses.push_back(e.to);
  }
  ++uploads_;
  return r.tables.get();
}

}  // namespace ferry
