// UcxTransport: the "ucx" Transport (see ucx_transport.h) — UCP context/worker/endpoints, the
// active-message matching engine for two-sided messages, one-sided put + notify, memory
// registration with ucp_mem_map (host, and CUDA where the loaded UCX supports it), and the
// registration under the name "ucx".
#include "transports/ucx/ucx_transport.h"

#include <ucp/api/ucp.h>

#include <cstddef>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>

#include "core/runtime/abort_state.h"
#include "core/runtime/handshake.h"
#include "core/runtime/message_seal.h"
#include "transports/ucx/ucx_lanes.h"
#include "transports/ucx/ucx_memory.h"

namespace ferry {
namespace {

constexpr uint32_t kInfoMagic = 0x58435546;  // "FUCX"
constexpr uint32_t kHeaderMagic = 0x4d415546;  // "FUAM"
constexpr unsigned kAmId = 7;

enum class MessageKind : uint32_t { kData = 1, kNotify = 2 };

// The header of every active message this transport sends. Plain bytes, same layout on both sides
// (ferry ranks run the same build).
struct AmHeader {
  uint32_t magic = kHeaderMagic;
  MessageKind kind = MessageKind::kData;
  uint64_t epoch = 0;
  int32_t sender = 0;
  int32_t reserved = 0;
  uint64_t tag = 0;
  uint64_t notify_bytes = 0;  // kNotify: size of the put it announces
  // MessageSeal (core/runtime/message_seal.h): the sender's sequence number towards this
  // receiver and a MAC of the header under the pair's key. A message without the right MAC, or
  // whose sequence number was already accepted (a replay), is dropped unread.
  uint64_t sequence = 0;
  PairAuthenticator auth{};
};
static_assert(sizeof(AmHeader) == 64, "AmHeader has no padding: its MAC covers every byte");

std::string UcsError(ucs_status_t status) { return ucs_status_string(status); }

// Senders to a rank that moves CUDA memory send data rendezvous; a message that still came eager
// and in memory UCX would not let us keep cannot be written into a CUDA receive buffer.
constexpr const char* kEagerIntoCuda =
    "an eager message into CUDA memory arrived without a descriptor UCX lets us keep (the sender "
    "does not move CUDA memory: run every rank with the same UCX and ucx.cuda)";


class UcxTransport final : public Transport {
 public:
  explicit UcxTransport(const TransportContext& context) : context_(context) {}
  ~UcxTransport() override;

  Status Init();

  std::string_view name() const override { return "ucx"; }
  TransportCapabilities capabilities() const override;
  std::string DescribeLinks() const override;
  Result<Bytes> LocalEndpointInfo() override;
  Status Connect(int peer, std::span<const uint8_t> peer_info, Deadline deadline) override;
  Result<MemoryHandle> RegisterMemory(const MemoryDesc& memory) override;
  Status DeregisterMemory(MemoryHandle memory) override;
  Result<Bytes> RemoteKey(MemoryHandle memory) override;
  Result<RequestId> PostSend(int peer, uint64_t tag, const LocalBuffer& buffer) override;
  Result<RequestId> PostRecv(int peer, uint64_t tag, const LocalBuffer& buffer) override;
  Result<RequestId> PostPut(int peer, uint64_t tag, const LocalBuffer& local,
                            const RemoteBuffer& remote) override;
  Result<RequestId> PostRecvNotify(int peer, uint64_t tag) override;
  Result<int> Poll(std::span<Completion> out, Deadline deadline) override;
  Status Cancel(RequestId request) override;
  void Abort(const Status& reason) override;

 private:
  enum class OpKind { kSend, kRecv, kPut, kRecvNotify };

  struct Registration {
    MemoryDesc desc;
    ucp_mem_h memh = nullptr;  // null for zero-byte blocks
  };

  // One posted request. Owned by ops_; stays alive while UCX holds a callback to it
  // (ucx_pending > 0) or deferred_ holds it (deferred), even after it was reported, so late
  // callbacks and the deferred rendezvous never touch freed memory: a peer's death can fail the
  // request inside the same progress sweep that matched its rendezvous arrival.
  struct Op {
    UcxTransport* self = nullptr;
    RequestId id = 0;
    OpKind kind = OpKind::kSend;
    int peer = 0;
    uint64_t tag = 0;
    void* data = nullptr;  // send source / receive destination / put source
    bool cuda = false;         // `data` is CUDA memory
    ucp_mem_h memh = nullptr;  // the registration of the block `data` lies in (CUDA only)
    size_t capacity = 0;   // bytes to send, or the receive buffer's size
    uint64_t remote_address = 0;
    ucp_rkey_h rkey = nullptr;
    AmHeader header;       // stays valid until the send completes
    int ucx_pending = 0;   // UCX requests that will still call back with this op
    bool deferred = false; // in deferred_, waiting for its rendezvous receive to start
    bool reported = false;
    Status failure;        // first error seen by a multi-stage op (put)
  };

  // A message that arrived before its receive was posted.
  struct Arrival {
    MessageKind kind = MessageKind::kData;
    void* ucx_data = nullptr;  // persistent eager data or rendezvous descriptor (null if copied)
    bool rendezvous = false;
    Bytes copy;                // eager data UCX would not let us keep
    size_t length = 0;
  };

  struct Peer {
    UcxTransport* self = nullptr;
    int rank = -1;
    ucp_ep_h ep = nullptr;
    // The peer moves CUDA memory (its endpoint info says so): data messages to it go rendezvous,
    // so that its UCX writes them into whatever memory its receive names.
    bool accepts_cuda = false;
    Status failure;  // set once the endpoint reported an error
    std::map<Bytes, ucp_rkey_h> rkeys;  // unpacked remote keys by their packed bytes
  };

  using MatchKey = std::tuple<MessageKind, int, uint64_t>;  // (kind, peer, tag)

