// TcpTransport: see tcp_transport.h.
#include "transports/tcp/tcp_transport.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <new>
#include <unordered_map>

#include "core/base/config.h"
#include "core/runtime/abort_state.h"
#include "core/runtime/handshake.h"
#include "core/runtime/socket_util.h"
#include "core/runtime/rank_hello.h"

namespace ferry {

namespace {

// Largest message a header may announce (1 TiB): a corrupt or hostile header fails its peer
// instead of sizing a buffer from it.
constexpr uint64_t kMaxMessageBytes = uint64_t{1} << 40;
// Largest tcp.eager_bytes, and the largest eager frame a peer may send: the most one message that
// arrives before its receive can make this rank buffer.
constexpr int64_t kMaxEagerBytes = int64_t{64} << 20;

// Connections between tcp ranks open with the rank hello (core/runtime/rank_hello.h).
constexpr RankHelloProtocol kTcpHello{{'F', 'R', 'Y', 'T'}, "ferry-tcp"};

// What a frame on a connection is. A message of at most tcp.eager_bytes goes as one eager frame,
// its payload after the header. A larger one goes by rendezvous: a ready-to-send frame (the
// header alone), then, once the receiver has matched it with a posted receive, a clear-to-send
// frame back, then a data frame with the payload, read straight into that receive. So a large
// message is never buffered by a receiver that is not ready for it.
enum class FrameKind : uint32_t { kEager = 1, kReadyToSend = 2, kClearToSend = 3, kData = 4 };

struct Header {
  uint64_t tag = 0;    // eager, ready-to-send: the message's tag
  uint64_t bytes = 0;  // eager, data: payload bytes after the header; ready-to-send: the message's
  uint64_t id = 0;     // ready-to-send, clear-to-send, data: the sender's number for the message
  uint32_t kind = 0;   // a FrameKind
  uint32_t reserved = 0;
};
static_assert(sizeof(Header) == 32);

struct Request {
  RequestId id = 0;
  int peer = 0;
  uint64_t tag = 0;
  bool is_send = false;
  char* data = nullptr;
  int64_t bytes = 0;  // send: message size; recv: capacity
};

// A frame queued on a connection: its header, then `payload` bytes of `send` (an eager or a data
// frame's; none for ready-to-send and clear-to-send).
struct Frame {
  Header header{};
  Request* send = nullptr;  // the send the frame is part of; null for clear-to-send
  int64_t payload = 0;
  int64_t progress = 0;  // bytes of header and payload written
};

// A message announced before its receive was posted: an eager frame that arrived or is arriving
// (its buffer is not zero-filled: the payload overwrites every byte before one is read), or a
// ready-to-send frame, which holds no bytes until a receive clears it.
struct Unexpected {
  std::unique_ptr<char[]> data;
  int64_t bytes = 0;
  bool complete = false;
  bool rendezvous = false;
  uint64_t id = 0;  // rendezvous: the sender's number for the message
};

// A clear-to-send this rank sent, until its data frame arrives.
struct Cleared {
  Request* recv = nullptr;  // null: the receive was cancelled or too small; the data is dropped
  int64_t bytes = 0;        // what the ready-to-send announced; the data frame must match
};

struct Peer {
  int fd = -1;
  bool connected = false;       // the socket is up (it may arrive before Connect(peer) is called)
  bool connect_called = false;  // Connect(peer) was called
  bool failed = false;
  std::string failure;
  bool want_write = false;
  std::deque<Frame> frames;                            // to write, in order
  std::unordered_map<uint64_t, Request*> announced;    // ready-to-sends written, by message id
  std::unordered_map<uint64_t, Cleared> cleared;       // clear-to-sends queued, by message id
  std::map<uint64_t, std::deque<Request*>> posted;
  std::map<uint64_t, std::deque<std::shared_ptr<Unexpected>>> unexpected;
  // Receive state machine: header, then payload into a request, an unexpected buffer, or nowhere.
  Header header{};
  int64_t header_got = 0;
  bool in_payload = false;
  int64_t payload_left = 0;
  char* payload_at = nullptr;
  Request* payload_request = nullptr;
  std::shared_ptr<Unexpected> payload_unexpected;
  std::vector<char> discard;
};

class TcpTransport final : public Transport {
 public:
  explicit TcpTransport(const TransportContext& context)
      : rank_(context.rank),
        size_(context.size),
        epoch_(context.epoch),
        secret_(context.secret),
        peers_(context.size) {}

