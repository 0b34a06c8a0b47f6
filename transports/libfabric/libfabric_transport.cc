// LibfabricTransport: the "libfabric" Transport (see libfabric_transport.h) — provider selection,
// endpoint setup, memory registration per mr_mode, tagged send/recv with a backlog for posts the
// provider refuses with FI_EAGAIN, CQ polling, dead-peer handling through PeerWatch, and the
// registration under the name "libfabric".
#include "transports/libfabric/libfabric_transport.h"

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>

#include "core/runtime/abort_state.h"
#include "core/runtime/handshake.h"
#include "core/runtime/message_seal.h"
#include "core/runtime/peer_watch.h"

namespace ferry {
namespace {

constexpr uint32_t kInfoMagic = 0x42414646;  // "FFAB"

std::string FiError(int code) { return fi_strerror(code < 0 ? -code : code); }


// Reads length-prefixed fields from endpoint info; any overrun marks the reader failed.
class InfoReader {
 public:
  explicit InfoReader(std::span<const uint8_t> bytes) : bytes_(bytes) {}
  template <typename T>
  T Read() {
    T value{};
    if (pos_ + sizeof(T) > bytes_.size()) {
      failed_ = true;
      return value;
    }
    std::memcpy(&value, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return value;
  }
  Bytes ReadBlob() {
    const uint32_t size = Read<uint32_t>();
    if (failed_ || pos_ + size > bytes_.size()) {
      failed_ = true;
      return {};
    }
    Bytes blob(bytes_.begin() + pos_, bytes_.begin() + pos_ + size);
    pos_ += size;
    return blob;
  }
  bool ok() const { return !failed_ && pos_ == bytes_.size(); }

 private:
  std::span<const uint8_t> bytes_;
  size_t pos_ = 0;
  bool failed_ = false;
};

void AppendBlob(Bytes& out, const void* data, size_t size) {
  const uint32_t length = static_cast<uint32_t>(size);
  AppendBytes(out, &length, sizeof(length));
  AppendBytes(out, data, size);
}

class LibfabricTransport final : public Transport {
 public:
  explicit LibfabricTransport(const TransportContext& context)
      : context_(context), watch_(context.rank, context.size, context.epoch, context.secret) {}
  ~LibfabricTransport() override;

  Status Init();

  std::string_view name() const override { return "libfabric"; }
  TransportCapabilities capabilities() const override;
  Result<Bytes> LocalEndpointInfo() override;
  Status Connect(int peer, std::span<const uint8_t> peer_info, Deadline deadline) override;
  Result<MemoryHandle> RegisterMemory(const MemoryDesc& memory) override;
  Status DeregisterMemory(MemoryHandle memory) override;
  Result<RequestId> PostSend(int peer, uint64_t tag, const LocalBuffer& buffer) override;
  Result<RequestId> PostRecv(int peer, uint64_t tag, const LocalBuffer& buffer) override;
  Result<int> Poll(std::span<Completion> out, Deadline deadline) override;
  Status Cancel(RequestId request) override;
  void Abort(const Status& reason) override;

 private:
  // One posted request. The fi_context2 must come first: the provider gets &op->context as the
  // operation context and hands it back in the CQ entry. An op stays alive while the provider
  // holds it (in_provider) even after it was reported, so a late CQ entry never touches freed
  // memory.
  struct Op {
    fi_context2 context;
    RequestId id = 0;
    bool is_send = true;
    int peer = 0;
    uint64_t tag = 0;
    uint64_t wire_tag = 0;  // TagSeal's, fixed at the post (a refused post is issued again)
    void* data = nullptr;
    size_t bytes = 0;
    void* desc = nullptr;
    bool in_provider = false;
    bool reported = false;
  };

  struct Registration {
    MemoryDesc desc;
    fid_mr* mr = nullptr;
  };