  static void OnEndpointError(void* arg, ucp_ep_h ep, ucs_status_t status);
  static ucs_status_t OnActiveMessage(void* arg, const void* header, size_t header_length,
                                      void* data, size_t length, const ucp_am_recv_param_t* param);
  static void OnSendDone(void* request, ucs_status_t status, void* user_data);
  static void OnRecvDataDone(void* request, ucs_status_t status, size_t length, void* user_data);
  static void OnPutDataDone(void* request, ucs_status_t status, void* user_data);
  static void OnPutFlushed(void* request, ucs_status_t status, void* user_data);

  Status CheckUsable() const;
  Result<Peer*> FindPeer(int peer);
  // The address of `buffer` and the registration it lies in.
  Result<std::pair<void*, const Registration*>> Resolve(const LocalBuffer& buffer) const;
  // Names `op`'s memory to UCX in `param`: memory type and handle for CUDA blocks.
  static void DescribeMemory(const Op& op, ucp_request_param_t& param);
  // Whether `op` receives into CUDA memory.
  static bool IntoCuda(const Op& op);
  Op* NewOp(OpKind kind, int peer, uint64_t tag);
  void Finish(Op* op, Status status, int64_t bytes);
  void ReleaseIfDone(Op* op);
  // Starts delivering `arrival` into the posted receive `op` (copy, or a rendezvous get).
  void Deliver(Op* op, Arrival arrival);
  // A newly posted receive: delivers the oldest unexpected arrival for `key`, fails at once if the
  // peer is dead, else queues the op to be matched when its message arrives.
  void MatchOrPost(Op* op, const Peer& peer, const MatchKey& key);
  // Tracks a UCX request pointer returned by a *_nbx call for `op`; returns the immediate status
  // (OK when UCX completed it at once or will call back, the error otherwise).
  ucs_status_t Track(Op* op, ucs_status_ptr_t request);
  void SendNotify(Op* op);
  // Records the lanes UCX selected for `peer` and checks them against ucx.tls: shared memory asked
  // for but a same-host peer reached over loopback is reported (stderr, once), or refused under
  // ucx.strict_tls.
  Status CheckLanes(int peer, ucp_ep_h ep);
  void FailPeer(Peer& peer, ucs_status_t status);
  void DrainAbort();

  // Fills the header fields every message carries: epoch and sender.
  void Stamp(AmHeader& header) const;
  // Seals a header whose fields are final for `peer`: sequence number and MAC (MessageSeal).
  void Seal(AmHeader& header, int peer);
  // Whether `h` carries its claimed sender's MAC and a sequence number not yet accepted; logs the
  // first refusals.
  bool Authentic(const AmHeader& h);

  TransportContext context_;
  std::unique_ptr<MessageSeal> seal_;  // set by Init
  int refused_ = 0;
  bool peer_error_mode_ = true;
  std::string tls_;          // ucx.tls as asked
  bool strict_tls_ = false;  // ucx.strict_tls
  bool warned_tls_ = false;
  bool cuda_ = false;                      // moves CUDA memory (ucx.cuda and what UCX supports)
  std::vector<std::string> cuda_transports_;  // the UCX transports that can carry it
  std::map<int, std::vector<std::string>> lanes_of_peer_;  // what UCX selected, per peer
  double close_timeout_seconds_ = 2.0;
  ucp_context_h ucp_ = nullptr;
  ucp_worker_h worker_ = nullptr;

  std::map<int, std::unique_ptr<Peer>> peers_;
  std::unordered_map<uint64_t, Registration> registrations_;
  uint64_t next_registration_ = 1;
  std::unordered_map<RequestId, std::unique_ptr<Op>> ops_;
  RequestId next_request_ = 1;
  std::map<MatchKey, std::deque<Op*>> posted_;
  std::map<MatchKey, std::deque<Arrival>> unexpected_;
  std::deque<Completion> ready_;
  // Rendezvous arrivals matched inside the AM callback; their data receive starts after progress.
  std::deque<std::pair<Op*, Arrival>> deferred_;

