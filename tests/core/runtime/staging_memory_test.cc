// StageOnDevice: which memory a rank's staging arena is, from the capabilities of the transports
// its staged messages go through.
#include "core/runtime/staging_memory.h"

#include <gtest/gtest.h>

#include <vector>

namespace ferry {
namespace {

const StagingTransport kTcp{"tcp", true, false};
const StagingTransport kNccl{"nccl", false, true};
const StagingTransport kUcxCuda{"ucx", true, true};

TEST(StagingMemoryTest, HostRanksStageInHostMemory) {
  const std::vector<StagingTransport> all = {kNccl};
  EXPECT_FALSE(*StageOnDevice(0, /*on_gpu=*/false, all));
}

TEST(StagingMemoryTest, CudaRanksStageOnTheDeviceWhenEveryTransportMovesCuda) {
  EXPECT_TRUE(*StageOnDevice(0, true, std::vector<StagingTransport>{kNccl}));
  EXPECT_TRUE(*StageOnDevice(0, true, std::vector<StagingTransport>{kUcxCuda}));
  EXPECT_TRUE(*StageOnDevice(0, true, std::vector<StagingTransport>{kUcxCuda, kNccl}));
}

TEST(StagingMemoryTest, OneHostOnlyTransportMakesItPinnedHostMemory) {
  EXPECT_FALSE(*StageOnDevice(0, true, std::vector<StagingTransport>{kTcp}));
  EXPECT_FALSE(*StageOnDevice(0, true, std::vector<StagingTransport>{kUcxCuda, kTcp}));
}

TEST(StagingMemoryTest, CudaRanksWithoutStagedMessagesStageOnTheDevice) {
  EXPECT_TRUE(*StageOnDevice(0, true, std::vector<StagingTransport>{}));
  EXPECT_FALSE(*StageOnDevice(0, false, std::vector<StagingTransport>{}));
}

TEST(StagingMemoryTest, RefusesCudaOnlyNextToHostOnly) {
  auto mixed = StageOnDevice(3, true, std::vector<StagingTransport>{kNccl, kUcxCuda, kTcp});
  ASSERT_FALSE(mixed.ok());
  EXPECT_EQ(mixed.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(mixed.status().message().find("rank 3 stages messages for nccl (CUDA memory only) "
                                          "and for tcp (host memory only)"),
            std::string::npos)
      << mixed.status().ToString();
}

}  // namespace
}  // namespace ferry
