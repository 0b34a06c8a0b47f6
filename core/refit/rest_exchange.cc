// The store format of a rank's complete tensors for Refit::RunRest, and the destination layout
// without them.
#include "core/refit/rest_exchange.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace ferry {

// A rank's complete tensors as the store carries them: int32 values, little-endian as this host.
Bytes EncodeTensorList(const std::vector<int>& tensors) {
  Bytes out(tensors.size() * sizeof(int32_t));
  for (size_t i = 0; i < tensors.size(); ++i) {
    const int32_t v = tensors[i];
    std::memcpy(out.data() + i * sizeof(int32_t), &v, sizeof(v));
  }
  return out;
}

// A peer's list, checked: whole int32 values, ascending, each a tensor of the layout.
Result<std::vector<int>> DecodeTensorList(const Bytes& bytes, int num_tensors, int rank) {
  const std::string who = "rank " + std::to_string(rank) + "'s complete tensors";
  if (bytes.size() % sizeof(int32_t) != 0 ||
      bytes.size() / sizeof(int32_t) > static_cast<size_t>(num_tensors)) {
    return InvalidArgument(who + ": " + std::to_string(bytes.size()) +
                           " bytes are not a list of at most " + std::to_string(num_tensors) +
                           " tensor indices");
  }
  std::vector<int> tensors(bytes.size() / sizeof(int32_t));
  for (size_t i = 0; i < tensors.size(); ++i) {
    int32_t v = 0;
    std::memcpy(&v, bytes.data() + i * sizeof(int32_t), sizeof(v));
    if (v < 0 || v >= num_tensors || (i > 0 && v <= tensors[i - 1])) {
      return InvalidArgument(who + ": entry " + std::to_string(i) + " (" + std::to_string(v) +
                             ") is not an ascending tensor index below " +
                             std::to_string(num_tensors));
    }
    tensors[i] = v;
  }
  return tensors;
}

// `destination` without the fragments of each rank's complete tensors; buffers and tensors stay,
// so buffer indices (and the registered memory) are the same.
Layout WithoutCompleteFragments(const Layout& destination, const std::vector<std::vector<int>>& complete) {
  Layout rest = destination;
  rest.fragments.clear();
  for (const Fragment& f : destination.fragments) {
    const std::vector<int>& done = complete[static_cast<size_t>(f.loc.rank)];
    if (!std::binary_search(done.begin(), done.end(), f.tensor)) rest.fragments.push_back(f);
  }
  return rest;
}

}  // namespace ferry
