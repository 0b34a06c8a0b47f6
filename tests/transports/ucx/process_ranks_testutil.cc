// process_ranks_testutil (see the header): fork, store rendezvous, connect-all, deadline and kill.
#include "tests/transports/ucx/process_ranks_testutil.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "core/runtime/tcp_store.h"

namespace ferry::testing {
namespace {

constexpr char kToken[] = "ferry-transport-test";

Status RunChild(int rank, int size, int port, const TransportUnderTest& under_test,
                const RankScenario& scenario, double timeout_seconds) {
  const Deadline deadline = Deadline::AfterSeconds(timeout_seconds);
  FERRY_ASSIGN_OR_RETURN(auto store, TcpStoreClient::Connect("127.0.0.1", port, kToken, deadline));
  FERRY_ASSIGN_OR_RETURN(Config config, MakeConfig(under_test));
  TransportContext context;
  context.secret = "transport-test-secret";
  context.rank = rank;
  context.size = size;
  context.epoch = 1;
  context.config = &config;
  context.store = store.get();
  context.group_key = "process-test";
  FERRY_ASSIGN_OR_RETURN(auto transport,
                         TransportRegistry::Default().Create(under_test.name, context));
  FERRY_ASSIGN_OR_RETURN(Bytes info, transport->LocalEndpointInfo());
  FERRY_RETURN_IF_ERROR(store->Set("ep/" + std::to_string(rank), info, deadline));
  for (int peer = 0; peer < size; ++peer) {
    FERRY_ASSIGN_OR_RETURN(Bytes peer_info, store->Get("ep/" + std::to_string(peer), deadline));
    FERRY_RETURN_IF_ERROR(transport->Connect(peer, peer_info, deadline));
  }
  FERRY_RETURN_IF_ERROR(Barrier(*store, "connected", size, deadline));
  RankEnv env{rank, size, transport.get(), store.get()};
  FERRY_RETURN_IF_ERROR(scenario(env));
  if (env.skip_final_barrier) return Status::Ok();
  // Nobody tears down while a peer may still be receiving from it.
  return Barrier(*store, "done", size, deadline);
}

}  // namespace

Result<Config> MakeConfig(const TransportUnderTest& transport) {
  Config config = RuntimeConfig();
  for (const auto& [name, value] : transport.options) {
    FERRY_RETURN_IF_ERROR(config.Set(name, value));
  }
  return config;
}

Status RunRanks(int size, const TransportUnderTest& transport, const RankScenario& scenario,
                double timeout_seconds) {
  // Children are forked before the store's threads start: each gets the port through a pipe.
  std::vector<pid_t> children;
  std::vector<int> port_pipes;
  std::vector<int> error_pipes;
  for (int rank = 0; rank < size; ++rank) {
    int port_pipe[2];
    int error_pipe[2];
    if (pipe(port_pipe) != 0 || pipe(error_pipe) != 0) return Internal("pipe failed");
    pid_t pid = fork();
    if (pid < 0) return Internal("fork failed");
    if (pid == 0) {
      close(port_pipe[1]);
      close(error_pipe[0]);
      int port = 0;
      if (read(port_pipe[0], &port, sizeof(port)) != sizeof(port)) _exit(3);
      Status status = RunChild(rank, size, port, transport, scenario, timeout_seconds);
      if (!status.ok()) {
        const std::string text = status.ToString();
        ssize_t ignored = write(error_pipe[1], text.data(), text.size());
        (void)ignored;
        _exit(1);
      }
      _exit(0);
    }
    close(port_pipe[0]);
    close(error_pipe[1]);
    fcntl(error_pipe[0], F_SETFL, fcntl(error_pipe[0], F_GETFL) | O_NONBLOCK);
    children.push_back(pid);
    port_pipes.push_back(port_pipe[1]);
    error_pipes.push_back(error_pipe[0]);
  }
  auto server = TcpStoreServer::Start("127.0.0.1", 0, kToken);
  const int port = server.ok() ? (*server)->port() : 0;
  for (int fd : port_pipes) {
    ssize_t ignored = write(fd, &port, sizeof(port));
    (void)ignored;
    close(fd);
  }

  const Deadline deadline = Deadline::AfterSeconds(timeout_seconds + 5);
  std::vector<bool> running(size, true);
  std::vector<std::string> errors(size);
  Status result = server.ok() ? Status::Ok() : server.status();
  int alive = size;
  while (alive > 0) {
    for (int rank = 0; rank < size; ++rank) {
      if (!running[rank]) continue;
      char buffer[4096];
      ssize_t n;
      while ((n = read(error_pipes[rank], buffer, sizeof(buffer))) > 0) errors[rank].append(buffer, n);
      int wstatus = 0;
      if (waitpid(children[rank], &wstatus, WNOHANG) != children[rank]) continue;
      while ((n = read(error_pipes[rank], buffer, sizeof(buffer))) > 0) errors[rank].append(buffer, n);
      running[rank] = false;
      --alive;
      const bool clean = WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0;
      if (!clean && result.ok()) {
        result = Internal("rank " + std::to_string(rank) + " failed: " +
                          (errors[rank].empty()
                               ? "exit status " + std::to_string(wstatus)
                               : errors[rank]));
      }
    }
    if (alive == 0) break;
    if (deadline.Expired()) {
      for (int rank = 0; rank < size; ++rank) {
        if (running[rank]) {
          kill(children[rank], SIGKILL);
          waitpid(children[rank], nullptr, 0);
        }
      }
      result = DeadlineExceeded("ranks still running after " + std::to_string(timeout_seconds) +
                                " s were killed");
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (int fd : error_pipes) close(fd);
  return result;
}

Result<Completion> WaitFor(Transport& transport, RequestId request,
                           std::map<RequestId, Completion>& others, Deadline deadline) {
  if (auto it = others.find(request); it != others.end()) {
    Completion done = it->second;
    others.erase(it);
    return done;
  }
  Completion buffer[16];
  while (true) {
    FERRY_ASSIGN_OR_RETURN(int n, transport.Poll(buffer, deadline));
    for (int i = 0; i < n; ++i) others[buffer[i].request] = buffer[i];
    if (auto it = others.find(request); it != others.end()) {
      Completion done = it->second;
      others.erase(it);
      return done;
    }
    if (deadline.Expired()) {
      return DeadlineExceeded("request " + std::to_string(request) + " did not complete");
    }
  }
}

Result<std::map<RequestId, Completion>> WaitAll(Transport& transport,
                                                const std::vector<RequestId>& requests,
                                                Deadline deadline) {
  std::map<RequestId, Completion> done;
  Completion buffer[64];
  while (done.size() < requests.size()) {
    FERRY_ASSIGN_OR_RETURN(int n, transport.Poll(buffer, deadline));
    for (int i = 0; i < n; ++i) done[buffer[i].request] = buffer[i];
    if (n == 0 && deadline.Expired()) {
      return DeadlineExceeded(std::to_string(requests.size() - done.size()) + " of " +
                              std::to_string(requests.size()) + " requests did not complete");
    }
  }
  return done;
}

void FillPattern(uint8_t* data, size_t bytes, uint64_t seed) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(data + i, &x, 8);
  }
  for (; i < bytes; ++i) data[i] = static_cast<uint8_t>(seed + i);
}

Status CheckPattern(const uint8_t* data, size_t bytes, uint64_t seed) {
  std::vector<uint8_t> expected(bytes);
  FillPattern(expected.data(), bytes, seed);
  for (size_t i = 0; i < bytes; ++i) {
    if (data[i] != expected[i]) {
      return Internal("byte " + std::to_string(i) + " of " + std::to_string(bytes) +
                      " differs (seed " + std::to_string(seed) + ")");
    }
  }
  return Status::Ok();
}

}  // namespace ferry::testing