  AbortState abort_{"ucx"};
};

UcxTransport::~UcxTransport() {
  if (worker_ != nullptr) {
    // Arrivals still held go back to UCX first: releasing a rendezvous one answers its sender
    // (ucp_am_data_release sends the ATS, src/ucp/core/ucp_am.c), which needs the endpoint open.
    for (auto& [key, queue] : unexpected_) {
      for (Arrival& arrival : queue) {
        if (arrival.ucx_data != nullptr) ucp_am_data_release(worker_, arrival.ucx_data);
      }
    }
    for (auto& [op, arrival] : deferred_) {
      if (arrival.ucx_data != nullptr) ucp_am_data_release(worker_, arrival.ucx_data);
    }
    // Flush-close every endpoint so that data already handed to UCX reaches live peers; force the
    // close of any that do not finish in time (dead peers, aborted transport).
    std::vector<ucs_status_ptr_t> closing;
    const bool force = abort_.aborted();
    for (auto& [rank, peer] : peers_) {
      if (peer->ep == nullptr) continue;
      ucp_request_param_t param{};
      param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      param.flags = (force || !peer->failure.ok()) ? UCP_EP_CLOSE_FLAG_FORCE : 0;
      for (auto& [bytes, rkey] : peer->rkeys) ucp_rkey_destroy(rkey);
      peer->rkeys.clear();
      ucs_status_ptr_t request = ucp_ep_close_nbx(peer->ep, &param);
      if (request != nullptr && !UCS_PTR_IS_ERR(request)) closing.push_back(request);
      peer->ep = nullptr;
    }
    Deadline deadline = Deadline::AfterSeconds(close_timeout_seconds_);
    for (ucs_status_ptr_t request : closing) {
      while (ucp_request_check_status(request) == UCS_INPROGRESS && !deadline.Expired()) {
        ucp_worker_progress(worker_);
      }
      ucp_request_free(request);
    }
    for (auto& [id, registration] : registrations_) {
      if (registration.memh != nullptr) ucp_mem_unmap(ucp_, registration.memh);
    }
    ucp_worker_destroy(worker_);
  }
  if (ucp_ != nullptr) ucp_cleanup(ucp_);
}

Status UcxTransport::Init() {
  if (context_.secret.empty()) {
    return InvalidArgument("ucx: no secret in the transport context to authenticate peers with");
  }
  seal_ = std::make_unique<MessageSeal>(context_.secret, "ucx", context_.rank, context_.size);
  const std::string tls = context_.Option("ucx.tls", "");
  tls_ = tls;
  if (context_.config != nullptr) {
    auto strict = context_.config->GetBool("ucx.strict_tls");
    if (strict.ok()) {
      strict_tls_ = *strict;
    } else if (strict.status().code() == StatusCode::kInvalidArgument) {
      return strict.status();  // present but not a boolean; absent (a bare Config) means false
    }
  }
  const std::string error_mode = context_.Option("ucx.error_mode", "peer");
  if (error_mode != "peer" && error_mode != "none") {
    return InvalidArgument("ucx.error_mode must be 'peer' or 'none', got '" + error_mode + "'");
  }
  peer_error_mode_ = error_mode == "peer";
  FERRY_ASSIGN_OR_RETURN(const ucx::CudaMode cuda_mode,
                         ucx::ParseCudaMode(context_.Option("ucx.cuda", "auto")));
  if (context_.config != nullptr) {
    auto timeout = context_.config->GetSeconds("ucx.close_timeout");
    if (timeout.ok()) close_timeout_seconds_ = *timeout;
  }

  ucp_config_t* config = nullptr;
  ucs_status_t status = ucp_config_read(nullptr, nullptr, &config);
  if (status != UCS_OK) return Unavailable("ucp_config_read: " + UcsError(status));
  if (!tls.empty()) {
    status = ucp_config_modify(config, "TLS", tls.c_str());
    if (status != UCS_OK) {
      ucp_config_release(config);
      return InvalidArgument("ucx.tls='" + tls + "' rejected by UCX: " + UcsError(status));
    }
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME;
  params.features = UCP_FEATURE_AM | UCP_FEATURE_RMA;
  const std::string name = "ferry-r" + std::to_string(context_.rank);
  params.name = name.c_str();
  status = ucp_init(&params, config, &ucp_);
  ucp_config_release(config);
  if (status != UCS_OK) return Unavailable("ucp_init: " + UcsError(status));
  FERRY_ASSIGN_OR_RETURN(cuda_, ucx::DecideCuda(cuda_mode, ucx::ContextMemoryTypes(ucp_),
                                                ucp_get_version_string()));
  if (cuda_) cuda_transports_ = ucx::CudaTransports(ucx::ContextResources(ucp_));

  ucp_worker_params_t worker_params{};
  worker_params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  worker_params.thread_mode = UCS_THREAD_MODE_SINGLE;
  status = ucp_worker_create(ucp_, &worker_params, &worker_);
  if (status != UCS_OK) return Unavailable("ucp_worker_create: " + UcsError(status));

  ucp_am_handler_param_t handler{};
  handler.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                       UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
  handler.id = kAmId;
  handler.cb = &UcxTransport::OnActiveMessage;
  handler.arg = this;
  handler.flags = UCP_AM_FLAG_WHOLE_MSG | UCP_AM_FLAG_PERSISTENT_DATA;
  status = ucp_worker_set_am_recv_handler(worker_, &handler);
  if (status != UCS_OK) return Unavailable("ucp_worker_set_am_recv_handler: " + UcsError(status));
  return Status::Ok();
}

TransportCapabilities UcxTransport::capabilities() const {
  TransportCapabilities caps;
  caps.host_memory = true;
  caps.cuda_memory = cuda_;
  caps.two_sided = true;
  caps.one_sided = true;
  caps.cancel = true;
  caps.inter_node = true;
  caps.latency_seconds = 5e-6;
  caps.bandwidth_bytes_per_second = 2e9;
  return caps;
}

std::string UcxTransport::DescribeLinks() const {
  const std::string lanes = ucx::SummarizeLanes(lanes_of_peer_);
  if (!cuda_) return lanes;
  std::string through;
  for (const std::string& tl : cuda_transports_) through += (through.empty() ? "" : ",") + tl;
  return "CUDA memory through UCX " + std::string(ucp_get_version_string()) + " (" +
         (through.empty() ? "no cuda transport listed" : through) + "); " + lanes;
}

Status UcxTransport::CheckUsable() const { return abort_.status(); }

Result<Bytes> UcxTransport::LocalEndpointInfo() {
  FERRY_RETURN_IF_ERROR(CheckUsable());
  ucp_address_t* address = nullptr;
  size_t length = 0;
  ucs_status_t status = ucp_worker_get_address(worker_, &address, &length);
  if (status != UCS_OK) return Unavailable("ucp_worker_get_address: " + UcsError(status));
  Bytes info;
  const int32_t rank = context_.rank;
  const uint8_t peer_mode = peer_error_mode_ ? 1 : 0;
  const uint8_t accepts_cuda = cuda_ ? 1 : 0;
  AppendBytes(info, &kInfoMagic, sizeof(kInfoMagic));
  AppendBytes(info, &context_.epoch, sizeof(context_.epoch));
  AppendBytes(info, &rank, sizeof(rank));
  AppendBytes(info, &peer_mode, sizeof(peer_mode));
  AppendBytes(info, &accepts_cuda, sizeof(accepts_cuda));
  AppendBytes(info, address, length);
  ucp_worker_release_address(worker_, address);
  return info;
}

Status UcxTransport::Connect(int peer_rank, std::span<const uint8_t> info, Deadline deadline) {
  (void)deadline;  // creating a UCP endpoint does not wait for the peer
  FERRY_RETURN_IF_ERROR(CheckUsable());
  FERRY_RETURN_IF_ERROR(CheckConnectablePeer(peer_rank, context_.size, peers_.count(peer_rank) != 0));
  const std::string who = "peer " + std::to_string(peer_rank);
  constexpr size_t kPrefix = sizeof(uint32_t) + sizeof(uint64_t) + sizeof(int32_t) + 2;
  if (info.size() <= kPrefix) {
    return Unavailable(who + ": endpoint info of " + std::to_string(info.size()) +
                       " bytes is not ucx endpoint info");
  }
  uint32_t magic = 0;
  uint64_t epoch = 0;
  int32_t rank = 0;
  uint8_t peer_mode = 0;
  uint8_t accepts_cuda = 0;
  std::memcpy(&magic, info.data(), sizeof(magic));
  std::memcpy(&epoch, info.data() + 4, sizeof(epoch));
  std::memcpy(&rank, info.data() + 12, sizeof(rank));
  std::memcpy(&peer_mode, info.data() + 16, sizeof(peer_mode));
  std::memcpy(&accepts_cuda, info.data() + 17, sizeof(accepts_cuda));
  if (magic != kInfoMagic) return Unavailable(who + ": endpoint info is not from a ucx transport");
  if (epoch != context_.epoch) {
    return Unavailable(who + ": endpoint info is from epoch " + std::to_string(epoch) +
                       ", this transport is epoch " + std::to_string(context_.epoch));
  }
  if (rank != peer_rank) {
    return Unavailable(who + ": endpoint info belongs to rank " + std::to_string(rank));
  }
  if ((peer_mode == 1) != peer_error_mode_) {
    return Unavailable(who + " uses a different ucx.error_mode");
  }

  auto peer = std::make_unique<Peer>();
  peer->self = this;
  peer->rank = peer_rank;
  peer->accepts_cuda = accepts_cuda == 1;
  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER;
  params.address = reinterpret_cast<const ucp_address_t*>(info.data() + kPrefix);
  params.err_mode = peer_error_mode_ ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
  params.err_handler.cb = &UcxTransport::OnEndpointError;
  params.err_handler.arg = peer.get();
  ucs_status_t status = ucp_ep_create(worker_, &params, &peer->ep);
  if (status != UCS_OK) {
    std::string hint;
    if (peer_error_mode_) {
      hint = " (with ucx.error_mode=peer UCX needs a transport that detects peer failure; "
             "UCX 1.13's shared-memory transports do not: allow tcp, e.g. UCX_TLS=tcp or "
             "ucx.tls=sm,tcp)";
    }
    return Unavailable(who + ": ucp_ep_create: " + UcsError(status) + hint);
  }
  ucp_ep_h ep = peer->ep;
  peers_.emplace(peer_rank, std::move(peer));
  return CheckLanes(peer_rank, ep);
}

Status UcxTransport::CheckLanes(int peer, ucp_ep_h ep) {
  const std::vector<std::string>& lanes = lanes_of_peer_[peer] = ucx::EndpointLanes(ep);
  if (peer == context_.rank || !ucx::AsksForSharedMemory(tls_) || ucx::UsesSharedMemory(lanes) ||
      !ucx::ThroughLoopback(lanes)) {
    return Status::Ok();
  }
  const std::string what =
      "ucx rank " + std::to_string(context_.rank) + ": ucx.tls=" + tls_ +
      " asks for shared memory, but UCX reaches peer " + std::to_string(peer) +
      " on this host through " + ucx::SummarizeLanes({{peer, lanes}}) +
      (peer_error_mode_ ? " (ucx.error_mode=peer: UCX 1.13 drops its shared-memory transports; "
                          "ucx.error_mode=none keeps them, and ferry's peer monitor still detects "
                          "dead peers)"
                        : "");
  if (strict_tls_) return FailedPrecondition(what + "; refused because ucx.strict_tls=true");
  if (!warned_tls_) {
    warned_tls_ = true;
    std::fprintf(stderr, "ferry: WARNING: %s\n", what.c_str());
  }
  return Status::Ok();
}

Result<MemoryHandle> UcxTransport::RegisterMemory(const MemoryDesc& memory) {
  FERRY_RETURN_IF_ERROR(CheckUsable());
  if (memory.kind == MemoryKind::kCuda && !cuda_) {
    return Unimplemented(std::string("ucx transport registers host memory only, not cuda: ") +
                         "the loaded UCX " + ucp_get_version_string() +
                         " supports no CUDA memory or ucx.cuda=off");
  }
  if (memory.bytes < 0 || (memory.bytes > 0 && memory.base == nullptr)) {
    return InvalidArgument("RegisterMemory: bad block (base " +
                           std::to_string(reinterpret_cast<uintptr_t>(memory.base)) + ", " +
                           std::to_string(memory.bytes) + " bytes)");
  }
  Registration registration;
  registration.desc = memory;
  if (memory.bytes > 0) {
    ucp_mem_map_params_t params{};
    params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    params.address = memory.base;
    params.length = static_cast<size_t>(memory.bytes);
    if (memory.kind == MemoryKind::kCuda) {
      params.field_mask |= UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;
      params.memory_type = UCS_MEMORY_TYPE_CUDA;
    }
    ucs_status_t status = ucp_mem_map(ucp_, &params, &registration.memh);
    if (status != UCS_OK) {
      return Unavailable("ucp_mem_map of " + std::to_string(memory.bytes) + " bytes of " +
                         std::string(MemoryKindName(memory.kind)) + " memory: " + UcsError(status));
    }
  }
  const uint64_t id = next_registration_++;
  registrations_.emplace(id, registration);
  return MemoryHandle{id};
}

Status UcxTransport::DeregisterMemory(MemoryHandle memory) {
  auto it = registrations_.find(memory.id);
  if (it == registrations_.end()) {
    return NotFound("DeregisterMemory: unknown handle " + std::to_string(memory.id));
  }
  if (it->second.memh != nullptr) ucp_mem_unmap(ucp_, it->second.memh);
  registrations_.erase(it);
  return Status::Ok();
}

Result<Bytes> UcxTransport::RemoteKey(MemoryHandle memory) {
  FERRY_RETURN_IF_ERROR(CheckUsable());
  auto it = registrations_.find(memory.id);
  if (it == registrations_.end()) {
    return NotFound("RemoteKey: unknown handle " + std::to_string(memory.id));
  }
  Bytes key;
  const uint64_t base = reinterpret_cast<uintptr_t>(it->second.desc.base);
  const int64_t bytes = it->second.desc.bytes;
  AppendBytes(key, &base, sizeof(base));
  AppendBytes(key, &bytes, sizeof(bytes));
  if (it->second.memh != nullptr) {
    void* packed = nullptr;
    size_t packed_size = 0;
    ucs_status_t status = ucp_rkey_pack(ucp_, it->second.memh, &packed, &packed_size);
    if (status != UCS_OK) return Unavailable("ucp_rkey_pack: " + UcsError(status));
    AppendBytes(key, packed, packed_size);
    ucp_rkey_buffer_release(packed);
  }
  return key;
}

Result<UcxTransport::Peer*> UcxTransport::FindPeer(int peer) {
  auto it = peers_.find(peer);
  if (it == peers_.end()) {
    return FailedPrecondition("peer " + std::to_string(peer) + " is not connected");
  }
  return it->second.get();
}

Result<std::pair<void*, const UcxTransport::Registration*>> UcxTransport::Resolve(
    const LocalBuffer& buffer) const {
  auto it = registrations_.find(buffer.memory.id);
  if (it == registrations_.end()) {
    return InvalidArgument("buffer uses unknown memory handle " +
                           std::to_string(buffer.memory.id));
  }
  const MemoryDesc& desc = it->second.desc;
  if (buffer.offset < 0 || buffer.bytes < 0 || buffer.offset + buffer.bytes > desc.bytes) {
    return OutOfRange("buffer [" + std::to_string(buffer.offset) + ", +" +
                      std::to_string(buffer.bytes) + ") lies outside its registered block of " +
                      std::to_string(desc.bytes) + " bytes");
  }
  return std::pair<void*, const Registration*>(static_cast<char*>(desc.base) + buffer.offset,
                                               &it->second);
}

void UcxTransport::DescribeMemory(const Op& op, ucp_request_param_t& param) {
  if (!op.cuda) return;
  param.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMORY_TYPE;
  param.memory_type = UCS_MEMORY_TYPE_CUDA;
  if (op.memh != nullptr) {
    param.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
    param.memh = op.memh;
  }
}

bool UcxTransport::IntoCuda(const Op& op) { return op.kind == OpKind::kRecv && op.cuda; }

UcxTransport::Op* UcxTransport::NewOp(OpKind kind, int peer, uint64_t tag) {
  auto op = std::make_unique<Op>();
  op->self = this;
  op->id = next_request_++;
  op->kind = kind;
  op->peer = peer;
  op->tag = tag;
  Op* raw = op.get();
  ops_.emplace(raw->id, std::move(op));
  return raw;
}

void UcxTransport::Finish(Op* op, Status status, int64_t bytes) {
  if (op->reported) {
    ReleaseIfDone(op);
    return;
  }
  op->reported = true;
  if (!status.ok()) {
    status = std::move(status).WithContext("ucx " +
                                           std::string(op->kind == OpKind::kSend   ? "send to"
                                                       : op->kind == OpKind::kPut ? "put to"
                                                                                  : "receive from") +
                                           " peer " + std::to_string(op->peer) + " tag " +
                                           std::to_string(op->tag));
  }
  ready_.push_back(Completion{op->id, std::move(status), bytes});
  ReleaseIfDone(op);
}

void UcxTransport::ReleaseIfDone(Op* op) {
  if (!op->reported || op->ucx_pending > 0 || op->deferred) return;
  if (op->kind == OpKind::kRecv || op->kind == OpKind::kRecvNotify) {
    auto it = posted_.find(MatchKey{op->kind == OpKind::kRecv ? MessageKind::kData
                                                               : MessageKind::kNotify,
                                    op->peer, op->tag});
    if (it != posted_.end()) {
      std::erase(it->second, op);
      if (it->second.empty()) posted_.erase(it);
    }
  }
  ops_.erase(op->id);
}

ucs_status_t UcxTransport::Track(Op* op, ucs_status_ptr_t request) {
  if (request == nullptr) return UCS_OK;
  if (UCS_PTR_IS_ERR(request)) return UCS_PTR_STATUS(request);
  ++op->ucx_pending;
  return UCS_OK;
}

void UcxTransport::OnSendDone(void* request, ucs_status_t status, void* user_data) {
  Op* op = static_cast<Op*>(user_data);
  ucp_request_free(request);
  --op->ucx_pending;
  if (status == UCS_OK) {
    op->self->Finish(op, Status::Ok(), static_cast<int64_t>(op->capacity));
  } else {
    op->self->Finish(op, Unavailable(UcsError(status)), 0);
  }
}

void UcxTransport::OnRecvDataDone(void* request, ucs_status_t status, size_t length,
                                  void* user_data) {
  Op* op = static_cast<Op*>(user_data);
  ucp_request_free(request);
  --op->ucx_pending;
  if (status == UCS_OK) {
    op->self->Finish(op, Status::Ok(), static_cast<int64_t>(length));
  } else {
    op->self->Finish(op, Unavailable(UcsError(status)), 0);
  }
}

void UcxTransport::OnPutDataDone(void* request, ucs_status_t status, void* user_data) {
  Op* op = static_cast<Op*>(user_data);
  ucp_request_free(request);
  --op->ucx_pending;
  if (status != UCS_OK && op->failure.ok()) op->failure = Unavailable("put: " + UcsError(status));
  op->self->ReleaseIfDone(op);
}

void UcxTransport::OnPutFlushed(void* request, ucs_status_t status, void* user_data) {
  Op* op = static_cast<Op*>(user_data);
  if (request != nullptr) {
    ucp_request_free(request);
    --op->ucx_pending;
  }
  if (status != UCS_OK && op->failure.ok()) op->failure = Unavailable("flush: " + UcsError(status));
  if (!op->failure.ok()) {
    op->self->Finish(op, op->failure, 0);
    return;
  }
  op->self->SendNotify(op);
}

void UcxTransport::SendNotify(Op* op) {
  if (op->reported) {
    ReleaseIfDone(op);
    return;
  }
  auto peer = peers_.find(op->peer);
  if (peer == peers_.end() || !peer->second->failure.ok()) {
    Finish(op, peer == peers_.end() ? Internal("peer vanished") : peer->second->failure, 0);
    return;
  }
  op->header.kind = MessageKind::kNotify;
  op->header.notify_bytes = op->capacity;
  Seal(op->header, op->peer);
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.cb.send = &UcxTransport::OnSendDone;
  param.user_data = op;
  ucs_status_t status = Track(
      op, ucp_am_send_nbx(peer->second->ep, kAmId, &op->header, sizeof(op->header), nullptr, 0,
                          &param));
  if (status != UCS_OK) {
    Finish(op, Unavailable("notify: " + UcsError(status)), 0);
  } else if (op->ucx_pending == 0) {
    Finish(op, Status::Ok(), static_cast<int64_t>(op->capacity));
  }
}

void UcxTransport::OnEndpointError(void* arg, ucp_ep_h ep, ucs_status_t status) {
  (void)ep;
  Peer* peer = static_cast<Peer*>(arg);
  peer->self->FailPeer(*peer, status);
}

void UcxTransport::FailPeer(Peer& peer, ucs_status_t status) {
  if (!peer.failure.ok()) return;
  peer.failure = Unavailable("peer " + std::to_string(peer.rank) +
                             " failed or exited (ucx endpoint error: " + UcsError(status) + ")");
  // Sends and puts fail through their own UCX callbacks; receives are matched by this transport,
  // so it fails the ones waiting on the dead peer.
  std::vector<Op*> waiting;
  for (auto& [id, op] : ops_) {
    if (op->peer == peer.rank && !op->reported) waiting.push_back(op.get());
  }
  for (Op* op : waiting) Finish(op, peer.failure, 0);
}

void UcxTransport::Stamp(AmHeader& header) const {
  header.epoch = context_.epoch;
  header.sender = context_.rank;
}

void UcxTransport::Seal(AmHeader& header, int peer) {
  seal_->Seal(peer, std::span<uint8_t>(reinterpret_cast<uint8_t*>(&header), sizeof(header)), &header.sequence,
              &header.auth);
}

bool UcxTransport::Authentic(const AmHeader& h) {
  const SealRefusal refusal =
      seal_->Open(h.sender, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(&h), sizeof(h)),
                  offsetof(AmHeader, auth), h.sequence);
  if (refusal == SealRefusal::kNone) return true;
  if (++refused_ <= 8) {
    std::fprintf(stderr, "ferry: ucx rank %d dropped a message claiming to be from rank %d: %s\n", context_.rank,
                 h.sender,
                 refusal == SealRefusal::kReplayed
                     ? ("its sequence number " + std::to_string(h.sequence) + " was already accepted (a replay)").c_str()
                     : "wrong authenticator (not a rank of this communicator epoch)");
  }
  return false;
}

ucs_status_t UcxTransport::OnActiveMessage(void* arg, const void* header, size_t header_length,
                                           void* data, size_t length,
                                           const ucp_am_recv_param_t* param) {
  auto* self = static_cast<UcxTransport*>(arg);
  if (header_length != sizeof(AmHeader)) return UCS_OK;  // not ours: drop
  AmHeader h;
  std::memcpy(&h, header, sizeof(h));
  if (h.magic != kHeaderMagic || h.epoch != self->context_.epoch) return UCS_OK;  // stale epoch
  if (h.sender < 0 || h.sender >= self->context_.size) return UCS_OK;
  if (!self->Authentic(h)) return UCS_OK;  // an impostor: never matched, never copied

  Arrival arrival;
  arrival.kind = h.kind;
  arrival.length = h.kind == MessageKind::kNotify ? h.notify_bytes : length;
  const bool rendezvous = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
  const bool persistent = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_DATA) != 0;

