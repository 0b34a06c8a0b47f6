// Tests for Status/Result: codes, context chaining, the macros.
#include "core/base/status.h"

#include <gtest/gtest.h>

namespace ferry {
namespace {

Result<int> Half(int x) {
  if (x % 2) return InvalidArgument(std::to_string(x) + " is odd");
  return x / 2;
}

Result<int> Quarter(int x) {
  FERRY_ASSIGN_OR_RETURN(int h, Half(x));
  FERRY_ASSIGN_OR_RETURN(int q, Half(h).WithContext("halving " + std::to_string(h)));
  return q;
}

Status CheckPositive(int x) {
  if (x <= 0) return OutOfRange("not positive");
  return Status::Ok();
}

Status CheckBoth(int a, int b) {
  FERRY_RETURN_IF_ERROR(CheckPositive(a).WithContext("a"));
  FERRY_RETURN_IF_ERROR(CheckPositive(b).WithContext("b"));
  return Status::Ok();
}

TEST(StatusTest, OkByDefault) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.ToString(), "OK");
  EXPECT_TRUE(s.WithContext("ignored").ok());
}

TEST(StatusTest, ContextReadsOutermostFirst) {
  Status s = InvalidArgument("box out of bounds").WithContext("fragment 3").WithContext("tensor w");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "tensor w: fragment 3: box out of bounds");
  EXPECT_EQ(s.ToString(), "INVALID_ARGUMENT: tensor w: fragment 3: box out of bounds");
}

TEST(StatusTest, ResultCarriesValueOrError) {
  Result<int> ok = Quarter(8);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, 2);
  Result<int> bad = Quarter(6);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "halving 3: 3 is odd");
}

TEST(StatusTest, ResultFromOkStatusIsInternalError) {
  Result<int> r{Status::Ok()};
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInternal);
}

TEST(StatusTest, ReturnIfErrorStopsAtFirst) {
  EXPECT_TRUE(CheckBoth(1, 2).ok());
  EXPECT_EQ(CheckBoth(0, 0).message(), "a: not positive");
  EXPECT_EQ(CheckBoth(1, 0).message(), "b: not positive");
}

}  // namespace
}  // namespace ferry
