// The store format of Refit::RunRest (core/refit/rest_exchange.h): a list survives the round trip;
// a peer's bytes that are not whole ascending tensor indices of the layout are refused naming the
// rank and the entry; the cut layout keeps buffers and drops exactly the complete fragments.
#include "core/refit/rest_exchange.h"

#include <gtest/gtest.h>

#include "core/layout/builders.h"

namespace ferry {
namespace {

TEST(RestExchangeTest, ListsRoundTripAndBadBytesAreRefused) {
  EXPECT_EQ(*DecodeTensorList(EncodeTensorList({0, 2, 5}), 6, 1), (std::vector<int>{0, 2, 5}));
  EXPECT_TRUE(DecodeTensorList({}, 6, 1)->empty());
  const auto refused = [](const Bytes& bytes) {
    Result<std::vector<int>> r = DecodeTensorList(bytes, 6, 3);
    return r.ok() ? std::string("accepted") : r.status().message();
  };
  EXPECT_NE(refused({1, 2, 3}).find("rank 3's complete tensors: 3 bytes"), std::string::npos);
  EXPECT_NE(refused(EncodeTensorList({0, 1, 2, 3, 4, 5, 5})).find("at most 6"), std::string::npos);
  EXPECT_NE(refused(EncodeTensorList({6})).find("entry 0 (6)"), std::string::npos);
  EXPECT_NE(refused(EncodeTensorList({-1})).find("entry 0 (-1)"), std::string::npos);
  EXPECT_NE(refused(EncodeTensorList({2, 2})).find("entry 1 (2) is not an ascending"),
            std::string::npos);
}

TEST(RestExchangeTest, TheCutLayoutDropsOnlyEachRanksCompleteTensors) {
  Layout destination;
  ASSERT_TRUE(AddReplicated(destination, {"a", {4}, DType::kFP32}, {0, 1}).ok());
  ASSERT_TRUE(AddReplicated(destination, {"b", {4}, DType::kFP32}, {0, 1}).ok());
  // Rank 0 has a; rank 1 has b.
  const Layout rest = WithoutCompleteFragments(destination, {{0}, {1}});
  EXPECT_EQ(rest.buffers.size(), destination.buffers.size());
  ASSERT_EQ(rest.fragments.size(), 2u);
  for (const Fragment& f : rest.fragments) {
    EXPECT_EQ(f.tensor, f.loc.rank == 0 ? 1 : 0);
  }
}

}  // namespace
}  // namespace ferry
