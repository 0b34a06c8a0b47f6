// FERRY_RETAINED_MEMORY_MIB sets the limit on retained memory (read at the first use, so this
// binary holds only this test).
#include <gtest/gtest.h>

#include <cstdlib>

#include "core/base/retained_memory.h"

namespace ferry {
namespace {

TEST(RetainedMemoryEnvironment, SetsTheLimit) {
  ASSERT_EQ(setenv("FERRY_RETAINED_MEMORY_MIB", "6", 1), 0);
  EXPECT_EQ(RetainedLimit(), size_t{6} << 20);
}

}  // namespace
}  // namespace ferry