  auto posted = self->posted_.find(MatchKey{h.kind, h.sender, h.tag});
  Op* op = nullptr;
  if (posted != self->posted_.end()) {
    for (Op* candidate : posted->second) {
      if (!candidate->reported) {
        op = candidate;
        break;
      }
    }
  }
  if (op != nullptr) {
    std::erase(posted->second, op);
    if (posted->second.empty()) self->posted_.erase(posted);
    if (h.kind == MessageKind::kNotify) {
      self->Finish(op, Status::Ok(), static_cast<int64_t>(arrival.length));
      return UCS_OK;
    }
    if (length > op->capacity) {
      self->Finish(op, OutOfRange("message of " + std::to_string(length) +
                                  " bytes does not fit the " + std::to_string(op->capacity) +
                                  "-byte receive buffer"), 0);
      return rendezvous ? UCS_ERR_MESSAGE_TRUNCATED : UCS_OK;
    }
    // CUDA memory is written by UCX (ucp_am_recv_data_nbx, which knows memory types), never by
    // memcpy: eager data into it must be a descriptor UCX lets us keep.
    if (rendezvous || (IntoCuda(*op) && length > 0)) {
      if (!rendezvous && !persistent) {
        self->Finish(op, Unimplemented(kEagerIntoCuda), 0);
        return UCS_OK;
      }
      arrival.ucx_data = data;
      arrival.rendezvous = rendezvous;
      op->deferred = true;
      self->deferred_.emplace_back(op, std::move(arrival));
      return UCS_INPROGRESS;
    }
    if (length > 0) std::memcpy(op->data, data, length);
    self->Finish(op, Status::Ok(), static_cast<int64_t>(length));
    return UCS_OK;
  }