  ~TcpTransport() override {
    acceptor_.reset();
    for (Peer& peer : peers_) {
      if (peer.fd >= 0) ::close(peer.fd);
    }
    if (listener_.fd >= 0) ::close(listener_.fd);
    if (epoll_fd_ >= 0) ::close(epoll_fd_);
    if (wake_fd_ >= 0) ::close(wake_fd_);
  }

  Status Init(const TransportContext& context) {
    if (secret_.empty()) {
      return InvalidArgument("tcp: no secret in the transport context to authenticate peers with");
    }
    const std::string address = context.Option("tcp.address", "");
    if (address == "0.0.0.0") {
      return InvalidArgument(
          "tcp.address=0.0.0.0: name the address peers connect to (it is also the one listened on)");
    }
    advertised_ = address.empty() ? LocalAddress() : address;
    FERRY_ASSIGN_OR_RETURN(eager_bytes_, ParseBytes(context.Option("tcp.eager_bytes", "64KiB")));
    if (eager_bytes_ > kMaxEagerBytes) {
      return InvalidArgument("tcp.eager_bytes=" + std::to_string(eager_bytes_) + " is over the limit of " +
                             std::to_string(kMaxEagerBytes) + " bytes (64 MiB)");
    }
    // Listen where peers are told to connect, never on every interface by default.
    FERRY_ASSIGN_OR_RETURN(listener_, ListenTcp(advertised_, 0));
    epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
    wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (epoll_fd_ < 0 || wake_fd_ < 0) return IoError("tcp: cannot create epoll/eventfd");
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = kWakeKey;
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
    HandshakeOptions options = RankHelloOptions(kTcpHello, "tcp rank " + std::to_string(rank_));
    RankHelloExpect expect{&secret_, rank_, size_, epoch_};
    acceptor_ = std::make_unique<HandshakeAcceptor>(
        listener_.fd, options,
        [this, expect](const Nonce& nonce, std::span<const uint8_t> hello) -> Result<Bytes> {
          FERRY_ASSIGN_OR_RETURN(RankHelloChecked checked,
                                 CheckRankHello(kTcpHello, expect, nonce, hello));
          if (peers_[checked.from_rank].connected) {
            return FailedPrecondition("rank " + std::to_string(checked.from_rank) +
                                      " is already connected");
          }
          return checked.ack;
        });
    return Status::Ok();
  }

  std::string_view name() const override { return "tcp"; }

  TransportCapabilities capabilities() const override {
    TransportCapabilities caps;
    caps.host_memory = true;
    caps.two_sided = true;
    caps.cancel = true;
    caps.latency_seconds = 30e-6;
    caps.bandwidth_bytes_per_second = 2e9;
    return caps;
  }

  Result<Bytes> LocalEndpointInfo() override {
    std::string info = advertised_ + ":" + std::to_string(listener_.port);
    return Bytes(info.begin(), info.end());
  }

  Status Connect(int peer, std::span<const uint8_t> peer_info, Deadline deadline) override {
    if (abort_.aborted()) return abort_.status();
    if (peer < 0 || peer >= size_) return InvalidArgument("tcp: no peer " + std::to_string(peer));
    Peer& p = peers_[peer];
    if (p.connect_called) {
      return FailedPrecondition("tcp: already connected to peer " + std::to_string(peer));
    }
    p.connect_called = true;
    std::string where = "tcp: connecting rank " + std::to_string(rank_) + " to peer " +
                        std::to_string(peer);
    if (peer == rank_) {
      p.connected = true;
      return Status::Ok();
    }
    if (rank_ < peer) {
      std::string info(peer_info.begin(), peer_info.end());
      size_t colon = info.rfind(':');
      if (colon == std::string::npos) return InvalidArgument(where + ": bad endpoint info '" + info + "'");
      int port = std::atoi(info.substr(colon + 1).c_str());
      auto fd = ConnectTcp(info.substr(0, colon), port, deadline);
      if (!fd.ok()) return fd.status().WithContext(where);
      Status proved = ProveRank(*fd, kTcpHello, secret_, rank_, peer, epoch_, deadline);
      if (!proved.ok()) {
        ::close(*fd);
        return proved.WithContext(where);
      }
      return Attach(peer, *fd);
    }
    // The lower rank connects to us: accept until its connection arrives, keeping other ranks'
    // (each authenticated by the acceptor; strangers are closed and logged there).
    while (!p.connected) {
      auto accepted = acceptor_->Next(deadline);
      if (!accepted.ok()) return accepted.status().WithContext(where);
      if (accepted->fd < 0) {
        return DeadlineExceeded(where + ": the peer did not connect before the deadline");
      }
      uint32_t from = 0;
      std::memcpy(&from, accepted->hello.data(), 4);
      FERRY_RETURN_IF_ERROR(Attach(static_cast<int>(from), accepted->fd));
    }
    return Status::Ok();
  }

