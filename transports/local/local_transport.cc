// LocalTransport: see local_transport.h. All ranks of one group share one mutex; messages are
// matched on (sender, tag) in posting order and copied by whichever side arrives second.
#include "transports/local/local_transport.h"

#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <unordered_map>

#include "core/runtime/abort_state.h"

namespace ferry {

namespace {

class LocalTransport;

struct Group {
  std::mutex mu;
  std::condition_variable changed;
  std::map<int, LocalTransport*> members;
};

std::mutex registry_mu;
std::map<std::string, std::weak_ptr<Group>>& Groups() {
  static auto* groups = new std::map<std::string, std::weak_ptr<Group>>();
  return *groups;
}

std::shared_ptr<Group> JoinGroup(const std::string& key) {
  std::lock_guard<std::mutex> lock(registry_mu);
  auto& groups = Groups();
  std::erase_if(groups, [](const auto& entry) { return entry.second.expired(); });
  auto group = groups[key].lock();
  if (!group) {
    group = std::make_shared<Group>();
    groups[key] = group;
  }
  return group;
}

using Key = std::pair<int, uint64_t>;  // (peer, tag)

struct ParkedSend {  // a send waiting in the receiver's queue for its receive
  RequestId request;
  const char* data;
  int64_t bytes;
};

struct PostedRecv {
  RequestId request;
  char* data;
  int64_t capacity;
};

class LocalTransport final : public Transport {
 public:
  LocalTransport(const TransportContext& context, std::shared_ptr<Group> group)
      : rank_(context.rank), size_(context.size), group_(std::move(group)) {}

  ~LocalTransport() override {
    std::lock_guard<std::mutex> lock(group_->mu);
    group_->members.erase(rank_);
    Status gone = Unavailable("peer " + std::to_string(rank_) + " (local): exited");
    for (auto& [rank, member] : group_->members) {
      // Their receives from us will never be matched; their sends parked with us never taken.
      member->FailWithPeerLocked(rank_, gone);
      for (auto& [key, list] : parked_) {
        if (key.first == rank) {
          for (const ParkedSend& s : list) member->CompleteLocked(s.request, gone, 0);
        }
      }
    }
    group_->changed.notify_all();
  }

  Status Join() {
    std::lock_guard<std::mutex> lock(group_->mu);
    if (group_->members.count(rank_) != 0) {
      return FailedPrecondition("local: rank " + std::to_string(rank_) +
                                " already has a transport in this group");
    }
    group_->members[rank_] = this;
    group_->changed.notify_all();
    return Status::Ok();
  }

  std::string_view name() const override { return "local"; }

  TransportCapabilities capabilities() const override {
    TransportCapabilities caps;
    caps.host_memory = true;
    caps.two_sided = true;
    caps.one_sided = true;
    caps.cancel = true;
    caps.inter_node = false;
    caps.latency_seconds = 1e-6;
    caps.bandwidth_bytes_per_second = 10e9;
    return caps;
  }

  Result<Bytes> LocalEndpointInfo() override {
    Bytes info(sizeof(int));
    std::memcpy(info.data(), &rank_, sizeof(int));
    return info;
  }

  Status Connect(int peer, std::span<const uint8_t> peer_info, Deadline deadline) override {
    if (peer < 0 || peer >= size_) return InvalidArgument("local: no peer " + std::to_string(peer));
    int announced = -1;
    if (peer_info.size() == sizeof(int)) std::memcpy(&announced, peer_info.data(), sizeof(int));
    if (announced != peer) {
      return Unavailable("local: endpoint info does not belong to peer " + std::to_string(peer));
    }
    std::unique_lock<std::mutex> lock(group_->mu);
    if (connected_.count(peer) != 0) {
      return FailedPrecondition("local: already connected to peer " + std::to_string(peer));
    }
    bool present = group_->changed.wait_until(lock, deadline.when(), [&] {
      return abort_.aborted() || group_->members.count(peer) != 0;
    });
    if (abort_.aborted()) return abort_.status();
    if (!present) {
      return DeadlineExceeded("local: peer " + std::to_string(peer) +
                              " did not join this process's group before the deadline");
    }
    connected_.insert({peer, true});
    return Status::Ok();
  }

