// Fuzz targets for the wire parsers of one process: the rank hello (tcp transport, libfabric's
// peer watch), and the direct-read offer decoder. Pure functions, so they run fast.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
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

// The first byte picks the buffers the receiver expects: its low 3 bits of the wide offer, the
// next 2 of a packed one (0: the message has no packed read).
int OfferTarget(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t num_buffers = data[0] % 8, packed_buffers = (data[0] >> 3) % 4;
  OfferHeader header;
  std::vector<PeerBuffer> buffers;
  (void)DecodeDirectReadOffer(std::span<const uint8_t>(data + 1, size - 1), num_buffers, header, buffers,
                              packed_buffers);
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

// Every seed is an offer the decoder accepts, so mutations start past the magic and version
// checks: a wire version bump must bring the corpus along.
TEST(OfferFuzz, CorpusSeedsAreValidOffers) {
  int seeds = 0;
  for (const auto& file : std::filesystem::directory_iterator("tests/fuzz/corpus/offer")) {
    std::ifstream in(file.path(), std::ios::binary);
    const std::vector<uint8_t> data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ASSERT_FALSE(data.empty()) << file.path();
    OfferHeader header;
    std::vector<PeerBuffer> buffers;
    const Status decoded = DecodeDirectReadOffer(std::span<const uint8_t>(data).subspan(1), data[0] % 8, header,
                                                 buffers, (data[0] >> 3) % 4);
    EXPECT_TRUE(decoded.ok()) << file.path() << ": " << decoded.ToString();
    ++seeds;
  }
  EXPECT_GE(seeds, 5);
}

}  // namespace
}  // namespace ferry