  struct Peer {
    fi_addr_t address = FI_ADDR_UNSPEC;
    Status failure;
    // When the watch saw the peer go: its requests fail after a short grace period in which the
    // CQ is still drained, so messages that already arrived are not lost.
    bool going = false;
    Deadline gone_at = Deadline::Never();
  };

  Status CheckUsable() const;
  Result<void*> Resolve(const LocalBuffer& buffer, void** desc) const;
  Result<RequestId> Post(bool is_send, int peer, uint64_t tag, const LocalBuffer& buffer);
  // Hands `op` to the provider; false when it answered FI_EAGAIN (the op waits in backlog_).
  bool Issue(Op* op);
  void Finish(Op* op, Status status, int64_t bytes);
  void ReleaseIfDone(Op* op);
  void ReadCompletions();
  void WatchPeers();
  void FailPeer(int rank, Status failure);
  void DrainAbort();

  TransportContext context_;
  PeerWatch watch_;
  // The wire tag of every send and receive (core/runtime/message_seal.h): keyed per direction and
  // per use of a tag, so that a message from anyone without the secret, or a copy of an earlier
  // one, matches no receive.
  std::unique_ptr<TagSeal> tags_;
  double grace_seconds_ = 0.2;
  fi_info* info_ = nullptr;    // everything fi_getinfo offered (owned)
  fi_info* chosen_ = nullptr;  // the entry in use (part of info_)
  fid_fabric* fabric_ = nullptr;
  fid_domain* domain_ = nullptr;
  fid_av* av_ = nullptr;
  fid_cq* cq_ = nullptr;
  fid_ep* ep_ = nullptr;
  uint64_t mr_mode_ = 0;
  std::string provider_;

  std::map<int, Peer> peers_;
  std::unordered_map<uint64_t, Registration> registrations_;
  uint64_t next_registration_ = 1;
  std::unordered_map<RequestId, std::unique_ptr<Op>> ops_;
  RequestId next_request_ = 1;
  std::deque<Op*> backlog_;  // posts the provider refused with FI_EAGAIN, retried in order
  std::deque<Completion> ready_;

