// Bootstrap: who am I (rank, size, local rank) and where is the rendezvous store, read from what
// launchers already set — torchrun, Open MPI, Slurm — or given explicitly. The environment is read
// only where the caller asks (BootstrapFromProcessEnvironment), never deep inside the runtime.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/base/deadline.h"
#include "core/base/status.h"
#include "core/runtime/store.h"
#include "core/runtime/tcp_store.h"

namespace ferry {

struct BootstrapInfo {
  std::string launcher;  // "torchrun", "openmpi", "slurm", "explicit"
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
  std::string store_host;  // the store's host: rank 0's, or the external store's
  // The address rank 0's store listens on: FERRY_STORE_BIND, else store_host (the interface the
  // job uses). Never every interface unless asked for by name ("0.0.0.0").
  std::string store_bind;
  int store_port = 0;
  std::string token;  // FERRY_TOKEN
  // How long a store client waits for the store host's reply beyond what the request itself may
  // take (Session sets deadline.peer_dead): a stopped store host fails requests within it.
  double store_reply_grace_s = 5.0;
  // FERRY_REPLACEMENT=1: this process replaces a rank whose process failed and joins the
  // survivors' next epoch (CommunicatorOptions::replacement).
  bool replacement = false;
  // FERRY_STORE_EXTERNAL=1: the store is served by another process (`ferry store`, a launcher
  // such as `ferry run`'s), not by rank 0; rank 0 is then an ordinary rank that can be replaced.
  bool store_external = false;
};

// The bootstrap variables a process reads besides the launcher's rank variables, with their
// meaning, for `ferry config` and the docs.
struct BootstrapVariable {
  const char* name;
  const char* help;
};
const std::vector<BootstrapVariable>& BootstrapVariables();

// Reads the launcher variables from `environment` (name -> value):
//   torchrun: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT
//   Open MPI: OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK,
//             OMPI_COMM_WORLD_LOCAL_SIZE
//   Slurm:    SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE
// The store address is FERRY_STORE_ADDR/FERRY_STORE_PORT if set, else MASTER_ADDR/MASTER_PORT;
// the token is FERRY_TOKEN; FERRY_STORE_BIND overrides the address rank 0's store listens on;
// FERRY_STORE_EXTERNAL=1 says no rank hosts it; FERRY_REPLACEMENT=1 marks a replacement process.
// Fails with a message naming the missing or malformed variable.
Result<BootstrapInfo> BootstrapFromEnvironment(const std::map<std::string, std::string>& environment);
Result<BootstrapInfo> BootstrapFromProcessEnvironment();

// Bootstrap info filled in by a caller rather than read from a launcher (Session::Join checks it
// first): world size in [1, kMaxRanks], rank in [0, size), local rank in [0, local size), a store
// port in 1-65535 and a store host. Fails naming the field, its value and the allowed range, so
// that a rank outside the world fails at once instead of waiting for a store nobody serves.
Status CheckBootstrapInfo(const BootstrapInfo& info);

// The rendezvous for one process: rank 0 starts the server (owned here) unless the store is
// external, and every rank, rank 0 included, holds a client.
struct Rendezvous {
  std::unique_ptr<TcpStoreServer> server;  // only on rank 0, and only when it hosts the store
  std::unique_ptr<Store> store;
};

// Unless info.store_external, rank 0 listens on info.store_bind (store_host when empty) :
// store_port; everyone connects to store_host:store_port presenting info.token, retrying until
// `deadline` (an external store may start after the ranks).
Result<Rendezvous> StartRendezvous(const BootstrapInfo& info, Deadline deadline);

}  // namespace ferry