  Result<MemoryHandle> RegisterMemory(const MemoryDesc& memory) override {
    if (memory.kind != MemoryKind::kHost) {
      return Unimplemented("tcp moves host memory only; stage CUDA memory through host");
    }
    if (memory.bytes < 0 || (memory.base == nullptr && memory.bytes > 0)) {
      return InvalidArgument("tcp: bad memory descriptor");
    }
    MemoryHandle handle{next_handle_++};
    registrations_[handle.id] = memory;
    return handle;
  }

  Status DeregisterMemory(MemoryHandle memory) override {
    if (registrations_.erase(memory.id) == 0) return NotFound("tcp: unknown memory handle");
    return Status::Ok();
  }

  Result<RequestId> PostSend(int peer, uint64_t tag, const LocalBuffer& buffer) override {
    FERRY_ASSIGN_OR_RETURN(char* data, Resolve(peer, buffer));
    Request* r = NewRequest(peer, tag, true, data, buffer.bytes);
    const RequestId id = r->id;  // r may complete (and be freed) before we return
    Peer& p = peers_[peer];
    if (p.failed) {
      Complete(r, Unavailable(PeerFailure(peer)));
    } else if (peer == rank_) {
      DeliverToSelf(r);
    } else {
      const bool eager = buffer.bytes <= eager_bytes_;
      const FrameKind kind = eager ? FrameKind::kEager : FrameKind::kReadyToSend;
      Queue(peer, Frame{Header{tag, static_cast<uint64_t>(buffer.bytes), r->id, static_cast<uint32_t>(kind)},
                        r, eager ? buffer.bytes : 0});
    }
    return id;
  }

  Result<RequestId> PostRecv(int peer, uint64_t tag, const LocalBuffer& buffer) override {
    FERRY_ASSIGN_OR_RETURN(char* data, Resolve(peer, buffer));
    Request* r = NewRequest(peer, tag, false, data, buffer.bytes);
    const RequestId id = r->id;  // r may complete (and be freed) before we return
    Peer& p = peers_[peer];
    auto found = p.unexpected.find(tag);
    if (found != p.unexpected.end() && !found->second.empty()) {
      std::shared_ptr<Unexpected> message = found->second.front();
      found->second.pop_front();
      if (found->second.empty()) p.unexpected.erase(found);
      if (message->rendezvous) {
        Clear(peer, r, message->id, message->bytes);
      } else if (message->complete) {
        FinishFromUnexpected(r, *message);
      } else {
        ReceiveRestInPlace(peer, r);
      }
    } else if (p.failed) {
      Complete(r, Unavailable(PeerFailure(peer)));
    } else {
      p.posted[tag].push_back(r);
    }
    return id;
  }

  Result<int> Poll(std::span<Completion> out, Deadline deadline) override {
    while (true) {
      if (abort_.TakeDrain()) HandleAbort();
      if (!ready_.empty()) return TakeCompletions(ready_, out);
      if (abort_.aborted()) return abort_.status();
      epoll_event events[64];
      int timeout = deadline.Expired() ? 0 : deadline.RemainingMillis();
      int n = ::epoll_wait(epoll_fd_, events, 64, timeout);
      if (n < 0 && errno != EINTR) return IoError(std::string("tcp: epoll_wait: ") + std::strerror(errno));
      for (int i = 0; i < n; ++i) {
        uint64_t key = events[i].data.u64;
        if (key == kWakeKey) {
          uint64_t drained;
          [[maybe_unused]] ssize_t ignored = ::read(wake_fd_, &drained, sizeof(drained));
          continue;
        }
        int peer = static_cast<int>(key);
        if (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) ReadPeer(peer);
        if (events[i].events & EPOLLOUT) WritePeer(peer);
      }
      if (ready_.empty() && deadline.Expired()) return 0;  // one pass, then honour the deadline
    }
  }