  Result<MemoryHandle> RegisterMemory(const MemoryDesc& memory) override {
    if (memory.kind != MemoryKind::kHost) return Unimplemented("local moves host memory only");
    if (memory.bytes < 0 || (memory.base == nullptr && memory.bytes > 0)) {
      return InvalidArgument("local: bad memory descriptor");
    }
    std::lock_guard<std::mutex> lock(group_->mu);
    MemoryHandle handle{next_handle_++};
    registrations_[handle.id] = memory;
    return handle;
  }

  Status DeregisterMemory(MemoryHandle memory) override {
    std::lock_guard<std::mutex> lock(group_->mu);
    if (registrations_.erase(memory.id) == 0) return NotFound("local: unknown memory handle");
    return Status::Ok();
  }

  Result<Bytes> RemoteKey(MemoryHandle memory) override {
    std::lock_guard<std::mutex> lock(group_->mu);
    auto it = registrations_.find(memory.id);
    if (it == registrations_.end()) return NotFound("local: unknown memory handle");
    uint64_t fields[2] = {reinterpret_cast<uint64_t>(it->second.base),
                          static_cast<uint64_t>(it->second.bytes)};
    Bytes key(sizeof(fields));
    std::memcpy(key.data(), fields, sizeof(fields));
    return key;
  }

  Result<RequestId> PostSend(int peer, uint64_t tag, const LocalBuffer& buffer) override {
    std::lock_guard<std::mutex> lock(group_->mu);
    FERRY_ASSIGN_OR_RETURN(char* data, ResolveLocked(peer, buffer));
    RequestId id = NewRequestLocked(peer);
    LocalTransport* target = MemberLocked(peer);
    if (target == nullptr) {
      CompleteLocked(id, Unavailable("peer " + std::to_string(peer) + " (local): exited"), 0);
      return id;
    }
    auto posted = target->posted_.find({rank_, tag});
    if (posted != target->posted_.end() && !posted->second.empty()) {
      PostedRecv recv = posted->second.front();
      posted->second.pop_front();
      if (posted->second.empty()) target->posted_.erase(posted);
      target->DeliverLocked(recv, data, buffer.bytes, rank_, tag);
      CompleteLocked(id, Status::Ok(), buffer.bytes);
    } else {
      target->parked_[{rank_, tag}].push_back({id, data, buffer.bytes});
    }
    return id;
  }

  Result<RequestId> PostRecv(int peer, uint64_t tag, const LocalBuffer& buffer) override {
    std::lock_guard<std::mutex> lock(group_->mu);
    FERRY_ASSIGN_OR_RETURN(char* data, ResolveLocked(peer, buffer));
    RequestId id = NewRequestLocked(peer);
    PostedRecv recv{id, data, buffer.bytes};
    auto parked = parked_.find({peer, tag});
    if (parked != parked_.end() && !parked->second.empty()) {
      ParkedSend send = parked->second.front();
      parked->second.pop_front();
      if (parked->second.empty()) parked_.erase(parked);
      DeliverLocked(recv, send.data, send.bytes, peer, tag);
      LocalTransport* sender = MemberLocked(peer);
      if (sender != nullptr) sender->CompleteLocked(send.request, Status::Ok(), send.bytes);
    } else if (MemberLocked(peer) == nullptr) {
      CompleteLocked(id, Unavailable("peer " + std::to_string(peer) + " (local): exited"), 0);
    } else {
      posted_[{peer, tag}].push_back(recv);
    }
    return id;
  }

