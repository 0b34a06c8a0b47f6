// PeerMonitor (see peer_monitor.h): the heartbeat thread and the rules that turn what the watch
// saw into one failure naming the rank at fault.
#include "core/runtime/peer_monitor.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace ferry {
namespace {

std::string Seconds(double seconds) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.2f", seconds);
  return text;
}

}  // namespace

PeerMonitor::PeerMonitor(PeerMonitorOptions options, OnFailure on_failure)
    : options_(std::move(options)),
      on_failure_(std::move(on_failure)),
      watch_(options_.rank, options_.size, options_.epoch, options_.secret),
      wake_fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}

PeerMonitor::~PeerMonitor() {
  stop_ = true;
  Wake();
  if (thread_.joinable()) thread_.join();
  watch_.SendBye();
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

void PeerMonitor::Wake() {
  const uint64_t one = 1;
  if (wake_fd_ >= 0) (void)!::write(wake_fd_, &one, sizeof(one));
}

void PeerMonitor::MaybeBeat() {
  const auto now = std::chrono::steady_clock::now();
  if (now - last_beat_ < std::chrono::duration<double>(options_.heartbeat_s)) return;
  watch_.SendHeartbeat();
  last_beat_ = now;
}

int PeerMonitor::WaitMillis() {
  uint64_t drained = 0;
  if (wake_fd_ >= 0) (void)!::read(wake_fd_, &drained, sizeof(drained));
  const auto next = std::min(next_expiry_,
                             last_beat_ + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                              std::chrono::duration<double>(options_.heartbeat_s)));
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(next - std::chrono::steady_clock::now());
  return std::max<int>(1, static_cast<int>(left.count()));
}

void PeerMonitor::SendAnnouncement() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!announce_.empty()) watch_.SendAbort(announce_, announce_lost_);
  announce_.clear();
  sent_.notify_all();
}

void PeerMonitor::Start() {
  started_ = std::chrono::steady_clock::now();
  thread_ = std::thread([this] { Run(); });
}

void PeerMonitor::Announce(const Status& reason, int lost_rank) {
  std::unique_lock<std::mutex> lock(mu_);
  if (announced_) return;
  announced_ = true;
  announce_ = reason.ToString();
  announce_lost_ = lost_rank;
  if (announce_.empty()) announce_ = "abort requested";
  if (!thread_.joinable() || std::this_thread::get_id() == thread_.get_id()) return;
  Wake();
  const auto wait = std::chrono::duration<double>(2 * options_.heartbeat_s);
  sent_.wait_for(lock, wait, [this] { return announce_.empty(); });
}

void PeerMonitor::Run() {
  while (!stop_) {
    int lost_rank = -1;
    Status failure = Tick(lost_rank);
    if (failure.ok()) continue;
    Announce(failure, lost_rank);
    SendAnnouncement();
    on_failure_(failure, lost_rank);
    // Keep beating and relaying a later announcement until stopped, so that peers still running
    // hear this rank's reason rather than silence.
    while (!stop_) {
      MaybeBeat();
      SendAnnouncement();
      (void)watch_.Poll(WaitMillis(), wake_fd_);
    }
  }
}

double PeerMonitor::SilenceLimit(std::chrono::steady_clock::time_point heard) const {
  // A peer that stops right after a heartbeat has been silent for up to one interval already
  // when its next one is due; one more interval is left for this rank to abort and report.
  const double stop_limit = options_.peer_dead_s - 2 * options_.heartbeat_s;
  return heard > started_ ? stop_limit : std::max(stop_limit, options_.first_beat_s);
}

Status PeerMonitor::Tick(int& lost_rank) {
  MaybeBeat();
  SendAnnouncement();
  for (const PeerWatch::Event& event : watch_.Poll(WaitMillis(), wake_fd_)) {
    const std::string who = "rank " + std::to_string(event.rank);
    if (event.kind == PeerWatch::Event::kAbort) {
      lost_rank = event.lost_rank;
      return Aborted(who + " aborted: " + event.reason);
    }
    if (event.kind == PeerWatch::Event::kGone) {
      lost_rank = event.rank;
      return Unavailable(who + " died or closed its connection (seen by rank " +
                         std::to_string(options_.rank) + "'s peer monitor)");
    }
  }
  const auto now = std::chrono::steady_clock::now();
  next_expiry_ = std::chrono::steady_clock::time_point::max();
  for (int peer : watch_.watched()) {
    const auto heard = watch_.heard_at(peer);
    const double limit = SilenceLimit(heard);
    next_expiry_ = std::min(next_expiry_, heard + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                      std::chrono::duration<double>(limit)));
    const double silent = std::chrono::duration<double>(now - heard).count();
    if (silent >= limit) {
      lost_rank = peer;
      return Unavailable("rank " + std::to_string(peer) + " sent no heartbeat for " +
                         Seconds(silent) + " s (stopped or hung; deadline.peer_dead is " +
                         Seconds(options_.peer_dead_s) + " s)");
    }
  }
  return Status::Ok();
}

}  // namespace ferry
