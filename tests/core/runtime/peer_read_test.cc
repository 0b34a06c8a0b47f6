// Peer reads: a forked child reads regions of its parent's ordinary (non-shared) heap memory with
// process_vm_readv (ReadFromPeer) — contiguous rows, strided rows with small and large element
// gaps, strided destinations, rows longer than the scratch, a dtype conversion — and checks every
// element. The child reports by exit code; the parent kills it at the test's deadline.
#include "core/runtime/peer_read.h"

#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <thread>
#include <vector>

#include "core/base/float_convert.h"

namespace ferry {
namespace {

constexpr int kDenied = 5;  // the child may not read its parent (ptrace access): the test skips

// Runs body() in a forked child with a deadline; returns its exit code (-signal when killed).
int InChild(const std::function<int()>& body, int deadline_seconds = 30) {
  const pid_t child = ::fork();
  if (child == 0) {
    ::alarm(static_cast<unsigned>(deadline_seconds) + 5);  // never outlives the test
    ::_exit(body());
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(deadline_seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (::waitpid(child, &status, WNOHANG) == child) {
      return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  return -SIGKILL;
}

// A 2-D region of `dtype` with element strides {row_stride, col_stride}.
Region Matrix(Space space, DType dtype, int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride) {
  Region r;
  r.space = space;
  r.dtype = dtype;
  r.ndim = 2;
  r.shape = {rows, cols};
  r.strides = {row_stride, col_stride};
  return r;
}

// The parent's fp32 `matrix` (element i holds i) read through `from` into a child buffer of
// `to_elements` elements laid out as `to`, slice by slice as the copy pool cuts it; every element
// of the region must arrive (converted when `to` is bf16) and every other one stay untouched.
int ReadAndCheck(const std::vector<float>& matrix, const Region& from, const Region& to, int64_t to_elements) {
  auto geometry = MakeCopyGeometry(from, to);
  if (!geometry.ok()) return 10;
  const int64_t parent = ::getppid();
  const uint64_t address = reinterpret_cast<uint64_t>(matrix.data());
  const size_t tsize = static_cast<size_t>(DTypeSize(to.dtype));
  std::vector<unsigned char> out(static_cast<size_t>(to_elements) * tsize, 0xAB);
  for (const CopySlice& s : SliceCopy(*geometry, 512 << 10, 8)) {
    const Status read = ReadFromPeer(parent, *geometry, s, address, reinterpret_cast<char*>(out.data()));
    if (read.code() == StatusCode::kFailedPrecondition) return kDenied;
    if (!read.ok()) {
      std::fprintf(stderr, "%s\n", read.ToString().c_str());
      return 2;
    }
  }
  std::vector<char> written(static_cast<size_t>(to_elements), 0);
  for (int64_t r = 0; r < from.shape[0]; ++r) {
    for (int64_t c = 0; c < from.shape[1]; ++c) {
      const int64_t i = r * to.strides[0] + c * to.strides[1];
      const float want = static_cast<float>(r * from.strides[0] + c * from.strides[1]);
      const unsigned char* p = out.data() + static_cast<size_t>(i) * tsize;
      const float got = LoadAsFloat(to.dtype, p);
      const float expected = to.dtype == DType::kFP32 ? want : BF16ToFloat(FloatToBF16(want));
      if (got != expected) {
        std::fprintf(stderr, "element (%lld, %lld): %g, want %g\n", static_cast<long long>(r),
                     static_cast<long long>(c), got, expected);
        return 3;
      }
      written[static_cast<size_t>(i)] = 1;
    }
  }
  for (size_t i = 0; i < written.size(); ++i) {
    for (size_t b = 0; !written[i] && b < tsize; ++b) {
      if (out[i * tsize + b] != 0xAB) return 4;  // a byte outside the region was written
    }
  }
  return 0;
}

std::vector<float> Iota(int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<float>(i);
  return v;
}

void ExpectRead(const std::vector<float>& matrix, const Region& from, const Region& to, int64_t to_elements) {
  const int code = InChild([&] { return ReadAndCheck(matrix, from, to, to_elements); });
  if (code == kDenied) GTEST_SKIP() << "process_vm_readv is not permitted between processes here";
  EXPECT_EQ(code, 0);
}

TEST(PeerReadTest, ContiguousRowsLandInPlace) {
  // Rows [r][0..8) of a [16, 32] matrix into a dense [16, 8] block.
  const std::vector<float> matrix = Iota(16 * 32);
  ExpectRead(matrix, Matrix(Space::kSource, DType::kFP32, 16, 8, 32, 1),
             Matrix(Space::kDestination, DType::kFP32, 16, 8, 8, 1), 16 * 8);
}

TEST(PeerReadTest, EveryOtherColumnReadsTheRowSpans) {
  // Element gap 8 bytes (small: read through), 3000 rows: several system calls.
  const std::vector<float> matrix = Iota(3000 * 64);
  ExpectRead(matrix, Matrix(Space::kSource, DType::kFP32, 3000, 30, 64, 2),
             Matrix(Space::kDestination, DType::kFP32, 3000, 30, 30, 1), 3000 * 30);
}

TEST(PeerReadTest, TransposedRegionReadsElementByElement) {
  // Column-major view of a [300, 200] matrix: element gap 800 bytes, 60000 iovecs.
  const std::vector<float> matrix = Iota(300 * 200);
  ExpectRead(matrix, Matrix(Space::kSource, DType::kFP32, 200, 300, 1, 200),
             Matrix(Space::kDestination, DType::kFP32, 200, 300, 300, 1), 200 * 300);
}

TEST(PeerReadTest, StridedDestinationIsScatteredFromTheScratch) {
  // Contiguous remote rows into every third element of wider destination rows.
  const std::vector<float> matrix = Iota(500 * 100);
  ExpectRead(matrix, Matrix(Space::kSource, DType::kFP32, 500, 90, 100, 1),
             Matrix(Space::kDestination, DType::kFP32, 500, 90, 300, 3), 500 * 300);
}

TEST(PeerReadTest, RowsLongerThanTheScratchArePieced) {
  // One row of 300000 elements with a small gap (2.4 MB span) and one with a large gap.
  const std::vector<float> matrix = Iota(600000);
  ExpectRead(matrix, Matrix(Space::kSource, DType::kFP32, 1, 300000, 600000, 2),
             Matrix(Space::kDestination, DType::kFP32, 1, 300000, 300000, 1), 300000);
  ExpectRead(matrix, Matrix(Space::kSource, DType::kFP32, 1, 20000, 600000, 30),
             Matrix(Space::kDestination, DType::kFP32, 1, 20000, 20000, 1), 20000);
}

TEST(PeerReadTest, ConvertsWhileReading) {
  // fp32 columns of the peer into bf16 rows, strided on both sides.
  const std::vector<float> matrix = Iota(64 * 64);
  ExpectRead(matrix, Matrix(Space::kSource, DType::kFP32, 64, 32, 64, 2),
             Matrix(Space::kDestination, DType::kBF16, 64, 32, 64, 2), 64 * 64);
}

TEST(PeerReadTest, UnmappedAddressFailsNamingThePeerAndTheRange) {
  const Region from = Matrix(Space::kSource, DType::kFP32, 16, 8, 32, 2);
  const Region to = Matrix(Space::kDestination, DType::kFP32, 16, 8, 8, 1);
  auto geometry = MakeCopyGeometry(from, to);
  ASSERT_TRUE(geometry.ok());
  std::vector<float> keep_alive(1);  // the child reads its parent, which stays alive
  const int code = InChild([&] {
    std::vector<float> out(16 * 8);
    const Status read = ReadFromPeer(::getppid(), *geometry, WholeCopy(*geometry), 8,
                                     reinterpret_cast<char*>(out.data()));
    if (read.code() == StatusCode::kFailedPrecondition) return kDenied;
    const std::string text = read.message();
    const bool named = text.find("peer process " + std::to_string(::getppid())) != std::string::npos &&
                       text.find("[0x8, ") != std::string::npos;
    return read.code() == StatusCode::kUnavailable && named ? 0 : 1;
  });
  if (code == kDenied) GTEST_SKIP() << "process_vm_readv is not permitted between processes here";
  EXPECT_EQ(code, 0);
}

}  // namespace
}  // namespace ferry
