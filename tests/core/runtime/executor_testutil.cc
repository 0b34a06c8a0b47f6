// Helpers of the executor's multi-process tests: see executor_testutil.h.
#include "tests/core/runtime/executor_testutil.h"

#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "core/runtime/socket_util.h"
#include "tests/core/plan/plan_fixture.h"

namespace ferry {

// Forks `size` ranks running body(rank, port); returns their exit codes (-SIGKILL when killed).
std::vector<int> RunRanks(int size, double deadline_seconds,
                          const std::function<int(int rank, int port)>& body) {
  auto probe = ListenTcp("127.0.0.1", 0);
  EXPECT_TRUE(probe.ok());
  int port = probe->port;
  ::close(probe->fd);
  std::vector<pid_t> children;
  for (int rank = 0; rank < size; ++rank) {
    pid_t pid = ::fork();
    if (pid == 0) {
      ::alarm(static_cast<unsigned>(deadline_seconds) + 5);  // a child never outlives the test
      int code = body(rank, port);
      std::fflush(stdout);
      std::fflush(stderr);
      ::_exit(code);
    }
    children.push_back(pid);
  }
  std::vector<int> codes(static_cast<size_t>(size), -SIGKILL);
  Deadline deadline = Deadline::AfterSeconds(deadline_seconds);
  int left = size;
  while (left > 0 && !deadline.Expired()) {
    for (int rank = 0; rank < size; ++rank) {
      if (children[rank] == 0) continue;
      int status = 0;
      if (::waitpid(children[rank], &status, WNOHANG) == children[rank]) {
        codes[rank] = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
        children[rank] = 0;
        --left;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (pid_t pid : children) {
    if (pid != 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }
  return codes;
}

// Rank 0 holds the tensor. Rank 1 gets columns [0, 512) (packed, sent, unpacked) and, relayed by
// rank 2, a copy of rank 2's part; rank 2 gets columns [512, 1024) received straight into its
// destination buffer; rank 0 keeps rows [0, 32) by a local copy.
TransferPlan ThreeRankPlan(LinkClass link) {
  TransferPlan plan;
  plan.strategy = "reshard";
  plan.num_ranks = 3;
  plan.source_buffers = {{0, "w", kRows * kCols * 4}};
  plan.destination_buffers = {{0, "rows", 32 * kCols * 4},
                              {1, "left", kRows * 512 * 4},
                              {2, "right", kRows * 512 * 4},
                              {1, "relayed", kRows * 512 * 4}};
  const int64_t half = kRows * 512 * 4;
  int slot_a = plan.AddSlot(0, half), slot_b = plan.AddSlot(0, half), slot_c = plan.AddSlot(1, half);
  Op pack_a{.kind = OpKind::kPack, .rank = 0, .bytes = half};
  int pa = plan.AddOp(pack_a, {},
                      {{Fp32Matrix(Space::kSource, 0, 0, kRows, 512, kCols),
                        Fp32Matrix(Space::kStaging, slot_a, 0, kRows, 512, 512)}});
  Op send_a{.kind = OpKind::kSend, .link = link, .rank = 0, .peer = 1, .message = 1, .bytes = half};
  send_a.SetData(ByteRange(Space::kStaging, slot_a, 0, half));
  plan.AddOp(send_a, {pa});
  Op pack_b{.kind = OpKind::kPack, .rank = 0, .round = 1, .bytes = half};
  int pb = plan.AddOp(pack_b, {},
                      {{Fp32Matrix(Space::kSource, 0, 512 * 4, kRows, 512, kCols),
                        Fp32Matrix(Space::kStaging, slot_b, 0, kRows, 512, 512)}});
  Op send_b{.kind = OpKind::kSend, .link = link, .rank = 0, .peer = 2, .message = 2, .round = 1,
            .bytes = half};
  send_b.SetData(ByteRange(Space::kStaging, slot_b, 0, half));
  plan.AddOp(send_b, {pb});
  Op copy{.kind = OpKind::kCopy, .link = LinkClass::kSameRank, .rank = 0, .bytes = 32 * kCols * 4};
  plan.AddOp(copy, {},
             {{Fp32Matrix(Space::kSource, 0, 0, 32, kCols, kCols),
               Fp32Matrix(Space::kDestination, 0, 0, 32, kCols, kCols)}});
  Op recv_c{.kind = OpKind::kRecv, .link = link, .rank = 1, .peer = 0, .message = 1, .bytes = half};
  recv_c.SetData(ByteRange(Space::kStaging, slot_c, 0, half));
  int rc = plan.AddOp(recv_c);
  Op unpack{.kind = OpKind::kUnpack, .rank = 1, .bytes = half};
  plan.AddOp(unpack, {rc},
             {{Fp32Matrix(Space::kStaging, slot_c, 0, kRows, 512, 512),
               Fp32Matrix(Space::kDestination, 1, 0, kRows, 512, 512)}});
  Op recv_relayed{.kind = OpKind::kRecv, .link = link, .rank = 1, .peer = 2, .message = 3,
                  .bytes = half};
  recv_relayed.SetData(ByteRange(Space::kDestination, 3, 0, half));
  plan.AddOp(recv_relayed);
  Op recv_d{.kind = OpKind::kRecv, .link = link, .rank = 2, .peer = 0, .message = 2, .bytes = half};
  recv_d.SetData(ByteRange(Space::kDestination, 2, 0, half));
  int rd = plan.AddOp(recv_d);
  Op forward{.kind = OpKind::kForward, .link = link, .rank = 2, .peer = 1, .message = 3,
             .bytes = half};
  forward.SetData(ByteRange(Space::kDestination, 2, 0, half));
  plan.AddOp(forward, {rd});
  return plan;
}


// Plain heap memory, or (shared) each buffer in its own memfd block that same-node peers can map.
void AllocateHost(Rank& r, const TransferPlan& plan, int rank, bool shared) {
  auto fill = [&](const BufferTable& specs, std::vector<MemoryDesc>& out, bool source) {
    for (const BufferTable::Entry& spec : specs) {
      if (spec.rank != rank) {
        out.push_back({});
        continue;
      }
      float* data = nullptr;
      if (shared) {
        r.shared.push_back(std::move(SharedHostMemory::Allocate(spec.bytes, "ferry-test").value()));
        data = reinterpret_cast<float*>(r.shared.back().data());
        out.push_back(r.shared.back().desc());
      } else {
        r.storage.emplace_back(static_cast<size_t>(spec.bytes / 4), -1.0f);
        data = r.storage.back().data();
        out.push_back({data, spec.bytes, MemoryKind::kHost, -1});
      }
      for (int64_t i = 0; i < spec.bytes / 4; ++i) data[i] = source ? Value(i / kCols, i % kCols) : -1.0f;
    }
  };
  r.storage.reserve(16);
  r.shared.reserve(16);
  fill(plan.source_buffers, r.memory.source, true);
  fill(plan.destination_buffers, r.memory.destination, false);
}

bool VerifyThreeRankPlan(const Rank& r, int rank) {
  auto dest = [&](int buffer) { return static_cast<const float*>(r.memory.destination[buffer].base); };
  if (rank == 0) {
    for (int64_t i = 0; i < 32 * kCols; ++i) {
      if (dest(0)[i] != Value(i / kCols, i % kCols)) return false;
    }
  }
  if (rank == 1) {
    for (int64_t i = 0; i < kRows * 512; ++i) {
      if (dest(1)[i] != Value(i / 512, i % 512)) return false;
      if (dest(3)[i] != Value(i / 512, 512 + i % 512)) return false;
    }
  }
  if (rank == 2) {
    for (int64_t i = 0; i < kRows * 512; ++i) {
      if (dest(2)[i] != Value(i / 512, 512 + i % 512)) return false;
    }
  }
  return true;
}


// Bootstraps rank `rank` of `size`, every rank on its own pretend node (so all links are network)
// unless `one_node`.
Result<std::unique_ptr<Rank>> Join(int rank, int size, int port,
                                   const std::vector<std::string>& settings, bool one_node,
                                   bool replacement, bool external_store) {
  auto r = std::make_unique<Rank>();
  for (const std::string& s : settings) {
    size_t eq = s.find('=');
    FERRY_RETURN_IF_ERROR(r->config.Set(s.substr(0, eq), s.substr(eq + 1)));
  }
  FERRY_RETURN_IF_ERROR(r->config.Set("tcp.address", "127.0.0.1"));
  BootstrapInfo info;
  info.rank = rank;
  info.size = size;
  info.store_host = "127.0.0.1";
  info.store_port = port;
  info.token = "executor-test";
  info.store_external = external_store;
  FERRY_ASSIGN_OR_RETURN(r->rendezvous, StartRendezvous(info, Deadline::AfterSeconds(20)));
  CommunicatorOptions options;
  options.rank = rank;
  options.size = size;
  options.store = r->rendezvous.store.get();
  options.config = &r->config;
  options.replacement = replacement;
  for (int i = 0; i < size; ++i) options.node_of_rank.push_back(one_node ? 0 : i);
  FERRY_ASSIGN_OR_RETURN(r->comm, Communicator::Create(options, Deadline::AfterSeconds(20)));
  FERRY_ASSIGN_OR_RETURN(r->executor, Executor::Create(*r->comm));
  return r;
}

void PoisonDestinations(Rank& r) {
  for (const MemoryDesc& d : r.memory.destination) {
    if (d.base == nullptr) continue;
    for (int64_t i = 0; i < d.bytes / 4; ++i) static_cast<float*>(d.base)[i] = -1.0f;
  }
}

int AwaitAbortNaming(const Communicator& comm, int lost) {
  for (int i = 0; i < 1000 && !comm.aborted(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (!comm.aborted()) return 11;
  const std::string reason = comm.abort_reason().ToString();
  std::fprintf(stderr, "survivor saw: %s\n", reason.c_str());
  return reason.find("rank " + std::to_string(lost) + " died") != std::string::npos ? 0 : 12;
}

int SurviveDeathOf(Rank& r, const TransferPlan& plan, int rank, int lost, bool announce,
                   const std::string& lost_key) {
  auto first = r.executor->Run(plan, r.memory, Deadline::AfterSeconds(30));
  if (!first.ok()) return Report(first.status());
  if (!VerifyThreeRankPlan(r, rank)) return 2;
  // The lost rank dies as soon as it passed this barrier: a survivor whose peer monitor sees the
  // death before the barrier's answer arrives has its wait ended by the abort (Communicator::
  // Barrier). Otherwise the next refit fails, on its own link or on the monitor's abort.
  Status barrier = r.comm->Barrier("first-refit", Deadline::AfterSeconds(20));
  if (!barrier.ok() && !r.comm->aborted()) return 4;
  if (barrier.ok()) (void)r.executor->Run(plan, r.memory, Deadline::AfterSeconds(30));
  if (int code = AwaitAbortNaming(*r.comm, lost); code != 0) return code;
  if (announce) (void)r.rendezvous.store->Set(lost_key, Bytes{1}, Deadline::AfterSeconds(10));
  Status recreated = r.comm->Recreate(Deadline::AfterSeconds(30));
  if (!recreated.ok()) return Report(recreated);
  if (r.comm->epoch() != 2) return 13;
  PoisonDestinations(r);
  auto recovered = r.executor->Run(plan, r.memory, Deadline::AfterSeconds(30));
  if (!recovered.ok()) return Report(recovered.status());
  return VerifyThreeRankPlan(r, rank) ? 0 : 3;
}

int Report(const Status& status) {
  std::fprintf(stderr, "rank failed: %s\n", status.ToString().c_str());
  return 1;
}

}  // namespace ferry
