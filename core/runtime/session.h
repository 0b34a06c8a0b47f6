// Session: everything one process needs to take part in refits, built from what the launcher set:
// bootstrap info (torchrun / Open MPI / Slurm environment), the rendezvous store (hosted by rank 0,
// or by another process with FERRY_STORE_EXTERNAL=1),
// the config, the communicator and an executor. `ferry run` and library users start here.
//
// Members are destroyed in dependency order (executor, communicator, store, server). Not
// thread-safe; one session per process is the normal case.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/runtime/bootstrap.h"
#include "core/runtime/communicator.h"
#include "core/base/config.h"
#include "core/runtime/executor.h"
#include "core/runtime/transport.h"

namespace ferry {

class Session {
 public:
  // Joins with explicit bootstrap info and config. `node_of_rank` as in CommunicatorOptions
  // (empty: by host name). Waits for the other ranks until config's deadline.connect.
  static Result<std::unique_ptr<Session>> Join(const BootstrapInfo& info, Config config,
                                               std::vector<int> node_of_rank = {});
  // Reads the process environment for bootstrap info and FERRY_* overrides, after applying
  // `yaml_path` (skipped when empty) over `defaults`: the runtime's options, or
  // ferry::DefaultConfig() (core/refit/config.h) when the file also holds planner options.
  static Result<std::unique_ptr<Session>> JoinFromEnvironment(const std::string& yaml_path,
                                                              Config defaults = RuntimeConfig());
  ~Session();

  const BootstrapInfo& info() const { return info_; }
  const Config& config() const { return *config_; }
  Store& store() { return *rendezvous_.store; }
  Communicator& communicator() { return *communicator_; }
  Executor& executor() { return *executor_; }

  // The last barrier: when rank 0 hosts the store it returns only after every rank has passed
  // it, so no rank loses the store while it still needs it (an external store outlives them all).
  // Call before the process exits.
  Status Finish();

  // For a caller that is about to recover (Python Session.recreate, `ferry run --recover`): when
  // rank 0 hosts the store (no FERRY_STORE_EXTERNAL), a notice that rank 0 cannot be replaced,
  // since its death takes the store with it, and how to make it replaceable. Returned once per
  // session and on rank 0 only, so that a job prints it once; empty otherwise. The caller prints it.
  std::string TakeRecoveryNotice();

 private:
  Session() = default;

  BootstrapInfo info_;
  std::unique_ptr<Config> config_;
  Rendezvous rendezvous_;
  std::unique_ptr<Communicator> communicator_;
  std::unique_ptr<Executor> executor_;
  bool recovery_noticed_ = false;
};

}  // namespace ferry
