// Communicator: bootstrap of transports per link class, abort with quarantine, recreate by epoch.
#include "core/runtime/communicator.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <condition_variable>
#include <random>
#include <set>
#include <thread>

#include "core/base/hmac.h"
#include "core/runtime/socket_util.h"

namespace ferry {

namespace {

Bytes ToBytes(const std::string& text) { return Bytes(text.begin(), text.end()); }
std::string FromBytes(const Bytes& bytes) { return std::string(bytes.begin(), bytes.end()); }

std::string RandomKey() {
  std::random_device device;
  std::mt19937_64 generator((static_cast<uint64_t>(device()) << 32) ^ device() ^
                            static_cast<uint64_t>(::getpid()));
  char text[40];
  std::snprintf(text, sizeof(text), "%016llx%016llx",
                static_cast<unsigned long long>(generator()),
                static_cast<unsigned long long>(generator()));
  return text;
}

constexpr std::string_view kLatestEpochKey = "epoch/connected";

// The latest epoch every rank connected (each rank records it after each Connect, so that it is
// there whichever rank fails next), waiting for the first one.
Result<uint64_t> LatestEpoch(Store& store, Deadline deadline) {
  auto value = store.Get(kLatestEpochKey, deadline);
  if (!value.ok()) return value.status().WithContext("reading the epoch to join");
  const std::string text = FromBytes(*value);
  char* end = nullptr;
  const unsigned long long epoch = std::strtoull(text.c_str(), &end, 10);
  if (text.empty() || end != text.c_str() + text.size() || epoch == 0 || epoch >= (1ull << 16) - 1) {
    return InvalidArgument("the store's latest epoch '" + text + "' is not an epoch");
  }
  return static_cast<uint64_t>(epoch);
}

}  // namespace

Result<std::unique_ptr<Communicator>> Communicator::Create(CommunicatorOptions options,
                                                           Deadline deadline) {
  if (options.store == nullptr || options.config == nullptr) {
    return InvalidArgument("Communicator needs a store and a config");
  }
  if (options.size < 1 || options.rank < 0 || options.rank >= options.size) {
    return InvalidArgument("rank " + std::to_string(options.rank) + " is not in [0, " +
                           std::to_string(options.size) + ")");
  }
  if (!options.node_of_rank.empty() &&
      static_cast<int>(options.node_of_rank.size()) != options.size) {
    return InvalidArgument("node_of_rank must have one entry per rank");
  }
  std::unique_ptr<Communicator> comm(new Communicator(std::move(options)));
  const CommunicatorOptions& o = comm->options_;
  std::string where = "communicator rank " + std::to_string(o.rank);
  // A key shared by all ranks, from which every secret of every epoch derives: the store's job
  // secret (never on the wire) keyed by a fresh value rank 0 picks for this group (on the wire),
  // so that reading the store's traffic reveals no secret and no two groups share one.
  if (o.rank == 0 && !o.replacement) {
    FERRY_RETURN_IF_ERROR(o.store->Set("group_nonce", ToBytes(RandomKey()), deadline).WithContext(where));
  }
  auto nonce = o.store->Get("group_nonce", deadline);
  if (!nonce.ok()) return nonce.status().WithContext(where + ": waiting for rank 0");
  comm->group_key_ = DigestHex(HmacSha256(o.store->JobSecret(), "ferry-group/" + FromBytes(*nonce)));
  comm->node_of_rank_ = o.node_of_rank;
  if (comm->node_of_rank_.empty()) {
    FERRY_RETURN_IF_ERROR(
        o.store->Set("host/" + std::to_string(o.rank), ToBytes(HostName()), deadline).WithContext(where));
    std::map<std::string, int> nodes;
    for (int r = 0; r < o.size; ++r) {
      auto host = o.store->Get("host/" + std::to_string(r), deadline);
      if (!host.ok()) return host.status().WithContext(where + ": waiting for rank " + std::to_string(r));
      auto inserted = nodes.emplace(FromBytes(*host), static_cast<int>(nodes.size()));
      comm->node_of_rank_.push_back(inserted.first->second);
    }
  }
  comm->epoch_ = 1;
  if (o.replacement) {
    FERRY_ASSIGN_OR_RETURN(comm->epoch_, LatestEpoch(*o.store, deadline));
    ++comm->epoch_;
    where += " replacing a failed process at epoch " + std::to_string(comm->epoch_);
  }
  FERRY_RETURN_IF_ERROR(comm->Connect(deadline).WithContext(where));
  return comm;
}

Communicator::~Communicator() { DropTransports(); }

LinkClass Communicator::LinkTo(int peer) const {
  if (peer == options_.rank) return LinkClass::kSameRank;
  return node_of_rank_[peer] == node_of_rank_[options_.rank] ? LinkClass::kSameNode
                                                             : LinkClass::kNetwork;
}

Status Communicator::Connect(Deadline deadline) {
  const Config& config = *options_.config;
  FERRY_ASSIGN_OR_RETURN(std::string same_rank, config.GetString("transport.same_rank"));
  FERRY_ASSIGN_OR_RETURN(std::string intra_node, config.GetString("transport.intra_node"));
  FERRY_ASSIGN_OR_RETURN(std::string network, config.GetString("transport.network"));
  transport_of_peer_.assign(static_cast<size_t>(options_.size), "");
  std::map<std::string, std::vector<int>> peers_of;
  for (int peer = 0; peer < options_.size; ++peer) {
    LinkClass link = LinkTo(peer);
    const std::string& name = link == LinkClass::kSameRank   ? same_rank
                              : link == LinkClass::kSameNode ? intra_node
                                                             : network;
    transport_of_peer_[peer] = name;
    peers_of[name].push_back(peer);
  }
  std::string prefix = "e" + std::to_string(epoch_) + "/";
  const std::shared_ptr<StoreInterrupt> interrupt = Interrupt();
  for (const auto& [name, peers] : peers_of) {
    TransportContext context;
    context.rank = options_.rank;
    context.size = options_.size;
    context.epoch = epoch_;
    context.config = options_.config;
    context.store = options_.store;
    context.group_key = group_key_ + "/" + prefix + name;
    context.secret = DigestHex(HmacSha256(group_key_, "ferry-transport-secret/" + prefix + name));
    FERRY_ASSIGN_OR_RETURN(auto transport, options_.registry->Create(name, context));
    FERRY_ASSIGN_OR_RETURN(Bytes info, transport->LocalEndpointInfo());
    FERRY_RETURN_IF_ERROR(
        options_.store->Set(prefix + name + "/ep/" + std::to_string(options_.rank), info, deadline));
    transports_[name] = std::move(transport);
  }
  for (const auto& [name, peers] : peers_of) {
    for (int peer : peers) {
      auto info = options_.store->Get(prefix + name + "/ep/" + std::to_string(peer), deadline, interrupt.get());
      if (!info.ok()) {
        return info.status().WithContext("endpoint of peer " + std::to_string(peer) + " (" + name + ")");
      }
      Status connected = transports_[name]->Connect(peer, *info, deadline);
      if (!connected.ok()) {
        return connected.WithContext(name + " connecting to peer " + std::to_string(peer));
      }
    }
  }
  FERRY_RETURN_IF_ERROR(IdentifyNodePeers(prefix, deadline));
  FERRY_RETURN_IF_ERROR(StartMonitor(prefix, deadline));
  // Not interruptible, unlike Communicator::Barrier: a rank that passed this barrier may start its
  // first refit and abort at once (a plan it cannot run), and its peers' connect must still
  // complete, as the barrier did; they meet the abort at their first step.
  FERRY_RETURN_IF_ERROR(::ferry::Barrier(*options_.store, prefix + "connected", options_.size, deadline));
  // Every rank connected this epoch: the one a replacement process joins after (see Create).
  return options_.store->Set(kLatestEpochKey, ToBytes(std::to_string(epoch_)), deadline);
}

Status Communicator::IdentifyNodePeers(const std::string& prefix, Deadline deadline) {
  processes_.reset();
  auto direct = options_.config->GetBool("executor.direct_intra_node");
  if (direct.ok() && !*direct) return Status::Ok();
  PeerProcessOptions o;
  o.rank = options_.rank;
  o.size = options_.size;
  o.epoch = epoch_;
  for (int peer = 0; peer < options_.size; ++peer) {
    if (LinkTo(peer) == LinkClass::kSameNode) o.peers.push_back(peer);
  }
  if (o.peers.empty()) return Status::Ok();
  o.secret = DigestHex(HmacSha256(group_key_, "ferry-node-secret/" + prefix));
  o.socket_name = "ferry/" + DigestHex(HmacSha256(group_key_, "ferry-node-socket/" + prefix)).substr(0, 32);
  FERRY_ASSIGN_OR_RETURN(processes_, PeerProcesses::Connect(std::move(o), deadline));
  return Status::Ok();
}

Status Communicator::StartMonitor(const std::string& prefix, Deadline deadline) {
  if (options_.size == 1) return Status::Ok();
  const Config& config = *options_.config;
  PeerMonitorOptions o;
  o.rank = options_.rank;
  o.size = options_.size;
  o.epoch = epoch_;
  o.secret = DigestHex(HmacSha256(group_key_, "ferry-watch-secret/" + prefix));
  FERRY_ASSIGN_OR_RETURN(o.heartbeat_s, config.GetSeconds("deadline.heartbeat"));
  FERRY_ASSIGN_OR_RETURN(o.peer_dead_s, config.GetSeconds("deadline.peer_dead"));
  if (!(o.heartbeat_s > 0) || !(o.peer_dead_s >= 4 * o.heartbeat_s)) {
    return InvalidArgument("deadline.peer_dead (" + std::to_string(o.peer_dead_s) +
                           " s) must be at least four times deadline.heartbeat (" +
                           std::to_string(o.heartbeat_s) + " s), which must be positive");
  }
  auto connect = config.GetSeconds("deadline.connect");
  o.first_beat_s = connect.ok() ? *connect : 60.0;
  auto host = config.GetString("watch.host");
  if (host.ok() && !host->empty()) {
    o.host = *host;
  } else if (auto tcp_host = config.GetString("tcp.host"); tcp_host.ok()) {
    o.host = *tcp_host;
  }
  auto monitor = std::make_unique<PeerMonitor>(o, [this](const Status& why, int lost_rank) {
    if (lost_rank >= 0 && lost_rank == options_.store_host_rank) options_.store->Close();
    Abort(why);
  });
  FERRY_RETURN_IF_ERROR(monitor->Listen());
  const std::string key = prefix + "watch/";
  FERRY_RETURN_IF_ERROR(options_.store->Set(
      key + std::to_string(options_.rank),
      ToBytes(monitor->host() + " " + std::to_string(monitor->port())), deadline));
  for (int peer = 0; peer < options_.size; ++peer) {
    if (peer == options_.rank) continue;
    const std::string who = "peer monitor of rank " + std::to_string(peer);
    auto info = options_.store->Get(key + std::to_string(peer), deadline, Interrupt().get());
    if (!info.ok()) return info.status().WithContext(who);
    const std::string text = FromBytes(*info);
    const size_t space = text.rfind(' ');
    if (space == std::string::npos) return InvalidArgument(who + ": malformed address '" + text + "'");
    const int port = std::atoi(text.c_str() + space + 1);
    if (port <= 0 || port > 65535) return InvalidArgument(who + ": bad port in '" + text + "'");
    FERRY_RETURN_IF_ERROR(monitor->Connect(peer, text.substr(0, space),
                                           static_cast<uint16_t>(port), deadline)
                              .WithContext(who));
  }
  monitor->Start();
  std::lock_guard<std::mutex> lock(mu_);
  monitor_ = std::move(monitor);
  return Status::Ok();
}

Result<Transport*> Communicator::TransportFor(int peer) {
  if (peer < 0 || peer >= options_.size) {
    return InvalidArgument("no peer " + std::to_string(peer) + " in a communicator of " +
                           std::to_string(options_.size));
  }
  if (aborted_) return abort_reason().WithContext("communicator aborted");
  return transports_.at(transport_of_peer_[peer]).get();
}

std::string Communicator::TransportNameFor(int peer) const {
  if (peer < 0 || peer >= static_cast<int>(transport_of_peer_.size())) return "none";
  return transport_of_peer_[peer];
}

std::vector<Transport*> Communicator::transports() {
  std::vector<Transport*> all;
  for (auto& [name, transport] : transports_) all.push_back(transport.get());
  return all;
}

Status Communicator::abort_reason() const {
  std::lock_guard<std::mutex> lock(mu_);
  return abort_reason_;
}

std::chrono::system_clock::time_point Communicator::aborted_at() const {
  std::lock_guard<std::mutex> lock(mu_);
  return aborted_at_;
}

void Communicator::Abort(const Status& reason) {
  PeerMonitor* monitor = nullptr;
  std::shared_ptr<StoreInterrupt> interrupt;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_) return;
    abort_reason_ = reason.ok() ? Aborted("communicator aborted") : reason;
    aborted_at_ = std::chrono::system_clock::now();
    aborted_ = true;
    aborting_ = true;
    monitor = monitor_.get();
    interrupt = interrupt_;
  }
  // The bound covers everything below, the announcement included.
  const auto configured = options_.config->GetSeconds("deadline.abort");
  const double seconds = configured.ok() ? *configured : 5.0;
  const Deadline deadline = Deadline::AfterSeconds(seconds);
  // Peers hear the reason before they see this rank's links close (Announce waits for it).
  if (monitor != nullptr) monitor->Announce(abort_reason());
  // Store waits of this epoch (Barrier, Connect's) end now, with the reason, not at their deadline.
  interrupt->Fire(abort_reason());
  // Each transport aborts on its own thread; one that does not return in time is quarantined.
  struct Done {
    std::mutex mu;
    std::condition_variable cv;
    std::set<std::string> finished;
  };
  auto done = std::make_shared<Done>();
  for (auto& [name, transport] : transports_) {
    Transport* t = transport.get();
    std::string n = name;
    Status why = reason;
    std::thread([t, n, why, done] {
      t->Abort(why);
      std::lock_guard<std::mutex> lock(done->mu);
      done->finished.insert(n);
      done->cv.notify_all();
    }).detach();
  }
  std::unique_lock<std::mutex> lock(done->mu);
  done->cv.wait_until(lock, deadline.when(),
                      [&] { return done->finished.size() == transports_.size(); });
  std::lock_guard<std::mutex> guard(mu_);
  for (auto& [name, transport] : transports_) {
    if (done->finished.count(name) != 0) continue;
    quarantined_[name] = true;
    const std::string entry = name + " (epoch " + std::to_string(epoch_) + ")";
    quarantine_log_.push_back(entry);
    std::fprintf(stderr,
                 "ferry: rank %d: transport %s did not return from Abort within deadline.abort "
                 "(%g s); quarantined: never waited on, never destroyed\n",
                 options_.rank, entry.c_str(), seconds);
  }
  aborting_ = false;
  abort_done_.notify_all();
}