  // Unexpected: keep it until the matching receive is posted.
  ucs_status_t keep = UCS_OK;
  if (h.kind == MessageKind::kData) {
    if (rendezvous || persistent) {
      arrival.ucx_data = data;
      arrival.rendezvous = rendezvous;
      keep = UCS_INPROGRESS;
    } else if (length > 0) {
      AppendBytes(arrival.copy, data, length);
    }
  }
  self->unexpected_[MatchKey{h.kind, h.sender, h.tag}].push_back(std::move(arrival));
  return keep;
}

void UcxTransport::Deliver(Op* op, Arrival arrival) {
  if (arrival.kind == MessageKind::kNotify) {
    Finish(op, Status::Ok(), static_cast<int64_t>(arrival.length));
    return;
  }
  if (arrival.length > op->capacity) {
    if (arrival.ucx_data != nullptr) ucp_am_data_release(worker_, arrival.ucx_data);
    Finish(op, OutOfRange("message of " + std::to_string(arrival.length) +
                          " bytes does not fit the " + std::to_string(op->capacity) +
                          "-byte receive buffer"), 0);
    return;
  }
  if (arrival.rendezvous || (IntoCuda(*op) && arrival.length > 0)) {
    if (arrival.ucx_data == nullptr) {
      Finish(op, Unimplemented(kEagerIntoCuda), 0);
      return;
    }
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    param.cb.recv_am = &UcxTransport::OnRecvDataDone;
    param.user_data = op;
    DescribeMemory(*op, param);
    ucs_status_t status = Track(
        op, ucp_am_recv_data_nbx(worker_, arrival.ucx_data, op->data, arrival.length, &param));
    if (status != UCS_OK) {
      Finish(op, Unavailable("receiving data: " + UcsError(status)), 0);
    } else if (op->ucx_pending == 0) {
      Finish(op, Status::Ok(), static_cast<int64_t>(arrival.length));
    }
    return;
  }
  if (arrival.ucx_data != nullptr) {
    if (arrival.length > 0) std::memcpy(op->data, arrival.ucx_data, arrival.length);
    ucp_am_data_release(worker_, arrival.ucx_data);
  } else if (arrival.length > 0) {
    std::memcpy(op->data, arrival.copy.data(), arrival.length);
  }
  Finish(op, Status::Ok(), static_cast<int64_t>(arrival.length));
}

Result<RequestId> UcxTransport::PostSend(int peer_rank, uint64_t tag, const LocalBuffer& buffer) {
  FERRY_RETURN_IF_ERROR(CheckUsable());
  FERRY_ASSIGN_OR_RETURN(Peer * peer, FindPeer(peer_rank));
  FERRY_ASSIGN_OR_RETURN(auto resolved, Resolve(buffer));
  void* const data = resolved.first;
  Op* op = NewOp(OpKind::kSend, peer_rank, tag);
  op->data = data;
  op->cuda = resolved.second->desc.kind == MemoryKind::kCuda;
  op->memh = resolved.second->memh;
  op->capacity = static_cast<size_t>(buffer.bytes);
  if (!peer->failure.ok()) {
    Finish(op, peer->failure, 0);
    return op->id;
  }
  op->header.kind = MessageKind::kData;
  Stamp(op->header);
  op->header.tag = tag;
  Seal(op->header, peer_rank);
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.cb.send = &UcxTransport::OnSendDone;
  param.user_data = op;
  DescribeMemory(*op, param);
  if (peer->accepts_cuda && op->capacity > 0) {
    param.op_attr_mask |= UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = UCP_AM_SEND_FLAG_RNDV;
  }
  ucs_status_t status = Track(op, ucp_am_send_nbx(peer->ep, kAmId, &op->header, sizeof(op->header),
                                                  data, op->capacity, &param));
  const RequestId id = op->id;
  if (status != UCS_OK) {
    Finish(op, Unavailable(UcsError(status)), 0);
  } else if (op->ucx_pending == 0) {
    Finish(op, Status::Ok(), static_cast<int64_t>(op->capacity));
  }
  return id;
}

Result<RequestId> UcxTransport::PostRecv(int peer_rank, uint64_t tag, const LocalBuffer& buffer) {
  FERRY_RETURN_IF_ERROR(CheckUsable());
  FERRY_ASSIGN_OR_RETURN(Peer * peer, FindPeer(peer_rank));
  FERRY_ASSIGN_OR_RETURN(auto resolved, Resolve(buffer));
  void* const data = resolved.first;
  Op* op = NewOp(OpKind::kRecv, peer_rank, tag);
  op->data = data;
  op->cuda = resolved.second->desc.kind == MemoryKind::kCuda;
  op->memh = resolved.second->memh;
  op->capacity = static_cast<size_t>(buffer.bytes);
  const RequestId id = op->id;
  MatchOrPost(op, *peer, MatchKey{MessageKind::kData, peer_rank, tag});
  return id;
}

Result<RequestId> UcxTransport::PostPut(int peer_rank, uint64_t tag, const LocalBuffer& local,
                                        const RemoteBuffer& remote) {
  FERRY_RETURN_IF_ERROR(CheckUsable());
  FERRY_ASSIGN_OR_RETURN(Peer * peer, FindPeer(peer_rank));
  FERRY_ASSIGN_OR_RETURN(auto resolved, Resolve(local));
  void* const data = resolved.first;
  constexpr size_t kKeyPrefix = sizeof(uint64_t) + sizeof(int64_t);
  if (remote.remote_key.size() < kKeyPrefix) {
    return InvalidArgument("PostPut: remote key of " + std::to_string(remote.remote_key.size()) +
                           " bytes is not a ucx remote key");
  }
  uint64_t remote_base = 0;
  int64_t remote_bytes = 0;
  std::memcpy(&remote_base, remote.remote_key.data(), sizeof(remote_base));
  std::memcpy(&remote_bytes, remote.remote_key.data() + 8, sizeof(remote_bytes));
  if (remote.offset < 0 || remote.offset + local.bytes > remote_bytes) {
    return OutOfRange("PostPut: [" + std::to_string(remote.offset) + ", +" +
                      std::to_string(local.bytes) + ") lies outside peer " +
                      std::to_string(peer_rank) + "'s block of " + std::to_string(remote_bytes) +
                      " bytes");
  }
  Op* op = NewOp(OpKind::kPut, peer_rank, tag);
  op->data = data;
  op->cuda = resolved.second->desc.kind == MemoryKind::kCuda;
  op->memh = resolved.second->memh;
  op->capacity = static_cast<size_t>(local.bytes);
  Stamp(op->header);
  op->header.tag = tag;  // sealed when the notify goes (SendNotify)
  const RequestId id = op->id;
  if (!peer->failure.ok()) {
    Finish(op, peer->failure, 0);
    return id;
  }
  if (local.bytes > 0) {
    auto cached = peer->rkeys.find(remote.remote_key);
    if (cached == peer->rkeys.end()) {
      ucp_rkey_h rkey = nullptr;
      ucs_status_t status =
          ucp_ep_rkey_unpack(peer->ep, remote.remote_key.data() + kKeyPrefix, &rkey);
      if (status != UCS_OK) {
        Finish(op, InvalidArgument("ucp_ep_rkey_unpack: " + UcsError(status)), 0);
        return id;
      }
      cached = peer->rkeys.emplace(remote.remote_key, rkey).first;
    }
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    param.cb.send = &UcxTransport::OnPutDataDone;
    param.user_data = op;
    DescribeMemory(*op, param);
    ucs_status_t status =
        Track(op, ucp_put_nbx(peer->ep, data, op->capacity,
                              remote_base + static_cast<uint64_t>(remote.offset), cached->second,
                              &param));
    if (status != UCS_OK) {
      Finish(op, Unavailable("put: " + UcsError(status)), 0);
      return id;
    }
  }
  // The notification may only leave once the put is remotely complete: flush the endpoint first.
  ucp_request_param_t flush{};
  flush.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  flush.cb.send = &UcxTransport::OnPutFlushed;
  flush.user_data = op;
  ucs_status_ptr_t request = ucp_ep_flush_nbx(peer->ep, &flush);
  if (UCS_PTR_IS_ERR(request)) {
    Finish(op, Unavailable("flush: " + UcsError(UCS_PTR_STATUS(request))), 0);
  } else if (request == nullptr) {
    OnPutFlushed(nullptr, UCS_OK, op);
  } else {
    ++op->ucx_pending;
  }
  return id;
}

Result<RequestId> UcxTransport::PostRecvNotify(int peer_rank, uint64_t tag) {
  FERRY_RETURN_IF_ERROR(CheckUsable());
  FERRY_ASSIGN_OR_RETURN(Peer * peer, FindPeer(peer_rank));
  Op* op = NewOp(OpKind::kRecvNotify, peer_rank, tag);
  const RequestId id = op->id;
  MatchOrPost(op, *peer, MatchKey{MessageKind::kNotify, peer_rank, tag});
  return id;
}

void UcxTransport::MatchOrPost(Op* op, const Peer& peer, const MatchKey& key) {
  auto arrived = unexpected_.find(key);
  if (arrived != unexpected_.end()) {
    Arrival arrival = std::move(arrived->second.front());
    arrived->second.pop_front();
    if (arrived->second.empty()) unexpected_.erase(arrived);
    Deliver(op, std::move(arrival));
    return;
  }
  if (!peer.failure.ok()) {
    Finish(op, peer.failure, 0);
    return;
  }
  posted_[key].push_back(op);
}

Status UcxTransport::Cancel(RequestId request) {
  auto it = ops_.find(request);
  if (it == ops_.end()) return Status::Ok();  // already completed and reported
  Op* op = it->second.get();
  if (!op->reported) Finish(op, Aborted("request cancelled"), 0);
  return Status::Ok();
}

void UcxTransport::Abort(const Status& reason) { abort_.Abort(reason); }

void UcxTransport::DrainAbort() {
  const Status reason = abort_.status();
  std::vector<Op*> pending;
  for (auto& [id, op] : ops_) {
    if (!op->reported) pending.push_back(op.get());
  }
  for (Op* op : pending) {
    op->reported = true;
    ready_.push_back(Completion{op->id, reason, 0});
  }
}

Result<int> UcxTransport::Poll(std::span<Completion> out, Deadline deadline) {
  int idle_rounds = 0;
  while (true) {
    if (abort_.aborted()) {
      if (abort_.TakeDrain()) DrainAbort();
      if (ready_.empty()) return CheckUsable();
    } else {
      while (ucp_worker_progress(worker_) != 0) {
      }
      while (!deferred_.empty()) {
        auto [op, arrival] = std::move(deferred_.front());
        deferred_.pop_front();
        op->deferred = false;
        if (op->reported) {
          if (arrival.ucx_data != nullptr) ucp_am_data_release(worker_, arrival.ucx_data);
          ReleaseIfDone(op);
          continue;
        }
        Deliver(op, std::move(arrival));
      }
    }
    if (!ready_.empty() && !out.empty()) return TakeCompletions(ready_, out);
    if (deadline.Expired()) return 0;
    IdlePollBackoff(++idle_rounds);
  }
}

}  // namespace