  Status Cancel(RequestId id) override {
    auto it = requests_.find(id);
    if (it == requests_.end()) return Status::Ok();  // already finished
    Request* r = it->second.get();
    Peer& p = peers_[r->peer];
    if (r->is_send) {
      // A send whose first byte is on the wire must finish: the stream would be corrupt, or the
      // receiver would wait for the data it cleared.
      for (auto f = p.frames.begin(); f != p.frames.end(); ++f) {
        if (f->send == r && f->progress == 0 && f->header.kind != static_cast<uint32_t>(FrameKind::kData)) {
          p.frames.erase(f);
          Complete(r, Aborted("tcp: send cancelled"));
          break;
        }
      }
      return Status::Ok();
    }
    auto posted = p.posted.find(r->tag);
    if (posted != p.posted.end()) {
      for (auto q = posted->second.begin(); q != posted->second.end(); ++q) {
        if (*q == r) {
          posted->second.erase(q);
          Complete(r, Aborted("tcp: receive cancelled"));
          return Status::Ok();
        }
      }
    }
    if (p.payload_request == r) {  // arriving now: keep reading, into nowhere
      DiscardPayload(p);
      p.payload_request = nullptr;
      Complete(r, Aborted("tcp: receive cancelled"));
      return Status::Ok();
    }
    for (auto& [id, cleared] : p.cleared) {  // cleared, its data not here yet: drop the data
      if (cleared.recv == r) {
        cleared.recv = nullptr;
        Complete(r, Aborted("tcp: receive cancelled"));
        return Status::Ok();
      }
    }
    return Status::Ok();
  }

  void Abort(const Status& reason) override {
    if (!abort_.Abort(reason)) return;
    for (Peer& peer : peers_) {
      if (peer.fd >= 0) ::shutdown(peer.fd, SHUT_RDWR);
    }
    uint64_t one = 1;
    [[maybe_unused]] ssize_t ignored = ::write(wake_fd_, &one, sizeof(one));
  }

 private:
  static constexpr uint64_t kWakeKey = ~0ull;

  std::string PeerFailure(int peer) const {
    return "peer " + std::to_string(peer) + " (tcp): " + peers_[peer].failure;
  }

  Result<char*> Resolve(int peer, const LocalBuffer& buffer) {
    if (abort_.aborted()) return abort_.status();
    if (peer < 0 || peer >= size_) return InvalidArgument("tcp: no peer " + std::to_string(peer));
    if (!peers_[peer].connected) {
      return FailedPrecondition("tcp: peer " + std::to_string(peer) + " is not connected");
    }
    auto it = registrations_.find(buffer.memory.id);
    if (it == registrations_.end()) return InvalidArgument("tcp: unregistered memory handle");
    if (buffer.offset < 0 || buffer.bytes < 0 || buffer.offset + buffer.bytes > it->second.bytes) {
      return OutOfRange("tcp: buffer [" + std::to_string(buffer.offset) + ", +" +
                        std::to_string(buffer.bytes) + ") outside its registration of " +
                        std::to_string(it->second.bytes) + " bytes");
    }
    return static_cast<char*>(it->second.base) + buffer.offset;
  }

  Request* NewRequest(int peer, uint64_t tag, bool is_send, char* data, int64_t bytes) {
    auto request = std::make_unique<Request>();
    request->id = next_request_++;
    request->peer = peer;
    request->tag = tag;
    request->is_send = is_send;
    request->data = data;
    request->bytes = bytes;
    Request* r = request.get();
    requests_[r->id] = std::move(request);
    return r;
  }

  void Complete(Request* r, Status status, int64_t bytes = 0) {
    ready_.push_back(Completion{r->id, std::move(status), bytes});
    requests_.erase(r->id);
  }

  void FinishFromUnexpected(Request* r, const Unexpected& message) {
    if (message.bytes > r->bytes) {
      Complete(r, OutOfRange(TooBig(r, message.bytes)));
      return;
    }
    if (message.bytes > 0) std::memcpy(r->data, message.data.get(), static_cast<size_t>(message.bytes));
    Complete(r, Status::Ok(), message.bytes);
  }

  // `r` matched the message arriving from `peer` now (p.payload_unexpected): the bytes in so far
  // are copied once, and the rest of the payload is read straight into r, as if r had been posted
  // before the message, so a large message is neither buffered whole nor copied twice.
  void ReceiveRestInPlace(int peer, Request* r) {
    Peer& p = peers_[peer];
    const int64_t size = p.payload_unexpected->bytes;
    if (size > r->bytes) {  // the rest is read into nowhere
      Complete(r, OutOfRange(TooBig(r, size)));
      DiscardPayload(p);
    } else {
      const int64_t arrived = size - p.payload_left;
      if (arrived > 0) std::memcpy(r->data, p.payload_unexpected->data.get(), static_cast<size_t>(arrived));
      p.payload_request = r;
      p.payload_at = r->data + arrived;
    }
    p.payload_unexpected.reset();
  }