  AbortState abort_{"libfabric"};
};

LibfabricTransport::~LibfabricTransport() {
  // Closing the endpoint first makes the provider drop every operation it still holds, so the
  // ops (and the caller's buffers) are no longer referenced when they are freed below.
  if (ep_ != nullptr) fi_close(&ep_->fid);
  for (auto& [id, registration] : registrations_) {
    if (registration.mr != nullptr) fi_close(&registration.mr->fid);
  }
  if (av_ != nullptr) fi_close(&av_->fid);
  if (cq_ != nullptr) fi_close(&cq_->fid);
  if (domain_ != nullptr) fi_close(&domain_->fid);
  if (fabric_ != nullptr) fi_close(&fabric_->fid);
  if (info_ != nullptr) fi_freeinfo(info_);
}

Status LibfabricTransport::Init() {
  if (context_.secret.empty()) {
    return InvalidArgument(
        "libfabric: no secret in the transport context to authenticate peers with");
  }
  tags_ = std::make_unique<TagSeal>(context_.secret, "libfabric", context_.rank, context_.size);
  provider_ = context_.Option("libfabric.provider", "tcp");
  const std::string domain = context_.Option("libfabric.domain", "");
  const std::string watch_host = context_.Option("libfabric.watch_host", "");
  if (context_.config != nullptr) {
    auto grace = context_.config->GetSeconds("libfabric.peer_exit_grace");
    if (grace.ok()) grace_seconds_ = *grace;
  }

  fi_info* hints = fi_allocinfo();
  if (hints == nullptr) return Internal("fi_allocinfo failed");
  hints->ep_attr->type = FI_EP_RDM;
  hints->caps = FI_TAGGED | FI_DIRECTED_RECV;
  hints->mode = FI_CONTEXT | FI_CONTEXT2;
  hints->domain_attr->mr_mode =
      FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;
  hints->domain_attr->threading = FI_THREAD_DOMAIN;
  hints->domain_attr->av_type = FI_AV_TABLE;
  if (!provider_.empty()) hints->fabric_attr->prov_name = strdup(provider_.c_str());
  if (!domain.empty()) hints->domain_attr->name = strdup(domain.c_str());
  int rc = fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &info_);
  fi_freeinfo(hints);
  if (rc != 0) {
    return Unavailable("no libfabric provider '" + provider_ + "'" +
                       (domain.empty() ? "" : " with domain '" + domain + "'") +
                       " offers FI_EP_RDM tagged messages with directed receive (fi_getinfo: " +
                       FiError(rc) + "); `fi_info -t FI_EP_RDM -c FI_TAGGED` lists what does");
  }
  // fi_getinfo may list several variants (the shm provider's FI_HMEM one needs GPU libraries that
  // may be absent): take the first whose fabric and domain open.
  std::string failures;
  for (fi_info* candidate = info_; candidate != nullptr; candidate = candidate->next) {
    if ((rc = fi_fabric(candidate->fabric_attr, &fabric_, nullptr)) != 0) {
      failures += std::string(failures.empty() ? "" : "; ") + "fi_fabric: " + FiError(rc);
      fabric_ = nullptr;
      continue;
    }
    if ((rc = fi_domain(fabric_, candidate, &domain_, nullptr)) != 0) {
      failures += std::string(failures.empty() ? "" : "; ") + "fi_domain: " + FiError(rc);
      fi_close(&fabric_->fid);
      fabric_ = nullptr;
      domain_ = nullptr;
      continue;
    }
    chosen_ = candidate;
    break;
  }
  if (chosen_ == nullptr) {
    return Unavailable("libfabric provider '" + provider_ + "' offered endpoints but none opened (" +
                       failures + ")");
  }
  mr_mode_ = chosen_->domain_attr->mr_mode;
  fi_av_attr av_attr{};
  av_attr.type = FI_AV_TABLE;
  av_attr.count = static_cast<size_t>(std::max(context_.size, 1));
  if ((rc = fi_av_open(domain_, &av_attr, &av_, nullptr)) != 0) {
    return Unavailable("fi_av_open: " + FiError(rc));
  }
  fi_cq_attr cq_attr{};
  cq_attr.format = FI_CQ_FORMAT_TAGGED;
  cq_attr.wait_obj = FI_WAIT_NONE;
  if ((rc = fi_cq_open(domain_, &cq_attr, &cq_, nullptr)) != 0) {
    return Unavailable("fi_cq_open: " + FiError(rc));
  }
  if ((rc = fi_endpoint(domain_, chosen_, &ep_, nullptr)) != 0) {
    return Unavailable("fi_endpoint: " + FiError(rc));
  }
  if ((rc = fi_ep_bind(ep_, &av_->fid, 0)) != 0) return Unavailable("fi_ep_bind av: " + FiError(rc));
  if ((rc = fi_ep_bind(ep_, &cq_->fid, FI_TRANSMIT | FI_RECV)) != 0) {
    return Unavailable("fi_ep_bind cq: " + FiError(rc));
  }
  if ((rc = fi_enable(ep_)) != 0) return Unavailable("fi_enable: " + FiError(rc));
  return watch_.Listen(watch_host);
}

TransportCapabilities LibfabricTransport::capabilities() const {
  TransportCapabilities caps;
  caps.host_memory = true;
  caps.cuda_memory = false;
  caps.two_sided = true;
  caps.one_sided = false;
  caps.cancel = true;
  caps.inter_node = provider_ != "shm";
  if (chosen_ != nullptr && chosen_->ep_attr->max_msg_size < static_cast<size_t>(INT64_MAX)) {
    caps.max_message_bytes = static_cast<int64_t>(chosen_->ep_attr->max_msg_size);
  }
  caps.latency_seconds = 10e-6;
  caps.bandwidth_bytes_per_second = provider_ == "shm" ? 1e9 : 3e8;
  return caps;
}

Status LibfabricTransport::CheckUsable() const { return abort_.status(); }

Result<Bytes> LibfabricTransport::LocalEndpointInfo() {
  FERRY_RETURN_IF_ERROR(CheckUsable());
  std::vector<uint8_t> name(256);
  size_t length = name.size();
  int rc = fi_getname(&ep_->fid, name.data(), &length);
  if (rc == -FI_ETOOSMALL) {
    name.resize(length);
    rc = fi_getname(&ep_->fid, name.data(), &length);
  }
  if (rc != 0) return Unavailable("fi_getname: " + FiError(rc));
  Bytes info;
  const int32_t rank = context_.rank;
  const uint16_t port = watch_.port();
  AppendBytes(info, &kInfoMagic, sizeof(kInfoMagic));
  AppendBytes(info, &context_.epoch, sizeof(context_.epoch));
  AppendBytes(info, &rank, sizeof(rank));
  AppendBlob(info, provider_.data(), provider_.size());
  AppendBlob(info, watch_.host().data(), watch_.host().size());
  AppendBytes(info, &port, sizeof(port));
  AppendBlob(info, name.data(), length);
  return info;
}

Status LibfabricTransport::Connect(int peer_rank, std::span<const uint8_t> peer_info,
                                   Deadline deadline) {
  FERRY_RETURN_IF_ERROR(CheckUsable());
  FERRY_RETURN_IF_ERROR(CheckConnectablePeer(peer_rank, context_.size, peers_.count(peer_rank) != 0));
  const std::string who = "peer " + std::to_string(peer_rank);
  InfoReader reader(peer_info);
  const uint32_t magic = reader.Read<uint32_t>();
  const uint64_t epoch = reader.Read<uint64_t>();
  const int32_t rank = reader.Read<int32_t>();
  const Bytes provider = reader.ReadBlob();
  const Bytes host = reader.ReadBlob();
  const uint16_t port = reader.Read<uint16_t>();
  const Bytes address = reader.ReadBlob();
  if (!reader.ok() || magic != kInfoMagic) {
    return Unavailable(who + ": endpoint info is not from a libfabric transport");
  }
  if (epoch != context_.epoch) {
    return Unavailable(who + ": endpoint info is from epoch " + std::to_string(epoch) +
                       ", this transport is epoch " + std::to_string(context_.epoch));
  }
  if (rank != peer_rank) return Unavailable(who + ": endpoint info belongs to rank " +
                                            std::to_string(rank));
  const std::string peer_provider(provider.begin(), provider.end());
  if (peer_provider != provider_) {
    return Unavailable(who + " uses libfabric provider '" + peer_provider + "', this rank '" +
                       provider_ + "'");
  }
  Peer peer;
  int inserted = fi_av_insert(av_, address.data(), 1, &peer.address, 0, nullptr);
  if (inserted != 1) {
    return Unavailable(who + ": fi_av_insert of its address failed (" +
                       (inserted < 0 ? FiError(inserted) : std::string("0 inserted")) + ")");
  }
  FERRY_RETURN_IF_ERROR(
      watch_.Connect(peer_rank, std::string(host.begin(), host.end()), port, deadline));
  peers_.emplace(peer_rank, peer);
  return Status::Ok();
}

Result<MemoryHandle> LibfabricTransport::RegisterMemory(const MemoryDesc& memory) {
  FERRY_RETURN_IF_ERROR(CheckUsable());
  if (memory.kind != MemoryKind::kHost) {
    return Unimplemented("libfabric transport registers host memory only, not " +
                         std::string(MemoryKindName(memory.kind)));
  }
  if (memory.bytes < 0 || (memory.bytes > 0 && memory.base == nullptr)) {
    return InvalidArgument("RegisterMemory: bad block of " + std::to_string(memory.bytes) +
                           " bytes");
  }
  const uint64_t id = next_registration_++;
  Registration registration;
  registration.desc = memory;
  // Only providers that need local registrations (FI_MR_LOCAL) get one; others take plain memory.
  if ((mr_mode_ & FI_MR_LOCAL) != 0 && memory.bytes > 0) {
    int rc = fi_mr_reg(domain_, memory.base, static_cast<size_t>(memory.bytes), FI_SEND | FI_RECV,
                       0, (mr_mode_ & FI_MR_PROV_KEY) != 0 ? 0 : id, 0, &registration.mr, nullptr);
    if (rc != 0) {
      return Unavailable("fi_mr_reg of " + std::to_string(memory.bytes) + " bytes: " +
                         FiError(rc));
    }
    if ((mr_mode_ & FI_MR_ENDPOINT) != 0) {
      if ((rc = fi_mr_bind(registration.mr, &ep_->fid, 0)) != 0 ||
          (rc = fi_mr_enable(registration.mr)) != 0) {
        fi_close(&registration.mr->fid);
        return Unavailable("binding a memory registration to the endpoint: " + FiError(rc));
      }
    }
  }
  registrations_.emplace(id, registration);
  return MemoryHandle{id};
}

Status LibfabricTransport::DeregisterMemory(MemoryHandle memory) {
  auto it = registrations_.find(memory.id);
  if (it == registrations_.end()) {
    return NotFound("DeregisterMemory: unknown handle " + std::to_string(memory.id));
  }
  if (it->second.mr != nullptr) fi_close(&it->second.mr->fid);
  registrations_.erase(it);
  return Status::Ok();
}

Result<void*> LibfabricTransport::Resolve(const LocalBuffer& buffer, void** desc) const {
  auto it = registrations_.find(buffer.memory.id);
  if (it == registrations_.end()) {
    return InvalidArgument("buffer uses unknown memory handle " +
                           std::to_string(buffer.memory.id));
  }
  const MemoryDesc& block = it->second.desc;
  if (buffer.offset < 0 || buffer.bytes < 0 || buffer.offset + buffer.bytes > block.bytes) {
    return OutOfRange("buffer [" + std::to_string(buffer.offset) + ", +" +
                      std::to_string(buffer.bytes) + ") lies outside its registered block of " +
                      std::to_string(block.bytes) + " bytes");
  }
  *desc = it->second.mr != nullptr ? fi_mr_desc(it->second.mr) : nullptr;
  return static_cast<void*>(static_cast<char*>(block.base) + buffer.offset);
}

Result<RequestId> LibfabricTransport::PostSend(int peer, uint64_t tag, const LocalBuffer& buffer) {
  return Post(true, peer, tag, buffer);
}

Result<RequestId> LibfabricTransport::PostRecv(int peer, uint64_t tag, const LocalBuffer& buffer) {
  return Post(false, peer, tag, buffer);
}

Result<RequestId> LibfabricTransport::Post(bool is_send, int peer_rank, uint64_t tag,
                                           const LocalBuffer& buffer) {
  FERRY_RETURN_IF_ERROR(CheckUsable());
  auto peer = peers_.find(peer_rank);
  if (peer == peers_.end()) {
    return FailedPrecondition("peer " + std::to_string(peer_rank) + " is not connected");
  }
  void* desc = nullptr;
  FERRY_ASSIGN_OR_RETURN(void* data, Resolve(buffer, &desc));
  auto owned = std::make_unique<Op>();
  Op* op = owned.get();
  op->id = next_request_++;
  op->is_send = is_send;
  op->peer = peer_rank;
  op->tag = tag;
  op->wire_tag = is_send ? tags_->NextSend(peer_rank, tag) : tags_->NextReceive(peer_rank, tag);
  op->data = data;
  op->bytes = static_cast<size_t>(buffer.bytes);
  op->desc = desc;
  ops_.emplace(op->id, std::move(owned));
  const RequestId id = op->id;
  if (!peer->second.failure.ok()) {
    Finish(op, peer->second.failure, 0);
  } else if (!backlog_.empty() || !Issue(op)) {
    backlog_.push_back(op);  // keeps posting order behind earlier refused posts
  }
  return id;
}

bool LibfabricTransport::Issue(Op* op) {
  const fi_addr_t address = peers_.at(op->peer).address;
  const uint64_t wire_tag = op->wire_tag;
  ssize_t rc = op->is_send
                   ? fi_tsend(ep_, op->data, op->bytes, op->desc, address, wire_tag, &op->context)
                   : fi_trecv(ep_, op->data, op->bytes, op->desc, address, wire_tag, 0,
                              &op->context);
  if (rc == -FI_EAGAIN) return false;
  if (rc != 0) {
    Finish(op, Unavailable(std::string(op->is_send ? "fi_tsend" : "fi_trecv") + ": " +
                           FiError(static_cast<int>(rc))), 0);
    return true;
  }
  op->in_provider = true;
  return true;
}

void LibfabricTransport::Finish(Op* op, Status status, int64_t bytes) {
  if (!op->reported) {
    op->reported = true;
    if (!status.ok()) {
      status = std::move(status).WithContext(
          "libfabric/" + provider_ + (op->is_send ? " send to" : " receive from") + " peer " +
          std::to_string(op->peer) + " tag " + std::to_string(op->tag));
    }
    ready_.push_back(Completion{op->id, std::move(status), bytes});
  }
  ReleaseIfDone(op);
}

void LibfabricTransport::ReleaseIfDone(Op* op) {
  if (op->reported && !op->in_provider) ops_.erase(op->id);
}

void LibfabricTransport::ReadCompletions() {
  fi_cq_tagged_entry entries[32];
  // Bounded, so that Poll checks its deadline and abort flag between batches.
  for (int batch = 0; batch < 16; ++batch) {
    ssize_t n = fi_cq_read(cq_, entries, 32);
    if (n == -FI_EAGAIN) return;
    if (n == -FI_EAVAIL) {
      fi_cq_err_entry error{};
      if (fi_cq_readerr(cq_, &error, 0) <= 0) return;
      Op* op = reinterpret_cast<Op*>(error.op_context);
      if (op == nullptr) continue;
      op->in_provider = false;
      const int code = error.err < 0 ? -error.err : error.err;  // providers differ in sign
      if (code == FI_ETRUNC) {
        Finish(op, OutOfRange("message of " + std::to_string(op->bytes + error.olen) +
                              " bytes does not fit the " + std::to_string(op->bytes) +
                              "-byte receive buffer"), 0);
      } else if (code == FI_ECANCELED) {
        Finish(op, Aborted("request cancelled"), 0);
      } else {
        const char* detail =
            fi_cq_strerror(cq_, error.prov_errno, error.err_data, nullptr, 0);
        Finish(op, Unavailable(FiError(code) + " (" + (detail ? detail : "") + ")"), 0);
      }
      continue;
    }
    if (n < 0) {
      Abort(Unavailable("fi_cq_read: " + FiError(static_cast<int>(n))));
      return;
    }
    for (ssize_t i = 0; i < n; ++i) {
      Op* op = reinterpret_cast<Op*>(entries[i].op_context);
      op->in_provider = false;
      Finish(op, Status::Ok(), static_cast<int64_t>(op->is_send ? op->bytes : entries[i].len));
    }
  }
}

void LibfabricTransport::FailPeer(int rank, Status failure) {
  Peer& peer = peers_.at(rank);
  peer.failure = failure;
  std::vector<Op*> waiting;
  for (auto& [id, op] : ops_) {
    if (op->peer == rank && !op->reported) waiting.push_back(op.get());
  }
  for (Op* op : waiting) {
    std::erase(backlog_, op);
    // Receives can be cancelled; the provider's cancellation entry then frees the op. A send to a
    // dead peer is left with the provider until the endpoint closes.
    if (op->in_provider && !op->is_send) fi_cancel(&ep_->fid, &op->context);
    Finish(op, failure, 0);
  }
}

void LibfabricTransport::WatchPeers() {
  for (int rank : watch_.PollGone()) {
    auto it = peers_.find(rank);
    if (it == peers_.end()) continue;
    it->second.going = true;
    it->second.gone_at = Deadline::AfterSeconds(grace_seconds_);
  }
  for (auto& [rank, peer] : peers_) {
    if (peer.going && peer.failure.ok() && peer.gone_at.Expired()) {
      FailPeer(rank, Unavailable("peer " + std::to_string(rank) +
                                 " exited or failed (its peer watch connection closed)"));
    }
  }
}

Status LibfabricTransport::Cancel(RequestId request) {
  auto it = ops_.find(request);
  if (it == ops_.end()) return Status::Ok();
  Op* op = it->second.get();
  if (op->reported) return Status::Ok();
  std::erase(backlog_, op);
  if (op->in_provider) fi_cancel(&ep_->fid, &op->context);
  Finish(op, Aborted("request cancelled"), 0);
  return Status::Ok();
}

void LibfabricTransport::Abort(const Status& reason) { abort_.Abort(reason); }

void LibfabricTransport::DrainAbort() {
  Status reason = CheckUsable();
  backlog_.clear();
  for (auto& [id, op] : ops_) {
    if (op->reported) continue;
    op->reported = true;
    ready_.push_back(Completion{op->id, reason, 0});
  }
}

Result<int> LibfabricTransport::Poll(std::span<Completion> out, Deadline deadline) {
  int idle_rounds = 0;
  while (true) {
    if (abort_.aborted()) {
      if (abort_.TakeDrain()) DrainAbort();
      if (ready_.empty()) return CheckUsable();
    } else {
      ReadCompletions();
      while (!backlog_.empty() && !abort_.aborted()) {
        Op* op = backlog_.front();
        if (!Issue(op)) break;
        backlog_.pop_front();
      }
      if ((idle_rounds & 31) == 0) WatchPeers();
    }
    if (!ready_.empty() && !out.empty()) return TakeCompletions(ready_, out);
    if (deadline.Expired()) return 0;
    IdlePollBackoff(++idle_rounds);
  }
}

}  // namespace

std::vector<OptionSpec> LibfabricTransportOptions() {
  return {
      {"libfabric.provider", "tcp",
       "libfabric provider for FI_EP_RDM tagged messages: tcp, shm, sockets here; efa, verbs on "
       "clusters ('' lets libfabric pick)"},
      {"libfabric.domain", "",
       "libfabric domain (NIC) name, e.g. 'lo' or 'eth0' for tcp; '' takes the provider's first"},
      {"libfabric.watch_host", "",
       "address peers use for the peer-watch TCP connection that detects dead peers, and the "
       "one it listens on; '' uses this host's first non-loopback IPv4 address"},
      {"libfabric.peer_exit_grace", "200ms",
       "after a peer's watch connection closes, how long its messages already on the way may "
       "still complete before its pending requests fail"},
  };
}

Result<std::unique_ptr<Transport>> CreateLibfabricTransport(const TransportContext& context) {
  auto transport = std::make_unique<LibfabricTransport>(context);
  FERRY_RETURN_IF_ERROR(transport->Init().WithContext("libfabric transport"));
  return std::unique_ptr<Transport>(std::move(transport));
}

namespace {
const TransportRegistrar kLibfabricRegistrar({
    "libfabric",
    "libfabric FI_EP_RDM tagged messages; provider from libfabric.provider",
    LibfabricTransportOptions(),
    &CreateLibfabricTransport,
});
}  // namespace

}  // namespace ferry
