// PeerMonitor: failure detection for a communicator, independent of its transports. It keeps a
// PeerWatch (one authenticated TCP connection per peer, peer_watch.h) and a thread that sends a
// heartbeat every `heartbeat` seconds and reports, through `on_failure`, the first of:
//   - a peer whose connection closed without a goodbye (its process died, or closed its links):
//     Unavailable "rank N died or closed its connection";
//   - a peer silent for `peer_dead - 2 * heartbeat` seconds (stopped, hung, or its host
//     unreachable): Unavailable "rank N sent no heartbeat for S s (stopped or hung)". The silence
//     is counted from the last heartbeat heard, which a peer sends up to one interval before it
//     stops, and the monitor wakes at the moment a peer's silence expires: a stop is reported at
//     most `peer_dead - heartbeat` after it happened, leaving an interval to abort within
//     `peer_dead`;
//   - a peer that announced an abort: Aborted "rank N aborted: <its reason>".
// Announce() sends this rank's own abort reason to every peer, so that an abort anywhere reaches
// everyone within one heartbeat instead of each rank waiting out its deadline. The culprit named
// is always the rank observed failing, never a neighbour that merely timed out waiting for it.
//
// Lifecycle: Listen, Connect every peer, Start; the destructor says goodbye to every peer (so an
// orderly exit is not mistaken for a death) and joins the thread.
// Threading: Listen/Connect/Start from one thread before the monitor runs; Announce from any
// thread; on_failure is called at most once, on the monitor's thread, and may call Announce.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "core/base/deadline.h"
#include "core/base/status.h"
#include "core/runtime/peer_watch.h"

namespace ferry {

struct PeerMonitorOptions {
  int rank = 0;
  int size = 1;
  uint64_t epoch = 0;
  std::string secret;          // authenticates watch connections; must not be empty
  std::string host;            // where to listen ("" : this host's first non-loopback address)
  double heartbeat_s = 0.1;    // interval between heartbeats
  double peer_dead_s = 5.0;    // a stop is reported within this; at least 4 * heartbeat_s
  double first_beat_s = 60.0;  // silence allowed before a peer's first heartbeat (it may still be
                               // connecting to others)
};

class PeerMonitor {
 public:
  // `why` names the rank at fault; `lost_rank` is the rank whose process died or stopped (it will
  // not answer again: a store it hosts is gone too), seen here or by the peer whose abort this
  // is; -1 when no lost process caused the failure.
  using OnFailure = std::function<void(const Status& why, int lost_rank)>;
  PeerMonitor(PeerMonitorOptions options, OnFailure on_failure);
  ~PeerMonitor();
  PeerMonitor(const PeerMonitor&) = delete;
  PeerMonitor& operator=(const PeerMonitor&) = delete;

  Status Listen() { return watch_.Listen(options_.host); }
  const std::string& host() const { return watch_.host(); }
  uint16_t port() const { return watch_.port(); }
  // Blocks until `peer` is connected or `deadline` (see PeerWatch::Connect).
  Status Connect(int peer, const std::string& host, uint16_t port, Deadline deadline) {
    return watch_.Connect(peer, host, port, deadline);
  }
  // Starts the heartbeat thread. Call once, after every Connect.
  void Start();
  // Sends `reason` to every peer as this rank's abort (the first call only). Any thread; from
  // another thread than the monitor's it waits until the monitor has sent it (at most two
  // heartbeats), so that peers hear the reason before they see this rank's links close.
  // `lost_rank`: the rank whose lost process caused it (peers then know too), or -1.
  void Announce(const Status& reason, int lost_rank = -1);

 private:
  void Run();
  // One pass: heartbeat, pending announcement, events, silence. Returns a failure, or OK; sets
  // `lost_rank` to the rank whose process died or stopped, if that is the failure.
  Status Tick(int& lost_rank);
  void Wake();
  // Sends a heartbeat when the last one is a heartbeat interval old.
  void MaybeBeat();
  // Drains the wake eventfd; returns how long the next Poll may wait: until the next heartbeat
  // or the earliest moment a peer's silence expires, whichever is first.
  int WaitMillis();
  // The silence after which `peer` (last heard at `heard`) is declared hung.
  double SilenceLimit(std::chrono::steady_clock::time_point heard) const;
  // Sends the pending announcement, if any, and tells Announce it went.
  void SendAnnouncement();

  const PeerMonitorOptions options_;
  const OnFailure on_failure_;
  PeerWatch watch_;  // used by the monitor thread only, once started
  std::thread thread_;
  std::atomic<bool> stop_{false};
  int wake_fd_ = -1;  // eventfd: Announce wakes the monitor thread through it
  std::mutex mu_;
  std::condition_variable sent_;  // signalled when announce_ has been sent
  std::string announce_;  // guarded by mu_: reason to send, empty when none
  int announce_lost_ = -1;  // guarded by mu_: the lost rank sent with it
  bool announced_ = false;  // guarded by mu_
  std::chrono::steady_clock::time_point started_;    // set by Start
  std::chrono::steady_clock::time_point last_beat_;  // monitor thread
  // Monitor thread: when the first watched peer's silence expires (set by each Tick).
  std::chrono::steady_clock::time_point next_expiry_ = std::chrono::steady_clock::time_point::max();
};

}  // namespace ferry
