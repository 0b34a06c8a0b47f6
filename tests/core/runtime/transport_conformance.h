// The transport conformance suite: one set of tests every Transport must pass, skipping what its
// capabilities do not offer. A transport package instantiates it in its own test:
//
//   INSTANTIATE_TEST_SUITE_P(Tcp, TransportConformanceTest,
//                            testing::Values(ConformanceParams::For("tcp")), ConformanceParamsName);
//
// and links //tests/core/runtime:transport_conformance_testutil plus its transport (alwayslink).
// Ranks are separate transport instances in this process, connected through an InMemoryStore and
// driven round-robin from the test thread (each instance is driven by one thread at a time, as the
// Transport contract allows). Every wait has a deadline.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/runtime/transport.h"

namespace ferry::testing {

struct ConformanceParams {
  std::string transport;                           // registry name
  std::map<std::string, std::string> options;      // config options to set ("ucx.tls": "tcp")
  int64_t largest_message = 256ll << 20;           // the biggest size in the size sweep
  double deadline_seconds = 60;                    // per test

  static ConformanceParams For(std::string transport,
                               std::map<std::string, std::string> options = {}) {
    ConformanceParams params;
    params.transport = std::move(transport);
    params.options = std::move(options);
    return params;
  }
};

std::string ConformanceParamsName(const ::testing::TestParamInfo<ConformanceParams>& info);

// `size` connected instances of one transport (rank i at index i), every pair connected, including
// each rank to itself.
struct TransportWorld {
  std::unique_ptr<Config> config;
  std::unique_ptr<InMemoryStore> store;
  std::vector<std::unique_ptr<Transport>> ranks;
  std::string group_key, secret;  // every rank's TransportContext's
};
Result<TransportWorld> CreateTransportWorld(const ConformanceParams& params, int size,
                                            Deadline deadline);

// Drives every rank's Poll until the requests named complete; keeps other completions for later.
class Driver {
 public:
  explicit Driver(TransportWorld& world) : world_(world) {}
  // Waits for request `id` of `rank`; returns its completion or a timeout/transport error.
  Result<Completion> Wait(int rank, RequestId id, Deadline deadline);
  // Waits for all; the completions in the same order.
  Result<std::vector<Completion>> WaitAll(const std::vector<std::pair<int, RequestId>>& requests,
                                          Deadline deadline);
  // One round of non-blocking polls on every live rank.
  Status PollOnce();

 private:
  TransportWorld& world_;
  std::map<std::pair<int, RequestId>, Completion> done_;
};

// Registers a host buffer on `transport` and returns the handle (fails the test on error).
MemoryHandle MustRegister(Transport& transport, std::vector<uint8_t>& buffer);

class TransportConformanceTest : public ::testing::TestWithParam<ConformanceParams> {
 protected:
  Deadline TestDeadline() const { return Deadline::AfterSeconds(GetParam().deadline_seconds); }
};

}  // namespace ferry::testing