std::vector<std::string> Communicator::quarantined() const {
  std::lock_guard<std::mutex> lock(mu_);
  return quarantine_log_;
}

Status Communicator::WithCause(Status failure) {
  auto heartbeat = options_.config->GetSeconds("deadline.heartbeat");
  const Deadline wait = Deadline::AfterSeconds(3 * (heartbeat.ok() ? *heartbeat : 0.1));
  while (!aborted_ && !wait.Expired()) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  if (!aborted_) return failure;
  return Status(failure.code(), failure.message() + "; cause: " + abort_reason().message());
}

Status Communicator::Barrier(std::string_view name, Deadline deadline) {
  const std::string key = "barrier/" + std::string(name);
  const std::string what = "barrier '" + std::string(name) + "'";
  // Taken before the check: an Abort after it fires this interrupt, which ends the wait at once.
  const std::shared_ptr<StoreInterrupt> interrupt = Interrupt();
  if (aborted_) return abort_reason().WithContext(what);
  auto arrived = options_.store->Add(key, 1, deadline);
  if (!arrived.ok()) return WithCause(arrived.status()).WithContext(what);
  Status status = options_.store->WaitAtLeast(key, options_.size, deadline, interrupt.get());
  if (status.ok()) return status;
  if (aborted_) {
    // A barrier every rank reached has completed, even when an abort (a rank that died just after
    // passing it) cut the wait before its answer came: one look that does not wait, so that the
    // caller meets the abort at its next step, as it would have a moment later.
    if (options_.store->WaitAtLeast(key, options_.size, Deadline::After(std::chrono::nanoseconds(0))).ok()) {
      return Status::Ok();
    }
    return abort_reason().WithContext(what);
  }
  return WithCause(std::move(status)).WithContext(what);
}

