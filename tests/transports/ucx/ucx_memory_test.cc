// The ucx.cuda decision and what ferry reads from UCX about memory: parsing the option, deciding
// against a memory-type mask, naming masks, and the resource lines of ucp_context_print_info (a
// sample written by hand in the format of openucx/ucx src/ucp/core/ucp_context.c, v1.22.0).
#include "transports/ucx/ucx_memory.h"

#include <gtest/gtest.h>

namespace ferry::testing {
namespace {

constexpr uint64_t kCuda = uint64_t{1} << UCS_MEMORY_TYPE_CUDA;
constexpr uint64_t kHost = uint64_t{1} << UCS_MEMORY_TYPE_HOST;

TEST(UcxMemoryTest, ParsesCudaMode) {
  EXPECT_EQ(*ucx::ParseCudaMode("auto"), ucx::CudaMode::kAuto);
  EXPECT_EQ(*ucx::ParseCudaMode("on"), ucx::CudaMode::kOn);
  EXPECT_EQ(*ucx::ParseCudaMode("off"), ucx::CudaMode::kOff);
  auto bad = ucx::ParseCudaMode("yes");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("ucx.cuda must be 'auto', 'on' or 'off', got 'yes'"),
            std::string::npos);
}

TEST(UcxMemoryTest, DecidesFromWhatUcxSupports) {
  EXPECT_TRUE(*ucx::DecideCuda(ucx::CudaMode::kAuto, kHost | kCuda, "1.22.0"));
  EXPECT_FALSE(*ucx::DecideCuda(ucx::CudaMode::kAuto, kHost, "1.13.1"));
  EXPECT_TRUE(*ucx::DecideCuda(ucx::CudaMode::kOn, kCuda, "1.22.0"));
  EXPECT_FALSE(*ucx::DecideCuda(ucx::CudaMode::kOff, kHost | kCuda, "1.22.0"));
  auto refused = ucx::DecideCuda(ucx::CudaMode::kOn, kHost, "1.13.1");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  const std::string& message = refused.status().message();
  EXPECT_NE(message.find("ucx.cuda=on, but the loaded UCX 1.13.1 does not support CUDA memory "
                         "(memory types beyond host: none)"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("LD_LIBRARY_PATH"), std::string::npos) << message;
}

TEST(UcxMemoryTest, NamesMemoryTypes) {
  EXPECT_EQ(ucx::MemoryTypeNames(0), "none");
  EXPECT_EQ(ucx::MemoryTypeNames(kHost), "none");
  EXPECT_EQ(ucx::MemoryTypeNames(kHost | kCuda), "cuda");
  EXPECT_EQ(ucx::MemoryTypeNames(kCuda | (uint64_t{1} << 40)), "cuda,type 40");
}

constexpr const char* kContextInfo =
    "#\n"
    "# UCP context\n"
    "#\n"
    "#            md 0  :  self\n"
    "#            md 1  :  tcp\n"
    "#            md 4  :  cuda_cpy\n"
    "#\n"
    "#      resource 0  :  md 0  dev 0  flags -- self/memory\n"
    "#      resource 1  :  md 1  dev 1  flags -- tcp/lo\n"
    "#      resource 4  :  md 4  dev 2  flags -- cuda_copy/cuda\n"
    "#      resource 5  :  md 5  dev 2  flags -- cuda_ipc/cuda\n"
    "#      resource 6  :  md 5  dev 3  flags a- cuda_ipc/cuda\n"
    "#\n";

TEST(UcxMemoryTest, ParsesContextResourcesAndPicksCudaTransports) {
  const std::vector<std::string> resources = ucx::ParseResources(kContextInfo);
  EXPECT_EQ(resources, (std::vector<std::string>{"self/memory", "tcp/lo", "cuda_copy/cuda",
                                                 "cuda_ipc/cuda", "cuda_ipc/cuda"}));
  EXPECT_EQ(ucx::CudaTransports(resources), (std::vector<std::string>{"cuda_copy", "cuda_ipc"}));
  EXPECT_TRUE(ucx::CudaTransports({"tcp/lo", "posix/memory"}).empty());
}

}  // namespace
}  // namespace ferry::testing
