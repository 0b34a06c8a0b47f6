// The library facade on CUDA memory, over real processes (one per rank, forked before any of them
// touches CUDA): four ranks refit an fp32 [64, 48] tensor from rows on ranks 0-1 to columns on
// ranks 2-3, every buffer a cudaMalloc allocation registered through Refit, three steps with new
// source values each, checked element by element after copying the destinations back. Once with
// the ranks on one node (destinations read the sources through CUDA IPC) and once on four pretend
// nodes (packed on the device, staged through pinned memory over tcp); then every destination
// tensor is complete and RunRest moves nothing. Registration checks that
// CUDA memory is what it claims. Needs a GPU: without one these report themselves SKIPPED, and one
// more test checks that CUDA memory is then refused at registration, naming the buffer.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "core/cuda/batched_copy.h"
#include "core/cuda/pointer.h"
#include "core/layout/builders.h"
#include "core/refit/config.h"
#include "core/refit/refit.h"
#include "tests/core/runtime/executor_testutil.h"

namespace ferry {
namespace {

constexpr int64_t kTensorRows = 64, kTensorCols = 48;

// Asked in a child process: the test process itself must not initialise CUDA before forking ranks.
bool HaveGpu() {
  return RunRanks(1, 30, [](int, int) { return cuda::DeviceCount() > 0 ? 0 : 1; }) == std::vector<int>{0};
}

// Rows split over ranks 0 and 1, columns over ranks 2 and 3; buffers named after the tensor.
std::shared_ptr<const RefitPlan> PlanRowsToColumns(int gpus_per_node) {
  Layout source, destination;
  const TensorSpec w{"w", {kTensorRows, kTensorCols}, DType::kFP32};
  EXPECT_TRUE(AddColumnParallel(source, w, {0, 1}).ok());
  EXPECT_TRUE(AddRowParallel(destination, w, {2, 3}).ok());
  auto plan = RefitPlan::Make(std::move(source), std::move(destination), Topology::Uniform(4, gpus_per_node),
                              Strategy::kReshard, DefaultConfig());
  EXPECT_TRUE(plan.ok()) << plan.status().ToString();
  return plan.ok() ? *plan : nullptr;
}

Result<std::unique_ptr<Session>> JoinSession(int rank, int port, std::vector<int> node_of_rank) {
  Config config = DefaultConfig();
  for (const char* setting : {"transport.network=tcp", "transport.intra_node=tcp", "tcp.address=127.0.0.1",
                              "deadline.connect=20s", "deadline.refit=20s"}) {
    const std::string s(setting);
    FERRY_RETURN_IF_ERROR(config.Set(s.substr(0, s.find('=')), s.substr(s.find('=') + 1)));
  }
  BootstrapInfo info;
  info.rank = rank;
  info.size = 4;
  info.store_host = "127.0.0.1";
  info.store_port = port;
  info.token = "refit-cuda-test";
  return Session::Join(info, std::move(config), std::move(node_of_rank));
}

// Element (i, j) of the tensor at `step`.
float Element(int64_t i, int64_t j, int step) { return static_cast<float>(step * 100000 + i * 1000 + j); }

// Rank 0 or 1's rows for `step`, uploaded into its source buffer.
Status WriteSource(void* device, int rank, int step) {
  std::vector<float> rows(kTensorRows / 2 * kTensorCols);
  for (int64_t i = 0; i < kTensorRows / 2; ++i) {
    for (int64_t j = 0; j < kTensorCols; ++j) rows[i * kTensorCols + j] = Element(i + 32 * rank, j, step);
  }
  return cuda::CopyToDevice(device, rows.data(), static_cast<int64_t>(rows.size() * sizeof(float)));
}

// Whether rank 2 or 3's destination buffer holds its columns of the tensor at `step`.
Result<bool> DestinationHolds(const void* device, int rank, int step) {
  std::vector<float> columns(kTensorRows * kTensorCols / 2);
  FERRY_RETURN_IF_ERROR(
      cuda::CopyToHost(columns.data(), device, static_cast<int64_t>(columns.size() * sizeof(float))));
  for (int64_t i = 0; i < kTensorRows; ++i) {
    for (int64_t j = 0; j < kTensorCols / 2; ++j) {
      if (columns[i * kTensorCols / 2 + j] != Element(i, j + 24 * (rank - 2), step)) return false;
    }
  }
  return true;
}

// One rank's three refits on device memory; exit code 0 when every destination checked out.
int RefitOnDevice(const std::shared_ptr<const RefitPlan>& plan, int rank, int port, std::vector<int> nodes) {
  auto session = JoinSession(rank, port, std::move(nodes));
  if (!session.ok()) return Report(session.status());
  auto refit = Refit::Create(**session, plan);
  if (!refit.ok()) return Report(refit.status());
  const int64_t bytes = kTensorRows * kTensorCols / 2 * 4;  // every rank's buffer is half the tensor
  auto memory = cuda::DeviceAlloc(bytes);
  if (!memory.ok()) return Report(memory.status());
  const MemoryDesc desc{*memory, bytes, MemoryKind::kCuda, 0};
  Status status = rank < 2 ? (*refit)->RegisterSource("w", desc) : (*refit)->RegisterDestination("w", desc);
  for (int step = 0; step < 3 && status.ok(); ++step) {
    if (rank < 2) status = WriteSource(*memory, rank, step);
    if (status.ok()) status = (*refit)->Run().status();
    if (status.ok() && rank >= 2) {
      Result<bool> holds = DestinationHolds(*memory, rank, step);
      if (!holds.ok()) status = holds.status();
      if (holds.ok() && !*holds) return 2;
    }
  }
  if (!status.ok()) return Report(status);
  // After a successful run every destination tensor of the rank is complete, and RunRest (which
  // waits for the device's work, then plans without the complete tensors) moves nothing.
  if ((*refit)->CompleteDestinationTensors() != std::vector<int>(rank < 2 ? 0 : 1, 0)) return 4;
  Result<RefitStats> rest = (*refit)->RunRest((*refit)->DefaultDeadline());
  if (!rest.ok()) return Report(rest.status());
  if (rest->executor.bytes_received + rest->executor.bytes_read_direct + rest->executor.bytes_copied > 0) return 5;
  return (*session)->Finish().ok() ? 0 : 3;
}

// Four ranks' refits on device memory, planned with `gpus_per_node` and joined on `nodes`.
void ExpectRefitsOnDevice(int gpus_per_node, const std::vector<int>& nodes) {
  auto plan = PlanRowsToColumns(gpus_per_node);
  ASSERT_NE(plan, nullptr);
  auto codes = RunRanks(4, 90, [&](int rank, int port) { return RefitOnDevice(plan, rank, port, nodes); });
  EXPECT_EQ(codes, (std::vector<int>{0, 0, 0, 0}));
}

TEST(RefitCudaTest, RefitsCudaBuffersOnOneNodeThroughCudaIpc) {
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device: the facade's CUDA path is not exercised";
  ExpectRefitsOnDevice(4, {0, 0, 0, 0});
}

TEST(RefitCudaTest, RefitsCudaBuffersAcrossNodesStagedOverTcp) {
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device: the facade's CUDA path is not exercised";
  ExpectRefitsOnDevice(1, {0, 1, 2, 3});
}

// Rank 0 registers memory that is not what it claims; the error must name the buffer and the fault.
int RegisterWrongMemory(const std::shared_ptr<const RefitPlan>& plan, int rank, int port, bool gpu) {
  auto session = JoinSession(rank, port, {0, 1, 2, 3});
  if (!session.ok()) return Report(session.status());
  auto refit = Refit::Create(**session, plan);
  if (!refit.ok()) return Report(refit.status());
  int failures = 0;
  auto expect = [&](const MemoryDesc& memory, const std::string& text) {
    const Status s = (*refit)->RegisterSource("w", memory);
    if (s.ok() || s.message().find("source buffer 'w'") == std::string::npos ||
        s.message().find(text) == std::string::npos) {
      std::fprintf(stderr, "expected an error with '%s', got %s\n", text.c_str(), s.ToString().c_str());
      ++failures;
    }
  };
  const int64_t bytes = kTensorRows * kTensorCols / 2 * 4;
  std::vector<float> host(bytes / 4);
  if (rank == 0 && !gpu) {
    expect({host.data(), bytes, MemoryKind::kCuda, 0}, "no CUDA device is visible");
  } else if (rank == 0) {
    expect({host.data(), bytes, MemoryKind::kCuda, 0}, "not device memory");
    auto device = cuda::DeviceAlloc(bytes);
    if (!device.ok()) return Report(device.status());
    expect({*device, bytes, MemoryKind::kCuda, -1}, "needs a device ordinal");
    expect({*device, bytes, MemoryKind::kCuda, 1}, "is on CUDA device 0, not on device 1");
    // 16 bytes before the end of the allocation (which the driver may have rounded up).
    auto allocation = cuda::AllocationOf(*device);
    if (!allocation.ok()) return Report(allocation.status());
    void* tail = reinterpret_cast<void*>(allocation->base + allocation->bytes - 16);
    expect({tail, bytes, MemoryKind::kCuda, 0}, "only 16 remain in the device allocation");
    if (!(*refit)->RegisterSource("w", {*device, bytes, MemoryKind::kCuda, 0}).ok()) ++failures;
  }
  const bool finished = (*session)->Finish().ok();
  return failures > 0 ? 2 : finished ? 0 : 3;
}

TEST(RefitCudaTest, CudaMemoryIsCheckedAtRegistrationNamingTheBuffer) {
  const bool gpu = HaveGpu();
  auto plan = PlanRowsToColumns(1);
  ASSERT_NE(plan, nullptr);
  auto codes = RunRanks(4, 60, [&](int rank, int port) { return RegisterWrongMemory(plan, rank, port, gpu); });
  EXPECT_EQ(codes, (std::vector<int>{0, 0, 0, 0}));
}

}  // namespace
}  // namespace ferry
