// Communicator: a group of ranks with one epoch, its rendezvous store and its transports (one per
// link class, chosen by Config: transport.same_rank, transport.intra_node, transport.network).
// Created, aborted and recreated as one unit:
//   Create   every rank calls it; it publishes endpoint info through the store under the epoch's
//            keys, connects every transport to every peer that uses it, and meets at a barrier.
//   Abort    any thread; returns within deadline.abort even when peers are dead or a transport's
//            Abort hangs (that transport is quarantined: never waited on, never destroyed). The
//            reason is sent to every peer, whose communicators abort with it in turn.
//   Monitor  a PeerMonitor (peer_monitor.h) watches every peer over its own authenticated
//            connection and aborts the communicator, naming the rank at fault, when a peer dies
//            or closes its connection (at once), stays silent for deadline.peer_dead (stopped or
//            hung), or announces an abort. Independent of the transports, so every transport
//            gets the same bound.
//   Identify for same-node peers (unless executor.direct_intra_node is off) it learns which
//            process each one is from the kernel, over authenticated Unix-domain sockets
//            (peer_process.h); direct reads use those pids, never one a message names.
//   Recreate every rank calls it after a failure; it replaces the transports with fresh ones for
//            epoch + 1. A rank whose process died is replaced by a fresh process that calls
//            Create with `replacement` set: it joins at that same epoch. Transports refuse connections of other epochs and tags carry the epoch,
//            so messages from an old epoch are dropped.
//
// Threading: Abort() and the const accessors may be called from any thread. Everything else, and
// the transports it hands out, are driven by one thread at a time (the executor's).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/base/deadline.h"
#include "core/base/status.h"
#include "core/layout/topology.h"
#include "core/base/config.h"
#include "core/runtime/peer_monitor.h"
#include "core/runtime/peer_process.h"
#include "core/runtime/store.h"
#include "core/runtime/transport.h"

namespace ferry {

struct CommunicatorOptions {
  int rank = 0;
  int size = 1;
  Store* store = nullptr;         // not owned; must outlive the communicator
  const Config* config = nullptr; // not owned; must outlive the communicator
  // Node of every rank (size entries) when the caller knows it (tests that pretend several
  // nodes); empty: ranks with the same host name share a node.
  std::vector<int> node_of_rank;
  const TransportRegistry* registry = &TransportRegistry::Default();
  // The rank whose process hosts `store` (Session: 0, or -1 with an external store), or -1. When the peer monitor finds that
  // rank dead or stopped, the store is closed, so that requests in progress on other threads end
  // at once with the abort that names it instead of waiting out their deadlines.
  int store_host_rank = -1;
  // This process replaces a rank whose process failed: it joins the epoch the survivors reach
  // with their next Recreate (the one after the latest epoch that connected, which the store
  // records) instead of epoch 1. The survivors' Recreate waits for it (by its deadline).
  bool replacement = false;
};

class Communicator {
 public:
  static Result<std::unique_ptr<Communicator>> Create(CommunicatorOptions options, Deadline deadline);
  ~Communicator();

  int rank() const { return options_.rank; }
  int size() const { return options_.size; }
  uint64_t epoch() const { return epoch_; }
  const Config& config() const { return *options_.config; }

  LinkClass LinkTo(int peer) const;
  // The transport that carries messages to `peer` (by link class), or an error naming the peer
  // when the communicator is aborted.
  Result<Transport*> TransportFor(int peer);
  std::string TransportNameFor(int peer) const;
  // Every distinct transport in use, each once.
  std::vector<Transport*> transports();

  // The wire tag of plan message `message` in this epoch: the epoch lives in the top 16 bits.
  uint64_t Tag(int64_t message) const {
    return (epoch_ << 48) | (static_cast<uint64_t>(message) & ((1ull << 48) - 1));
  }
  // The tag of the receiver's "done" reply to a direct read of `message` (core/runtime/direct_read.h):
  // bit 47 set, so plan messages must stay below 2^47.
  uint64_t AckTag(int64_t message) const { return Tag(message) | (1ull << 47); }

