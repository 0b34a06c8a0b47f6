// `ferry store`: the rendezvous store as a process of its own, so that no rank hosts it and every
// rank, rank 0 included, can die and be replaced (ranks join it with FERRY_STORE_EXTERNAL=1). It
// is the TcpStoreServer rank 0 would run (core/runtime/tcp_store.h): the same token check
// (FERRY_TOKEN), the same connection caps and limits. As torchrun's agent hosts its TCPStore
// rather than a worker (torch/distributed/elastic/agent/server/api.py, upstream PyTorch).
//
// Serves until SIGTERM or SIGINT, then exits 0. Prints "ferry store: serving on ADDR:PORT" once
// listening (with --port 0, the port chosen), flushed, so a script can read the port from it.
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "core/runtime/socket_util.h"
#include "core/runtime/tcp_store.h"
#include "tools/cli/commands.h"

namespace ferry::cli {
namespace {

struct StoreArgs {
  int port = -1;
  std::string bind;  // empty: this host's first non-loopback IPv4 address (LocalAddress)
};

// Blocks SIGTERM and SIGINT in this thread before the server's threads start (they inherit the
// mask), so that only the sigwait below takes them.
sigset_t BlockStopSignals() {
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  return stop;
}

int ServeStore(const StoreArgs& args) {
  const char* token = std::getenv("FERRY_TOKEN");
  if (token == nullptr || *token == '\0') {
    std::fprintf(stderr, "ferry store: FERRY_TOKEN is not set: the store admits only holders of the job's token\n");
    return 1;
  }
  const std::string bind = args.bind.empty() ? LocalAddress() : args.bind;
  const sigset_t stop = BlockStopSignals();
  auto server = TcpStoreServer::Start(bind, args.port, token);
  if (!server.ok()) {
    std::fprintf(stderr, "ferry store: %s\n", server.status().WithContext("listening on " + bind).message().c_str());
    return 1;
  }
  std::printf("ferry store: serving on %s:%d; ranks join with FERRY_STORE_EXTERNAL=1 "
              "MASTER_ADDR=%s MASTER_PORT=%d and this FERRY_TOKEN; stop with SIGTERM\n",
              bind.c_str(), (*server)->port(), bind.c_str(), (*server)->port());
  std::fflush(stdout);
  int signal = 0;
  sigwait(&stop, &signal);
  const int rejected = (*server)->rejected();
  server->reset();
  std::printf("ferry store: stopped by %s; %d connection(s) refused while serving\n",
              signal == SIGINT ? "SIGINT" : "SIGTERM", rejected);
  return 0;
}

}  // namespace

void AddStoreCommand(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<StoreArgs>();
  CLI::App* store = app.add_subcommand(
      "store", "serve the rendezvous store on its own (token from FERRY_TOKEN), so that no rank hosts it: "
               "ranks join with FERRY_STORE_EXTERNAL=1 and any of them can be replaced");
  store->add_option("--port", args->port, "TCP port to listen on (0: pick a free one and print it)")
      ->required()
      ->check(CLI::Range(0, 65535));
  store->add_option("--bind", args->bind,
                    "address to listen on (default: this host's first non-loopback IPv4 address; "
                    "0.0.0.0 only when asked for by name)");
  store->callback([args, exit_code] { *exit_code = ServeStore(*args); });
}

}  // namespace ferry::cli
