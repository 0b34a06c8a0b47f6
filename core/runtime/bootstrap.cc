// Launcher environment parsing and the TCP store rendezvous.
#include "core/runtime/bootstrap.h"

#include <cstdlib>

#include "core/layout/limits.h"

extern char** environ;

namespace ferry {

namespace {

using Env = std::map<std::string, std::string>;

const std::string* Find(const Env& env, const std::string& name) {
  auto it = env.find(name);
  return it == env.end() ? nullptr : &it->second;
}

// FERRY_<name>: unset or empty or "0" is false, "1" true, anything else an error naming it.
Result<bool> FlagVar(const Env& env, const std::string& name) {
  const std::string* text = Find(env, name);
  if (text == nullptr || text->empty() || *text == "0") return false;
  if (*text != "1") return InvalidArgument(name + " must be 0 or 1, not '" + *text + "'");
  return true;
}

Result<int> IntVar(const Env& env, const std::string& name, int fallback, bool required) {
  const std::string* text = Find(env, name);
  if (text == nullptr) {
    if (required) return InvalidArgument("environment variable " + name + " is not set");
    return fallback;
  }
  char* end = nullptr;
  long value = std::strtol(text->c_str(), &end, 10);
  if (text->empty() || *end != '\0' || value < 0 || value > (1 << 30)) {
    return InvalidArgument("environment variable " + name + "='" + *text +
                           "' is not a non-negative integer");
  }
  return static_cast<int>(value);
}

}  // namespace

Result<BootstrapInfo> BootstrapFromEnvironment(const Env& env) {
  BootstrapInfo info;
  struct Scheme {
    const char* launcher;
    const char* rank;
    const char* size;
    const char* local_rank;
    const char* local_size;
  };
  static const Scheme kSchemes[] = {
      {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
      {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
       "OMPI_COMM_WORLD_LOCAL_SIZE"},
      {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"},
  };
  const Scheme* scheme = nullptr;
  for (const Scheme& s : kSchemes) {
    if (Find(env, s.rank) != nullptr) {
      scheme = &s;
      break;
    }
  }
  if (scheme == nullptr) {
    return InvalidArgument(
        "no launcher environment found: set RANK/WORLD_SIZE (torchrun), OMPI_COMM_WORLD_RANK "
        "(mpirun) or SLURM_PROCID (srun)");
  }
  info.launcher = scheme->launcher;
  FERRY_ASSIGN_OR_RETURN(info.rank, IntVar(env, scheme->rank, 0, true));
  FERRY_ASSIGN_OR_RETURN(info.size, IntVar(env, scheme->size, 0, true));
  FERRY_ASSIGN_OR_RETURN(info.local_rank, IntVar(env, scheme->local_rank, 0, false));
  FERRY_ASSIGN_OR_RETURN(info.local_size, IntVar(env, scheme->local_size, 1, false));
  if (info.size < 1) return InvalidArgument(std::string(scheme->size) + " must be at least 1");
  if (info.size > kMaxRanks) {
    return InvalidArgument(std::string(scheme->size) + "=" + std::to_string(info.size) +
                           " is over the limit of " + std::to_string(kMaxRanks) + " ranks (kMaxRanks)");
  }
  if (info.rank >= info.size) {
    return InvalidArgument(std::string(scheme->rank) + "=" + std::to_string(info.rank) +
                           " is not below " + scheme->size + "=" + std::to_string(info.size));
  }
  const std::string* host = Find(env, "FERRY_STORE_ADDR");
  if (host == nullptr) host = Find(env, "MASTER_ADDR");
  if (host == nullptr || host->empty()) {
    return InvalidArgument(
        "no store address: set MASTER_ADDR or FERRY_STORE_ADDR to the store's host (rank 0's, or "
        "that of the external store with FERRY_STORE_EXTERNAL=1)");
  }
  info.store_host = *host;
  const std::string* bind = Find(env, "FERRY_STORE_BIND");
  info.store_bind = bind != nullptr && !bind->empty() ? *bind : info.store_host;
  const char* port_var = Find(env, "FERRY_STORE_PORT") != nullptr ? "FERRY_STORE_PORT" : "MASTER_PORT";
  FERRY_ASSIGN_OR_RETURN(info.store_port, IntVar(env, port_var, 0, true));
  if (info.store_port < 1 || info.store_port > 65535) {
    return InvalidArgument(std::string(port_var) + " must be a TCP port (1-65535)");
  }
  const std::string* token = Find(env, "FERRY_TOKEN");
  if (token == nullptr || token->empty()) {
    return InvalidArgument("FERRY_TOKEN is not set: every rank needs the same secret token");
  }
  info.token = *token;
  FERRY_ASSIGN_OR_RETURN(info.replacement, FlagVar(env, "FERRY_REPLACEMENT"));
  FERRY_ASSIGN_OR_RETURN(info.store_external, FlagVar(env, "FERRY_STORE_EXTERNAL"));
  return info;
}

const std::vector<BootstrapVariable>& BootstrapVariables() {
  static const std::vector<BootstrapVariable> kVariables = {
      {"FERRY_TOKEN", "the job's secret; every rank and the store must have the same (required)"},
      {"FERRY_STORE_ADDR", "the store's host (default MASTER_ADDR)"},
      {"FERRY_STORE_PORT", "the store's port (default MASTER_PORT)"},
      {"FERRY_STORE_BIND", "the address rank 0's store listens on (default the store's host)"},
      {"FERRY_STORE_EXTERNAL",
       "1: the store is served by another process (ferry store, ferry run's launcher), not rank 0"},
      {"FERRY_REPLACEMENT", "1: this process replaces a failed rank and joins the next epoch"},
  };
  return kVariables;
}

Status CheckBootstrapInfo(const BootstrapInfo& info) {
  auto out_of = [](const std::string& field, int value, const std::string& range) {
    return InvalidArgument(field + " " + std::to_string(value) + " is not in " + range);
  };
  if (info.size < 1 || info.size > kMaxRanks) {
    return out_of("world size", info.size, "[1, " + std::to_string(kMaxRanks) + "] (kMaxRanks)");
  }
  if (info.rank < 0 || info.rank >= info.size) {
    return out_of("rank", info.rank, "[0, " + std::to_string(info.size) + ") (the world size)");
  }
  if (info.local_size < 1 || info.local_size > info.size) {
    return out_of("local world size", info.local_size,
                  "[1, " + std::to_string(info.size) + "] (the world size)");
  }
  if (info.local_rank < 0 || info.local_rank >= info.local_size) {
    return out_of("local rank", info.local_rank,
                  "[0, " + std::to_string(info.local_size) + ") (the local world size)");
  }
  if (info.store_port < 1 || info.store_port > 65535) {
    return out_of("store port", info.store_port, "[1, 65535]");
  }
  if (info.store_host.empty()) return InvalidArgument("the store host is empty");
  return Status::Ok();
}

Result<BootstrapInfo> BootstrapFromProcessEnvironment() {
  Env env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string entry(*e);
    size_t eq = entry.find('=');
    if (eq != std::string::npos) env[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  return BootstrapFromEnvironment(env);
}

Result<Rendezvous> StartRendezvous(const BootstrapInfo& info, Deadline deadline) {
  Rendezvous rendezvous;
  if (info.rank == 0 && !info.store_external) {
    const std::string& bind = info.store_bind.empty() ? info.store_host : info.store_bind;
    auto server = TcpStoreServer::Start(bind, info.store_port, info.token);
    if (!server.ok()) {
      return server.status().WithContext(
          "rank 0 starting the store on " + bind +
          " (the store listens on MASTER_ADDR/FERRY_STORE_ADDR; set FERRY_STORE_BIND to the local "
          "address to listen on when that name is not one of this host's)");
    }
    rendezvous.server = std::move(*server);
  }
  auto client = TcpStoreClient::Connect(info.store_host, info.store_port, info.token, deadline,
                                        std::chrono::duration<double>(info.store_reply_grace_s));
  if (!client.ok()) {
    return client.status().WithContext("rank " + std::to_string(info.rank) + " joining the " +
                                       (info.store_external ? "external store" : "store rank 0 hosts"));
  }
  rendezvous.store = std::move(*client);
  return rendezvous;
}

}  // namespace ferry