  // The processes behind this epoch's same-node peers, verified by the kernel when the epoch
  // connected; null when none were (no same-node peer, or executor.direct_intra_node off). Valid
  // until Recreate; the executor's thread.
  const PeerProcesses* peer_processes() const { return processes_.get(); }

  // Fails every transport with `reason`; returns within the config's deadline.abort. Idempotent;
  // any thread. After it, TransportFor fails until Recreate.
  void Abort(const Status& reason);
  bool aborted() const { return aborted_.load(); }
  Status abort_reason() const;
  // When this epoch aborted (the wall clock, CLOCK_REALTIME, at the first Abort), so that callers
  // can time detection against a fault's own timestamp; the epoch of the clock while not aborted.
  std::chrono::system_clock::time_point aborted_at() const;
  // Every transport, of this epoch or an earlier one, whose Abort did not return within
  // deadline.abort ("fault (epoch 1)"), oldest first. Each was also reported on stderr when it
  // was quarantined. Any thread.
  std::vector<std::string> quarantined() const;

  // A store barrier of `name` among this communicator's ranks that also ends, with the abort
  // reason, as soon as the communicator aborts (a peer died or hung): Abort fires the epoch's
  // StoreInterrupt, which ends the store wait within milliseconds on every store, so survivors
  // between refits do not wait out `deadline` for a rank that will never arrive. Blocks; the
  // executor's thread.
  Status Barrier(std::string_view name, Deadline deadline);

  // Every rank calls it: drops the transports (quarantined ones are leaked, not waited on) and
  // connects fresh ones for epoch + 1.
  Status Recreate(Deadline deadline);

 private:
  explicit Communicator(CommunicatorOptions options) : options_(std::move(options)) {}
  Status Connect(Deadline deadline);
  // `failure` (of the store: its host may have died) with the communicator's abort reason added
  // when the peer monitor reports one within three heartbeats; else `failure` itself.
  Status WithCause(Status failure);
  // Connects a PeerMonitor to every peer through the store keys under `prefix` and starts it.
  Status StartMonitor(const std::string& prefix, Deadline deadline);
  // Verifies the processes of this rank's same-node peers (PeerProcesses) for the epoch `prefix`.
  Status IdentifyNodePeers(const std::string& prefix, Deadline deadline);
  // Waits for an Abort in progress on another thread, then drops the transports.
  void DropTransports();
  // This epoch's store interrupt: fired by Abort, replaced by Recreate.
  std::shared_ptr<StoreInterrupt> Interrupt() const;

  CommunicatorOptions options_;
  uint64_t epoch_ = 0;
  std::string group_key_;
  std::vector<int> node_of_rank_;
  std::vector<std::string> transport_of_peer_;  // transport name per peer
  std::map<std::string, std::unique_ptr<Transport>> transports_;
  std::map<std::string, bool> quarantined_;      // of this epoch's transports
  std::vector<std::string> quarantine_log_;      // every epoch's, for quarantined()
  std::unique_ptr<PeerProcesses> processes_;
  std::unique_ptr<PeerMonitor> monitor_;  // guarded by mu_ (the pointer; the monitor is thread-safe)
  std::atomic<bool> aborted_{false};
  // guards abort_reason_, aborted_at_, aborting_, interrupt_, quarantined_, quarantine_log_, monitor_
  mutable std::mutex mu_;
  std::condition_variable abort_done_;  // aborting_ became false
  bool aborting_ = false;               // an Abort call is between its start and its return
  std::shared_ptr<StoreInterrupt> interrupt_ = std::make_shared<StoreInterrupt>();
  Status abort_reason_;
  std::chrono::system_clock::time_point aborted_at_{};
};

}  // namespace ferry