  Result<RequestId> PostPut(int peer, uint64_t tag, const LocalBuffer& local,
                            const RemoteBuffer& remote) override {
    std::lock_guard<std::mutex> lock(group_->mu);
    FERRY_ASSIGN_OR_RETURN(char* data, ResolveLocked(peer, local));
    uint64_t fields[2] = {0, 0};
    if (remote.remote_key.size() != sizeof(fields)) return InvalidArgument("local: bad remote key");
    std::memcpy(fields, remote.remote_key.data(), sizeof(fields));
    if (remote.offset < 0 || remote.offset + local.bytes > static_cast<int64_t>(fields[1])) {
      return OutOfRange("local: put of " + std::to_string(local.bytes) + " bytes at offset " +
                        std::to_string(remote.offset) + " outside the remote registration of " +
                        std::to_string(fields[1]) + " bytes");
    }
    RequestId id = NewRequestLocked(peer);
    LocalTransport* target = MemberLocked(peer);
    if (target == nullptr) {
      CompleteLocked(id, Unavailable("peer " + std::to_string(peer) + " (local): exited"), 0);
      return id;
    }
    if (local.bytes > 0) {
      std::memcpy(reinterpret_cast<char*>(fields[0]) + remote.offset, data,
                  static_cast<size_t>(local.bytes));
    }
    auto waiting = target->notify_posted_.find({rank_, tag});
    if (waiting != target->notify_posted_.end() && !waiting->second.empty()) {
      RequestId notified = waiting->second.front();
      waiting->second.pop_front();
      if (waiting->second.empty()) target->notify_posted_.erase(waiting);
      target->CompleteLocked(notified, Status::Ok(), local.bytes);
    } else {
      target->notify_arrived_[{rank_, tag}].push_back(local.bytes);
    }
    CompleteLocked(id, Status::Ok(), local.bytes);
    return id;
  }

  Result<RequestId> PostRecvNotify(int peer, uint64_t tag) override {
    std::lock_guard<std::mutex> lock(group_->mu);
    if (abort_.aborted()) return abort_.status();
    if (connected_.count(peer) == 0) {
      return FailedPrecondition("local: peer " + std::to_string(peer) + " is not connected");
    }
    RequestId id = NewRequestLocked(peer);
    auto arrived = notify_arrived_.find({peer, tag});
    if (arrived != notify_arrived_.end() && !arrived->second.empty()) {
      int64_t bytes = arrived->second.front();
      arrived->second.pop_front();
      if (arrived->second.empty()) notify_arrived_.erase(arrived);
      CompleteLocked(id, Status::Ok(), bytes);
    } else if (MemberLocked(peer) == nullptr) {
      CompleteLocked(id, Unavailable("peer " + std::to_string(peer) + " (local): exited"), 0);
    } else {
      notify_posted_[{peer, tag}].push_back(id);
    }
    return id;
  }

  Result<int> Poll(std::span<Completion> out, Deadline deadline) override {
    std::unique_lock<std::mutex> lock(group_->mu);
    group_->changed.wait_until(lock, deadline.when(),
                               [&] { return abort_.aborted() || !completions_.empty(); });
    if (abort_.TakeDrain()) {
      Status status = abort_.status();
      std::vector<RequestId> ids;
      for (const auto& [id, peer] : pending_) ids.push_back(id);
      for (RequestId id : ids) CancelLocked(id, status);
    }
    int n = 0;
    while (n < static_cast<int>(out.size()) && !completions_.empty()) {
      out[n++] = std::move(completions_.front());
      completions_.pop_front();
    }
    if (n == 0 && abort_.aborted()) return abort_.status();
    return n;
  }

  Status Cancel(RequestId request) override {
    std::lock_guard<std::mutex> lock(group_->mu);
    CancelLocked(request, Aborted("local: request cancelled"));
    return Status::Ok();
  }

  void Abort(const Status& reason) override {
    if (!abort_.Abort(reason)) return;
    // Under the group's lock, so that a waiter between its check and its wait is not missed.
    std::lock_guard<std::mutex> lock(group_->mu);
    group_->changed.notify_all();
  }

 private:
  LocalTransport* MemberLocked(int peer) const {
    auto it = group_->members.find(peer);
    return it == group_->members.end() ? nullptr : it->second;
  }

  Result<char*> ResolveLocked(int peer, const LocalBuffer& buffer) {
    if (abort_.aborted()) return abort_.status();
    if (peer < 0 || peer >= size_) return InvalidArgument("local: no peer " + std::to_string(peer));
    if (connected_.count(peer) == 0) {
      return FailedPrecondition("local: peer " + std::to_string(peer) + " is not connected");
    }
    auto it = registrations_.find(buffer.memory.id);
    if (it == registrations_.end()) return InvalidArgument("local: unregistered memory handle");
    if (buffer.offset < 0 || buffer.bytes < 0 || buffer.offset + buffer.bytes > it->second.bytes) {
      return OutOfRange("local: buffer [" + std::to_string(buffer.offset) + ", +" +
                        std::to_string(buffer.bytes) + ") outside its registration of " +
                        std::to_string(it->second.bytes) + " bytes");
    }
    return static_cast<char*>(it->second.base) + buffer.offset;
  }