  std::string TooBig(const Request* r, int64_t size) const {
    return "tcp: message of " + std::to_string(size) + " bytes from peer " +
           std::to_string(r->peer) + " (tag " + std::to_string(r->tag) +
           ") does not fit the receive buffer of " + std::to_string(r->bytes) + " bytes";
  }

  void DeliverToSelf(Request* send) {
    Peer& self = peers_[rank_];
    if (Request* recv = TakePosted(self, send->tag)) {
      if (send->bytes > recv->bytes) {
        Complete(recv, OutOfRange(TooBig(recv, send->bytes)));
      } else {
        if (send->bytes > 0) std::memcpy(recv->data, send->data, static_cast<size_t>(send->bytes));
        Complete(recv, Status::Ok(), send->bytes);
      }
    } else {
      auto message = std::make_shared<Unexpected>();
      message->data = std::make_unique_for_overwrite<char[]>(static_cast<size_t>(send->bytes));
      message->bytes = send->bytes;
      if (send->bytes > 0) std::memcpy(message->data.get(), send->data, static_cast<size_t>(send->bytes));
      message->complete = true;
      self.unexpected[send->tag].push_back(std::move(message));
    }
    Complete(send, Status::Ok(), send->bytes);
  }

  Status Attach(int peer, int fd) {
    FERRY_RETURN_IF_ERROR(SetNonBlocking(fd));
    Peer& p = peers_[peer];
    p.fd = fd;
    p.connected = true;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = static_cast<uint64_t>(peer);
    if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
      return IoError(std::string("tcp: epoll_ctl: ") + std::strerror(errno));
    }
    return Status::Ok();
  }

  void SetWantWrite(int peer, bool want) {
    Peer& p = peers_[peer];
    if (p.want_write == want || p.fd < 0) return;
    p.want_write = want;
    epoll_event ev{};
    ev.events = want ? (EPOLLIN | EPOLLOUT) : EPOLLIN;
    ev.data.u64 = static_cast<uint64_t>(peer);
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, p.fd, &ev);
  }

  // Queues `frame` behind the connection's others and writes what the socket takes now.
  void Queue(int peer, Frame frame) {
    Peer& p = peers_[peer];
    p.frames.push_back(frame);
    if (p.frames.size() == 1) WritePeer(peer);
  }

  // Queues a clear-to-send ahead of every frame not yet started, so that a receiver's go-ahead
  // does not wait behind the large payloads it is sending itself.
  void QueueClearToSend(int peer, uint64_t id) {
    Peer& p = peers_[peer];
    Frame frame{Header{0, 0, id, static_cast<uint32_t>(FrameKind::kClearToSend)}};
    const bool started = !p.frames.empty() && p.frames.front().progress > 0;
    p.frames.insert(p.frames.begin() + (started ? 1 : 0), frame);
    if (p.frames.size() == 1) WritePeer(peer);
  }

