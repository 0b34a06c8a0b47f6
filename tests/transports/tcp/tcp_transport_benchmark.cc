// Throughput of one transport between two ranks of this process, each driven by its own thread
// (as separate processes would be): `range(0)` bytes per message, 8 messages in flight.
// bazel run //tests/transports/tcp:tcp_transport_benchmark
#include <benchmark/benchmark.h>

#include <thread>

#include "tests/core/runtime/transport_conformance.h"

namespace ferry::testing {
namespace {

Status DrainAll(Transport& t, int expected, Deadline deadline) {
  Completion out[16];
  int got = 0;
  while (got < expected) {
    FERRY_ASSIGN_OR_RETURN(int n, t.Poll(out, deadline));
    if (n == 0 && deadline.Expired()) return DeadlineExceeded("benchmark messages did not complete");
    for (int i = 0; i < n; ++i) {
      if (!out[i].status.ok()) return out[i].status;
    }
    got += n;
  }
  return Status::Ok();
}

void BM_Transport(benchmark::State& state, const std::string& name) {
  const int64_t bytes = state.range(0);
  constexpr int kInFlight = 8;
  ConformanceParams params = ConformanceParams::For(name);
  if (name == "tcp") params.options["tcp.address"] = "127.0.0.1";
  auto world = CreateTransportWorld(params, 2, Deadline::AfterSeconds(20));
  if (!world.ok()) {
    state.SkipWithError(world.status().ToString().c_str());
    return;
  }
  std::vector<uint8_t> source(static_cast<size_t>(bytes * kInFlight), 1), target(source.size());
  MemoryHandle hs = MustRegister(*world->ranks[0], source);
  MemoryHandle ht = MustRegister(*world->ranks[1], target);
  uint64_t tag = 0;
  for (auto _ : state) {
    Status receiver_status;
    std::thread receiver([&, first = tag] {
      for (int m = 0; m < kInFlight; ++m) {
        auto id = world->ranks[1]->PostRecv(0, first + m, LocalBuffer{ht, m * bytes, bytes});
        if (!id.ok()) receiver_status = id.status();
      }
      if (receiver_status.ok()) {
        receiver_status = DrainAll(*world->ranks[1], kInFlight, Deadline::AfterSeconds(60));
      }
    });
    Status sender_status;
    for (int m = 0; m < kInFlight; ++m) {
      auto id = world->ranks[0]->PostSend(1, tag + m, LocalBuffer{hs, m * bytes, bytes});
      if (!id.ok()) sender_status = id.status();
    }
    if (sender_status.ok()) sender_status = DrainAll(*world->ranks[0], kInFlight, Deadline::AfterSeconds(60));
    receiver.join();
    tag += kInFlight;
    if (!sender_status.ok() || !receiver_status.ok()) {
      state.SkipWithError((sender_status.ok() ? receiver_status : sender_status).ToString().c_str());
      return;
    }
  }
  state.SetBytesProcessed(state.iterations() * bytes * kInFlight);
}

BENCHMARK_CAPTURE(BM_Transport, tcp, std::string("tcp"))
    ->RangeMultiplier(16)->Range(4 << 10, 64 << 20)->UseRealTime();
BENCHMARK_CAPTURE(BM_Transport, local, std::string("local"))
    ->RangeMultiplier(16)->Range(4 << 10, 64 << 20)->UseRealTime();

}  // namespace
}  // namespace ferry::testing