std::shared_ptr<StoreInterrupt> Communicator::Interrupt() const {
  std::lock_guard<std::mutex> lock(mu_);
  return interrupt_;
}

void Communicator::DropTransports() {
  // The monitor goes first, outside the lock: its thread may be inside Abort, which takes it.
  std::unique_ptr<PeerMonitor> monitor;
  {
    std::lock_guard<std::mutex> lock(mu_);
    monitor = std::move(monitor_);
  }
  monitor.reset();
  std::unique_lock<std::mutex> lock(mu_);
  // An Abort on another thread may still be handing the transports to their abort threads (it
  // returns within deadline.abort): the waits it interrupted can end before it does.
  abort_done_.wait(lock, [this] { return !aborting_; });
  for (auto& [name, transport] : transports_) {
    // A quarantined transport may still be inside a hung call: never destroy it under that call.
    if (quarantined_.count(name) != 0) {
      [[maybe_unused]] Transport* leaked = transport.release();
    }
  }
  transports_.clear();
  quarantined_.clear();
}

Status Communicator::Recreate(Deadline deadline) {
  if (!aborted_) Abort(Aborted("communicator recreated"));
  DropTransports();
  ++epoch_;
  {
    std::lock_guard<std::mutex> lock(mu_);
    aborted_ = false;
    abort_reason_ = Status::Ok();
    aborted_at_ = {};
    interrupt_ = std::make_shared<StoreInterrupt>();
  }
  return Connect(deadline).WithContext("recreating communicator rank " +
                                       std::to_string(options_.rank) + " at epoch " +
                                       std::to_string(epoch_));
}

}  // namespace ferry