  RequestId NewRequestLocked(int peer) {
    RequestId id = next_request_++;
    pending_[id] = peer;
    return id;
  }

  void CompleteLocked(RequestId id, Status status, int64_t bytes) {
    if (pending_.erase(id) == 0) return;
    completions_.push_back({id, std::move(status), bytes});
    group_->changed.notify_all();
  }

  // Copies a matched message into `recv` and completes it.
  void DeliverLocked(const PostedRecv& recv, const char* data, int64_t bytes, int from,
                     uint64_t tag) {
    if (bytes > recv.capacity) {
      CompleteLocked(recv.request,
                     OutOfRange("local: message of " + std::to_string(bytes) + " bytes from peer " +
                                std::to_string(from) + " (tag " + std::to_string(tag) +
                                ") does not fit the receive buffer of " +
                                std::to_string(recv.capacity) + " bytes"),
                     0);
      return;
    }
    if (bytes > 0) std::memcpy(recv.data, data, static_cast<size_t>(bytes));
    CompleteLocked(recv.request, Status::Ok(), bytes);
  }

  // Fails every receive of ours that waits on `peer`, and forgets what it parked with us.
  void FailWithPeerLocked(int peer, const Status& status) {
    for (auto it = posted_.begin(); it != posted_.end();) {
      if (it->first.first == peer) {
        for (const PostedRecv& r : it->second) CompleteLocked(r.request, status, 0);
        it = posted_.erase(it);
      } else {
        ++it;
      }
    }
    for (auto it = notify_posted_.begin(); it != notify_posted_.end();) {
      if (it->first.first == peer) {
        for (RequestId id : it->second) CompleteLocked(id, status, 0);
        it = notify_posted_.erase(it);
      } else {
        ++it;
      }
    }
    std::erase_if(parked_, [&](const auto& entry) { return entry.first.first == peer; });
  }

  void CancelLocked(RequestId id, const Status& status) {
    auto pending = pending_.find(id);
    if (pending == pending_.end()) return;
    int peer = pending->second;
    for (auto& [key, list] : posted_) {
      std::erase_if(list, [&](const PostedRecv& r) { return r.request == id; });
    }
    for (auto& [key, list] : notify_posted_) std::erase(list, id);
    if (LocalTransport* target = MemberLocked(peer)) {
      for (auto& [key, list] : target->parked_) {
        if (key.first == rank_) {
          std::erase_if(list, [&](const ParkedSend& s) { return s.request == id; });
        }
      }
    }
    CompleteLocked(id, status, 0);
  }

  const int rank_;
  const int size_;
  std::shared_ptr<Group> group_;
  // Everything below is guarded by group_->mu.
  std::map<int, bool> connected_;
  std::unordered_map<uint64_t, MemoryDesc> registrations_;
  uint64_t next_handle_ = 1;
  RequestId next_request_ = 1;
  std::unordered_map<RequestId, int> pending_;  // request -> peer
  std::map<Key, std::deque<PostedRecv>> posted_;
  std::map<Key, std::deque<ParkedSend>> parked_;
  std::map<Key, std::deque<RequestId>> notify_posted_;
  std::map<Key, std::deque<int64_t>> notify_arrived_;
  std::deque<Completion> completions_;
  AbortState abort_{"local"};  // thread-safe on its own
};

}  // namespace

Result<std::unique_ptr<Transport>> CreateLocalTransport(const TransportContext& context) {
  if (context.group_key.empty()) {
    return InvalidArgument("local transport needs TransportContext::group_key");
  }
  auto transport = std::make_unique<LocalTransport>(context, JoinGroup(context.group_key));
  FERRY_RETURN_IF_ERROR(transport->Join());
  return std::unique_ptr<Transport>(std::move(transport));
}

TransportRegistration LocalTransportRegistration() {
  return TransportRegistration{
      "local",
      "ranks that are threads of one process (tests, a rank sending to itself); memcpy",
      {},
      &CreateLocalTransport,
  };
}

namespace {
const TransportRegistrar kLocalRegistrar(LocalTransportRegistration());
}  // namespace

}  // namespace ferry