std::vector<OptionSpec> UcxTransportOptions() {
  return {
      {"ucx.tls", "",
       "UCX transports to use, as UCX_TLS takes them (e.g. 'tcp', 'sm,tcp', 'rc,cuda_copy'); "
       "empty leaves UCX's own choice (its UCX_TLS environment variable or all)"},
      {"ucx.error_mode", "peer",
       "'peer': a dead peer fails its requests (needs a UCX transport with peer failure "
       "detection, e.g. tcp or rc); 'none': no detection, only deadlines catch dead peers"},
      {"ucx.strict_tls", "false",
       "true: refuse to connect when ucx.tls asks for shared memory but UCX reaches a peer on this "
       "host over loopback instead; false: warn once on stderr"},
      {"ucx.cuda", "auto",
       "CUDA memory: 'auto' moves it through UCX when the loaded UCX supports it (else the executor "
       "stages it through pinned host memory); 'on' fails when it does not; 'off' never"},
      {"ucx.close_timeout", "2s",
       "how long destroying the transport waits for endpoints to flush before forcing them shut"},
  };
}

Result<std::unique_ptr<Transport>> CreateUcxTransport(const TransportContext& context) {
  auto transport = std::make_unique<UcxTransport>(context);
  FERRY_RETURN_IF_ERROR(transport->Init().WithContext("ucx transport"));
  return std::unique_ptr<Transport>(std::move(transport));
}

namespace {
const TransportRegistrar kUcxRegistrar({
    "ucx",
    "UCX (UCP active messages and RMA put) over whatever UCX_TLS / ucx.tls allows",
    UcxTransportOptions(),
    &CreateUcxTransport,
});
}  // namespace

}  // namespace ferry
