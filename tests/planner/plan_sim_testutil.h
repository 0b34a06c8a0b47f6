// Test helpers for the planner: a host-memory interpreter of TransferPlans (runs every op on byte
// arrays, Send/Forward payloads matched to Recvs by message id) and an oracle that fills source
// buffers and checks destination buffers element by element straight from the layouts.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/layout/layout.h"
#include "core/layout/topology.h"
#include "core/plan/plan.h"
#include "planner/planner.h"

namespace ferry::testing {

// Byte k of element `flat` (row-major index in the whole tensor) of tensor `name`. ExecuteAndCheck
// reads a tensor stack's elements as its members' (core/layout/tensor_stack.h), so a stack on one
// side and its members on the other hold the same bytes.
uint8_t OracleByte(const std::string& name, int64_t flat, int k);

// Runs `plan` on host memory: source buffers filled by the oracle, destination buffers zeroed.
// Then checks that every byte of every destination fragment holds the oracle's value and was
// written exactly once, and that no other destination byte was written.
Status ExecuteAndCheck(const TransferPlan& plan, const Layout& source, const Layout& destination);

// Bytes the GPUs of `node` hold of `destination`, each element once: what must cross the network
// into the node when every source sits elsewhere. A node's fragments of one tensor must be
// replicas (equal boxes) or disjoint; a partial overlap is an error naming both boxes.
Result<int64_t> NodeNeedBytes(const Layout& destination, const Topology& topology, int node);

// The seed of a property test: `seed`, or, with FERRY_PROPERTY_SEED=n in the environment, a seed
// derived from both, so that a soak runs other cases than CI does (bazel test
// --test_env=FERRY_PROPERTY_SEED=n //tests/planner:planner_test, for n = 1, 2, ...). Callers name
// the seed in use in their failure messages, so a failing case can be replayed.
uint64_t PropertySeed(uint64_t seed);

struct RandomCase {
  Layout source;
  Layout destination;
  Topology topology;
  PlannerOptions options;
};
// A random layout pair: 1-3 tensors of 1-5 dims, uneven grid splits, 1-3 replica sets per side on
// random ranks (colocated or not), fused/strided placements, random topology and options.
RandomCase MakeRandomCase(std::mt19937_64& rng);
// A random layout pair built for stack folding (planner/fold_stacks.h): families of 2-6 tensors
// named like experts ("layers.1.experts.<j>.gate"), each side placing a cell's members in one
// buffer at a constant stride (or not: separate buffers, a member moved off the stride, members
// appended out of order), replica sets on random ranks, random topology and options. With
// `name_stacks`, each side names each family as one tensor stack (core/layout/tensor_stack.h) or
// member by member, at random: both sides alike, or one each way.
RandomCase MakeRandomStackedCase(std::mt19937_64& rng, bool name_stacks = false);

}  // namespace ferry::testing
