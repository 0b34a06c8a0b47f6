// Fuzz targets for the wire parsers of one process: the rank hello (tcp transport, libfabric's
// peer watch), and the direct-read offer decoder. Pure functions, so they run fast.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/runtime/direct_read.h"
#include "core/runtime/rank_hello.h"
#include "tests/fuzz/fuzz_driver.h"

namespace ferry {
namespace {

constexpr RankHelloProtocol kProtocol{{'F', 'R', 'Y', 'T'}, "ferry-tcp"};

int RankHelloTarget(const uint8_t* data, size_t size) {
  static const std::string secret = "fuzz-secret";
  Nonce nonce{};
  RankHelloExpect expect{&secret, 3, 8, 5};
  auto checked = CheckRankHello(kProtocol, expect, nonce, std::span<const uint8_t>(data, size));
  if (checked.ok() && (checked->from_rank < 0 || checked->from_rank >= 3)) std::abort();
  return 0;
}

int OfferTarget(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t num_buffers = data[0] % 8;
  OfferHeader header;
  std::vector<PeerBuffer> buffers;
  (void)DecodeDirectReadOffer(std::span<const uint8_t>(data + 1, size - 1), num_buffers, header, buffers);
  return 0;
}

TEST(RankHelloFuzz, Check) {
  fuzz::FuzzSummary s = fuzz::RunFuzzer(&RankHelloTarget, {"rank_hello", "tests/fuzz/corpus/rank_hello", 1});
  EXPECT_GT(s.corpus_inputs, 0);
}

TEST(OfferFuzz, Decode) {
  fuzz::FuzzSummary s = fuzz::RunFuzzer(&OfferTarget, {"offer", "tests/fuzz/corpus/offer", 1});
  EXPECT_GT(s.corpus_inputs, 0);
}

}  // namespace
}  // namespace ferry
