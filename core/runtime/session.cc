// Session: bootstrap -> rendezvous -> communicator -> executor.
#include "core/runtime/session.h"

#include "core/runtime/runtime_options.h"

namespace ferry {

Result<std::unique_ptr<Session>> Session::Join(const BootstrapInfo& info, Config config,
                                               std::vector<int> node_of_rank) {
  FERRY_RETURN_IF_ERROR(CheckBootstrapInfo(info));
  FERRY_RETURN_IF_ERROR(CheckCoreOptions(config));
  std::unique_ptr<Session> session(new Session());
  session->info_ = info;
  session->config_ = std::make_unique<Config>(std::move(config));
  FERRY_ASSIGN_OR_RETURN(session->info_.store_reply_grace_s, session->config_->GetSeconds("deadline.peer_dead"));
  FERRY_ASSIGN_OR_RETURN(double connect_seconds, session->config_->GetSeconds("deadline.connect"));
  Deadline deadline = Deadline::AfterSeconds(connect_seconds);
  FERRY_ASSIGN_OR_RETURN(session->rendezvous_, StartRendezvous(session->info_, deadline));
  CommunicatorOptions options;
  options.rank = info.rank;
  options.size = info.size;
  options.store = session->rendezvous_.store.get();
  // StartRendezvous: rank 0 hosts the store unless it is external; an external store's death is
  // no rank's (its clients fail their requests, naming the store's address).
  options.store_host_rank = session->info_.store_external ? -1 : 0;
  options.replacement = info.replacement;
  options.config = session->config_.get();
  options.node_of_rank = std::move(node_of_rank);
  FERRY_ASSIGN_OR_RETURN(session->communicator_, Communicator::Create(options, deadline));
  FERRY_ASSIGN_OR_RETURN(session->executor_, Executor::Create(*session->communicator_));
  return session;
}

Result<std::unique_ptr<Session>> Session::JoinFromEnvironment(const std::string& yaml_path,
                                                              Config defaults) {
  FERRY_ASSIGN_OR_RETURN(BootstrapInfo info, BootstrapFromProcessEnvironment());
  Config config = std::move(defaults);
  if (!yaml_path.empty()) FERRY_RETURN_IF_ERROR(config.LoadYamlFile(yaml_path));
  FERRY_RETURN_IF_ERROR(config.ApplyProcessEnvironment());
  return Join(info, std::move(config));
}

Session::~Session() {
  executor_.reset();
  communicator_.reset();
  rendezvous_.store.reset();
  rendezvous_.server.reset();
}

std::string Session::TakeRecoveryNotice() {
  if (info_.store_external || info_.rank != 0 || recovery_noticed_) return "";
  recovery_noticed_ = true;
  return "ferry: notice: rank 0 hosts the store (FERRY_STORE_EXTERNAL is not set), so rank 0 cannot be "
         "replaced: its death takes the store with it and ends the job, while any other rank can be "
         "replaced. To make rank 0 replaceable too, serve the store with `ferry store` and set "
         "FERRY_STORE_EXTERNAL=1 on every rank (docs/running.md, \"No rank hosts the store\").";
}

Status Session::Finish() {
  FERRY_ASSIGN_OR_RETURN(double seconds, config_->GetSeconds("deadline.store"));
  return FinalBarrier(*rendezvous_.store, "session-finish", info_.rank, info_.size,
                      info_.store_external ? -1 : 0, Deadline::AfterSeconds(seconds));
}

}  // namespace ferry
