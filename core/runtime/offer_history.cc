// The offers of earlier runs of a plan: see offer_history.h.
#include "core/runtime/offer_history.h"

#include <algorithm>

namespace ferry {

OfferHistory::Generation& OfferHistory::GenerationOf(uint64_t id) {
  auto hit = std::find_if(generations_.begin(), generations_.end(),
                          [id](const Generation& g) { return g.id == id; });
  if (hit == generations_.end()) {
    if (generations_.size() == kGenerations) generations_.pop_back();
    generations_.insert(generations_.begin(), Generation{id, {}, {}});
    return generations_.front();
  }
  std::rotate(generations_.begin(), hit, hit + 1);
  return generations_.front();
}

OfferHistory::Sent& OfferHistory::SentOf(uint64_t generation, int read) {
  Generation& g = GenerationOf(generation);
  const size_t at = static_cast<size_t>(std::max(read, 0));
  if (g.sent.size() <= at) g.sent.resize(at + 1);
  return g.sent[at];
}

OfferHistory::Taken& OfferHistory::TakenOf(uint64_t generation, int read) {
  Generation& g = GenerationOf(generation);
  const size_t at = static_cast<size_t>(std::max(read, 0));
  if (g.taken.size() <= at) g.taken.resize(at + 1);
  return g.taken[at];
}

void OfferHistory::ForEpoch(uint64_t epoch) {
  if (epoch == epoch_) return;
  generations_.clear();
  epoch_ = epoch;
}

}  // namespace ferry