  void WritePeer(int peer) {
    Peer& p = peers_[peer];
    while (!p.frames.empty() && !p.failed) {
      Frame& f = p.frames.front();
      const int64_t header_size = sizeof(Header);
      const int64_t total = header_size + f.payload;
      iovec iov[2];
      int count = 0;
      if (f.progress < header_size) {
        iov[count++] = {reinterpret_cast<char*>(&f.header) + f.progress,
                        static_cast<size_t>(header_size - f.progress)};
        if (f.payload > 0) iov[count++] = {f.send->data, static_cast<size_t>(f.payload)};
      } else {
        iov[count++] = {f.send->data + (f.progress - header_size),
                        static_cast<size_t>(total - f.progress)};
      }
      msghdr msg{};
      msg.msg_iov = iov;
      msg.msg_iovlen = static_cast<size_t>(count);
      ssize_t n = ::sendmsg(p.fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
          SetWantWrite(peer, true);
          return;
        }
        FailPeer(peer, std::string("send failed: ") + std::strerror(errno));
        return;
      }
      f.progress += n;
      if (f.progress == total) {
        const Frame written = f;
        p.frames.pop_front();
        FrameWritten(peer, written);
      }
    }
    SetWantWrite(peer, false);
  }

  // An eager or data frame completes its send; a ready-to-send's send waits for clear-to-send.
  void FrameWritten(int peer, const Frame& frame) {
    switch (static_cast<FrameKind>(frame.header.kind)) {
      case FrameKind::kEager:
      case FrameKind::kData:
        Complete(frame.send, Status::Ok(), frame.send->bytes);
        break;
      case FrameKind::kReadyToSend:
        peers_[peer].announced[frame.header.id] = frame.send;
        break;
      case FrameKind::kClearToSend:
        break;
    }
  }

  // Clears the announced message `id` of `bytes` from `peer` for receive `r`: its data will be
  // read straight into r, or into nowhere when r is too small (r fails at once).
  void Clear(int peer, Request* r, uint64_t id, int64_t bytes) {
    Peer& p = peers_[peer];
    if (p.cleared.contains(id)) {  // r is off every list: it fails with the peer
      FailPeer(peer, "malformed stream: message id " + std::to_string(id) + " announced twice");
      Complete(r, Unavailable(PeerFailure(peer)));
      return;
    }
    Request* into = r;
    if (bytes > r->bytes) {
      Complete(r, OutOfRange(TooBig(r, bytes)));
      into = nullptr;
    }
    p.cleared[id] = Cleared{into, bytes};
    QueueClearToSend(peer, id);
  }

  // A header has fully arrived: checks it against what the stream allows, then starts its payload
  // (eager, data) or acts on it (ready-to-send, clear-to-send). A header that breaks the protocol
  // fails its peer, naming what is wrong; nothing is sized from a header before it is checked.
  void HandleHeader(int peer) {
    Peer& p = peers_[peer];
    const Header h = p.header;
    if (h.bytes > kMaxMessageBytes) {
      FailPeer(peer, "malformed message header: " + std::to_string(h.bytes) + " bytes, over the limit of " +
                         std::to_string(kMaxMessageBytes) + " (kMaxMessageBytes)");
      return;
    }
    switch (static_cast<FrameKind>(h.kind)) {
      case FrameKind::kEager:
        if (h.bytes > static_cast<uint64_t>(kMaxEagerBytes)) {
          FailPeer(peer, "malformed message header: an eager message of " + std::to_string(h.bytes) +
                             " bytes, over the limit of " + std::to_string(kMaxEagerBytes) + " (kMaxEagerBytes)");
          return;
        }
        StartPayload(peer);
        break;
      case FrameKind::kData:
        if (!StartData(peer)) return;
        break;
      case FrameKind::kReadyToSend:
        p.header_got = 0;
        Announce(peer, h);
        return;
      case FrameKind::kClearToSend:
        p.header_got = 0;
        SendData(peer, h.id);
        return;
      default:
        FailPeer(peer, "malformed message header: frame kind " + std::to_string(h.kind));
        return;
    }
    if (p.payload_left == 0) FinishPayload(peer);
  }

  // The rest of the payload arriving (p.payload_left bytes) is read into nowhere, through a
  // scratch buffer of at most 1 MiB.
  static void DiscardPayload(Peer& p) {
    p.discard.resize(static_cast<size_t>(std::min<int64_t>(p.payload_left, 1 << 20)));
  }

  // The first receive posted for `tag` from this peer, taken off the posted list; null if none.
  static Request* TakePosted(Peer& p, uint64_t tag) {
    auto posted = p.posted.find(tag);
    if (posted == p.posted.end() || posted->second.empty()) return nullptr;
    Request* r = posted->second.front();
    posted->second.pop_front();
    if (posted->second.empty()) p.posted.erase(posted);
    return r;
  }

  // A ready-to-send arrived: a posted receive clears it now; otherwise it waits, holding no bytes,
  // for the receive that will.
  void Announce(int peer, const Header& h) {
    Peer& p = peers_[peer];
    if (Request* r = TakePosted(p, h.tag)) {
      Clear(peer, r, h.id, static_cast<int64_t>(h.bytes));
      return;
    }
    auto message = std::make_shared<Unexpected>();
    message->bytes = static_cast<int64_t>(h.bytes);
    message->complete = true;
    message->rendezvous = true;
    message->id = h.id;
    p.unexpected[h.tag].push_back(std::move(message));
  }

  // A clear-to-send arrived for message `id`: its data frame goes next in line.
  void SendData(int peer, uint64_t id) {
    Peer& p = peers_[peer];
    auto found = p.announced.find(id);
    if (found == p.announced.end()) {
      FailPeer(peer, "malformed stream: clear-to-send for message id " + std::to_string(id) +
                         ", which this rank has not announced or has already sent");
      return;
    }
    Request* send = found->second;
    p.announced.erase(found);
    Queue(peer, Frame{Header{send->tag, static_cast<uint64_t>(send->bytes), id,
                             static_cast<uint32_t>(FrameKind::kData)},
                      send, send->bytes});
  }

  // A data frame's header arrived: its payload goes into the receive that cleared it, or into
  // nowhere when that receive was cancelled or too small. False when the peer failed.
  bool StartData(int peer) {
    Peer& p = peers_[peer];
    const int64_t size = static_cast<int64_t>(p.header.bytes);
    auto found = p.cleared.find(p.header.id);
    if (found == p.cleared.end()) {
      FailPeer(peer, "malformed stream: data for message id " + std::to_string(p.header.id) +
                         ", which this rank has not cleared to send");
      return false;
    }
    if (found->second.bytes != size) {
      FailPeer(peer, "malformed stream: data of " + std::to_string(size) + " bytes for message id " +
                         std::to_string(p.header.id) + ", announced as " +
                         std::to_string(found->second.bytes) + " bytes");
      return false;
    }
    Request* r = found->second.recv;
    p.cleared.erase(found);
    p.in_payload = true;
    p.payload_left = size;
    p.payload_unexpected.reset();
    p.payload_request = r;
    if (r != nullptr) {
      p.payload_at = r->data;
    } else {
      DiscardPayload(p);
    }
    return true;
  }

  // Matches an eager header that has fully arrived with a posted receive or an unexpected buffer.
  void StartPayload(int peer) {
    Peer& p = peers_[peer];
    int64_t size = static_cast<int64_t>(p.header.bytes);
    p.in_payload = true;
    p.payload_left = size;
    p.payload_request = nullptr;
    p.payload_unexpected.reset();
    if (Request* r = TakePosted(p, p.header.tag)) {
      if (size > r->bytes) {
        Complete(r, OutOfRange(TooBig(r, size)));
        DiscardPayload(p);
      } else {
        p.payload_request = r;
        p.payload_at = r->data;
      }
    } else {
      auto message = std::make_shared<Unexpected>();
      try {
        message->data = std::make_unique_for_overwrite<char[]>(static_cast<size_t>(size));
        message->bytes = size;
      } catch (const std::bad_alloc&) {
        // Buffering a message no receive is posted for: out of memory fails this peer only.
        p.in_payload = false;
        FailPeer(peer, "cannot buffer an unexpected message of " + std::to_string(size) +
                           " bytes: out of memory");
        return;
      }
      p.payload_unexpected = message;
      p.payload_at = message->data.get();
      p.unexpected[p.header.tag].push_back(std::move(message));
    }
  }

  void FinishPayload(int peer) {
    Peer& p = peers_[peer];
    p.in_payload = false;
    p.header_got = 0;
    int64_t size = static_cast<int64_t>(p.header.bytes);
    if (p.payload_request != nullptr) {
      Complete(p.payload_request, Status::Ok(), size);
      p.payload_request = nullptr;
    } else if (p.payload_unexpected) {
      p.payload_unexpected->complete = true;
      p.payload_unexpected.reset();
    }
  }

  void ReadPeer(int peer) {
    Peer& p = peers_[peer];
    while (!p.failed) {
      if (!p.in_payload) {
        ssize_t n = ::recv(p.fd, reinterpret_cast<char*>(&p.header) + p.header_got,
                           sizeof(Header) - static_cast<size_t>(p.header_got), MSG_DONTWAIT);
        if (!HandleRead(peer, n)) return;
        p.header_got += n;
        if (p.header_got == static_cast<int64_t>(sizeof(Header))) HandleHeader(peer);
        continue;
      }
      bool discarding = p.payload_request == nullptr && !p.payload_unexpected;
      char* into = discarding ? p.discard.data() : p.payload_at;
      int64_t want = discarding ? std::min<int64_t>(p.payload_left, static_cast<int64_t>(p.discard.size()))
                                : p.payload_left;
      ssize_t n = ::recv(p.fd, into, static_cast<size_t>(want), MSG_DONTWAIT);
      if (!HandleRead(peer, n)) return;
      p.payload_left -= n;
      if (!discarding) p.payload_at += n;
      if (p.payload_left == 0) FinishPayload(peer);
    }
  }

  // True when `n` bytes were read; false when there is nothing more now (or the peer failed).
  bool HandleRead(int peer, ssize_t n) {
    if (n > 0) return true;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return false;
    if (n < 0 && errno == EINTR) return false;  // level-triggered epoll calls again
    if (abort_.aborted()) return false;
    FailPeer(peer, n == 0 ? "connection closed (the peer exited or aborted)"
                          : std::string("receive failed: ") + std::strerror(errno));
    return false;
  }

  void FailPeer(int peer, const std::string& why) {
    Peer& p = peers_[peer];
    if (p.failed) return;
    p.failed = true;
    p.failure = why;
    if (p.fd >= 0) {
      ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, p.fd, nullptr);
      ::close(p.fd);
      p.fd = -1;
    }
    Status status = Unavailable(PeerFailure(peer));
    for (const Frame& f : p.frames) {
      if (f.send != nullptr) Complete(f.send, status);
    }
    p.frames.clear();
    for (const auto& [id, send] : p.announced) Complete(send, status);
    p.announced.clear();
    for (const auto& [id, cleared] : p.cleared) {
      if (cleared.recv != nullptr) Complete(cleared.recv, status);
    }
    p.cleared.clear();
    for (auto& [tag, list] : p.posted) {
      for (Request* r : list) Complete(r, status);
    }
    p.posted.clear();
    if (p.payload_request != nullptr) Complete(p.payload_request, status);
    p.payload_request = nullptr;
    if (p.payload_unexpected) {  // a message cut short: drop it
      std::erase(p.unexpected[p.header.tag], p.payload_unexpected);
      p.payload_unexpected.reset();
    }
    // Announced messages whose data can no longer come: their receives fail when posted.
    for (auto& [tag, list] : p.unexpected) {
      std::erase_if(list, [](const std::shared_ptr<Unexpected>& m) { return m->rendezvous; });
    }
  }

  // Fails every pending request with the abort status and closes every connection; once, on the
  // thread that polls.
  void HandleAbort() {
    Status status = abort_.status();
    std::vector<Request*> pending;
    for (auto& [id, request] : requests_) pending.push_back(request.get());
    for (Request* r : pending) Complete(r, status);
    for (Peer& p : peers_) {
      p.frames.clear();
      p.announced.clear();
      p.cleared.clear();
      p.posted.clear();
      p.payload_request = nullptr;
      p.unexpected.clear();
      if (p.fd >= 0) {
        ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, p.fd, nullptr);
        ::close(p.fd);
        p.fd = -1;
      }
      p.failed = true;
      p.failure = "transport aborted";
    }
  }

  const int rank_;
  const int size_;
  const uint64_t epoch_;
  const std::string secret_;
  std::string advertised_;
  int64_t eager_bytes_ = 0;  // tcp.eager_bytes
  Listener listener_;
  std::unique_ptr<HandshakeAcceptor> acceptor_;  // authenticates connections on listener_
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  std::vector<Peer> peers_;
  std::unordered_map<uint64_t, MemoryDesc> registrations_;
  uint64_t next_handle_ = 1;
  std::unordered_map<RequestId, std::unique_ptr<Request>> requests_;
  RequestId next_request_ = 1;
  std::deque<Completion> ready_;
  AbortState abort_{"tcp"};
};

}  // namespace

Result<std::unique_ptr<Transport>> CreateTcpTransport(const TransportContext& context) {
  auto transport = std::make_unique<TcpTransport>(context);
  FERRY_RETURN_IF_ERROR(transport->Init(context));
  return std::unique_ptr<Transport>(std::move(transport));
}

TransportRegistration TcpTransportRegistration() {
  return TransportRegistration{
      "tcp",
      "plain TCP sockets (host memory, two-sided); works everywhere, no dependency",
      {{"tcp.address", "",
        "address advertised to peers and listened on (empty: this host's first non-loopback "
        "IPv4; \"0.0.0.0\" is refused: peers need an address to connect to)"},
       {"tcp.eager_bytes", "64KiB",
        "largest message sent at once; a larger one waits until its receiver has posted the "
        "receive (rendezvous), so no receiver buffers it (at most 64MiB)"}},
      &CreateTcpTransport,
  };
}

namespace {
const TransportRegistrar kTcpRegistrar(TcpTransportRegistration());
}  // namespace

}  // namespace ferry
