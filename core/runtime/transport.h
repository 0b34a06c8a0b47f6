// Transport: the backend interface that moves bytes between registered memory of two ranks, and the
// registry that creates transports by name ("local", "tcp", "ucx", "libfabric", later "nccl",
// "cuda_ipc"). The executor talks only to this interface; it never knows which class it holds, and
// a transport never sees a layout or a plan.
//
// Required and optional methods: every transport implements the two-sided path (endpoint info,
// Connect, Register/DeregisterMemory, PostSend, PostRecv, Poll, Abort), which is all that the
// executor and the communicator call. The one-sided methods (RemoteKey, PostPut, PostRecvNotify)
// and Cancel have defaults that return kUnimplemented, NIXL-style; capabilities() says which ones
// a transport offers.
//
// Life of a transport (one instance per rank, per communicator epoch):
//   1. TransportRegistry::Create(name, context)    -> a fresh instance for (rank, size, epoch)
//   2. LocalEndpointInfo()                          -> opaque bytes, published through the Store
//   3. Connect(peer, peer's info, deadline)         for every peer this rank talks to
//   4. RegisterMemory(...)                          for every buffer that is sent from/received into
//   5. PostSend / PostRecv / PostPut / PostRecvNotify, then Poll until the requests complete
//   6. Abort(reason) on failure (any thread); destruction releases everything
//
// Threading: apart from name(), capabilities() and Abort(), a transport is driven by one thread at
// a time (the communicator's progress thread); implementations need no internal locking for that.
// Abort() may be called from any thread at any time, concurrently with the others, and must make a
// Poll in progress return promptly.
//
// Blocking: no call blocks without a deadline. Post* and Register* do not wait for the peer; only
// Connect and Poll wait, and both return by their deadline.
//
// Messages: a two-sided message is (peer, tag, contiguous bytes). A receive matches the send with
// the same (sender, tag); two messages with the same (peer, tag) in flight at once are matched in
// posting order. Tags are 64-bit and opaque to transports; the communicator encodes the epoch in
// them, and each transport instance belongs to one epoch, rejecting connections from other epochs
// (TransportContext::epoch), so messages of an older epoch are never delivered.
//
// Memory: buffers are described by MemoryDesc (host or CUDA, device index). A transport whose
// capabilities lack a memory kind rejects it in RegisterMemory with kUnimplemented; the executor
// then stages through pinned host memory. A receive into a buffer smaller than the incoming
// message fails that request with kOutOfRange.
//
// Grouping (NCCL-style): posts issued between BeginGroup() and EndGroup() may be deferred and
// issued together at EndGroup(); transports that need no grouping treat both as no-ops.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/deadline.h"
#include "core/base/status.h"
#include "core/base/config.h"
#include "core/runtime/store.h"

namespace ferry {

enum class MemoryKind : uint8_t { kHost, kCuda };
std::string_view MemoryKindName(MemoryKind kind);  // "host", "cuda"

// A block of memory the caller owns. The transport never frees it.
struct MemoryDesc {
  void* base = nullptr;
  int64_t bytes = 0;
  MemoryKind kind = MemoryKind::kHost;
  int device = -1;  // CUDA device ordinal for kCuda; -1 for host
  // Host memory mapped from a shareable file (a memfd, see core/runtime/peer_memory.h): the file
  // descriptor and the offset of `base` in it, so same-node peers can map the block and read it
  // directly. -1 for ordinary memory (peers then read it through the kernel, process_vm_readv).
  int shared_fd = -1;
  int64_t shared_offset = 0;
};

struct TransportCapabilities {
  bool host_memory = true;    // can register and move host memory
  bool cuda_memory = false;   // can register and move CUDA device memory directly (GPU-direct)
  bool two_sided = true;      // PostSend / PostRecv
  bool one_sided = false;     // PostPut / PostRecvNotify / RemoteKey (else they are kUnimplemented)
  bool cancel = false;        // Cancel (else it is kUnimplemented)
  bool strided = false;       // reserved: accepts strided descriptors (none of today's do)
  bool grouped = false;       // BeginGroup/EndGroup are meaningful (NCCL)
  bool inter_node = true;     // can reach ranks on other nodes (false for local, cuda_ipc)
  int64_t max_message_bytes = INT64_MAX;  // larger messages must be chunked by the caller
  // A rough cost estimate for the planner and `ferry bench`: seconds per message and bytes/s.
  double latency_seconds = 10e-6;
  double bandwidth_bytes_per_second = 1e9;
};

// Identifies a registration made by RegisterMemory on one transport instance. 0 is never valid.
struct MemoryHandle {
  uint64_t id = 0;
  bool valid() const { return id != 0; }
};

// A byte range inside a registered block: [offset, offset + bytes) of the block's MemoryDesc.
struct LocalBuffer {
  MemoryHandle memory;
  int64_t offset = 0;
  int64_t bytes = 0;
};

// A byte range of a peer's registered block, for one-sided puts. `remote_key` is the opaque bytes
// the peer's RemoteKey() returned (exchanged through the store); `offset` is relative to the start
// of that peer's block.
struct RemoteBuffer {
  std::vector<uint8_t> remote_key;
  int64_t offset = 0;
};

// Identifies a posted request on one transport instance. 0 is never valid.
using RequestId = uint64_t;

struct Completion {
  RequestId request = 0;
  Status status;      // OK, or why it failed (names the peer: "peer 3: connection reset")
  int64_t bytes = 0;  // bytes actually transferred (a receive may get fewer than posted)
};

// Helpers for transports that queue finished requests and hand them out from Poll.
// Moves up to out.size() completions from the front of `ready` into `out`; returns how many.
int TakeCompletions(std::deque<Completion>& ready, std::span<Completion> out);
// Backs off a polling loop after `idle_rounds` consecutive rounds without progress: spin 16
// rounds, yield 48, then sleep, 20 us doubling every 16 rounds up to 500 us, so that ranks
// waiting on peers leave the cores to ranks that copy (8 ranks on 2 cores spent much of a refit in
// sched_yield storms and 20 us wake-ups). The longest added latency is one 500 us sleep, after
// ~3 ms without progress.
void IdlePollBackoff(int idle_rounds);
// Appends `size` raw bytes at `data` to `out` (building endpoint info and remote keys).
void AppendBytes(Bytes& out, const void* data, size_t size);
// The checks every Connect starts with: `peer` is a rank of the communicator of `size` ranks and
// not connected yet. Errors name the peer.
Status CheckConnectablePeer(int peer, int size, bool already_connected);

// What a transport instance is created for. Everything it needs comes in here; transports do not
// read the environment themselves.
struct TransportContext {
  int rank = 0;
  int size = 1;
  uint64_t epoch = 0;
  // Options in effect (transport options are named "<transport>.<option>"). Not owned; outlives
  // the transport.
  const Config* config = nullptr;
  // The option `name` from `config`, or `fallback` when there is no config or no such option.
  std::string Option(std::string_view name, std::string fallback) const;
  // The rendezvous store, for transports that must exchange more than LocalEndpointInfo (for
  // example a world-wide unique id). Not owned; outlives the transport. May be null in unit tests
  // of transports that do not need it.
  Store* store = nullptr;
  // Identifies the group of processes that may share memory without connecting ("local" uses it
  // to find its peers in the same process). Same value on every rank of one communicator epoch.
  std::string group_key;
  // A secret shared by every rank of this communicator, epoch and transport and by no one else
  // (derived from a random key that travels only through the token-authenticated store).
  // Transports authenticate every peer connection with it before accepting a byte of payload;
  // one of another epoch or job holds another secret. Must not be empty.
  std::string secret;
};

class Transport {
 public:
  virtual ~Transport() = default;

  // The registry name ("tcp"). Any thread.
  virtual std::string_view name() const = 0;

  // Fixed for the life of the instance. Any thread.
  virtual TransportCapabilities capabilities() const = 0;

  // What actually carries bytes to the connected peers, when the transport delegates that choice
  // to a library and can ask it ("tcp/lo to peers 1,2; posix/memory to peer 3" for ucx's lanes);
  // empty when there is nothing to add to name(). Call after Connect, from the driving thread.
  virtual std::string DescribeLinks() const { return ""; }

  // Opaque bytes a peer passes to Connect() to reach this rank (address, port, worker address...).
  // Non-blocking. Valid until the instance is destroyed.
  virtual Result<Bytes> LocalEndpointInfo() = 0;

  // Establishes the link to `peer` using the bytes the peer's LocalEndpointInfo() returned. Every
  // rank calls Connect for each peer it will talk to, in any order; the call may wait (until
  // `deadline`) for the peer's matching Connect, and must succeed whatever order the peers call
  // it in. Returns kDeadlineExceeded naming the peer if it cannot complete in time, kUnavailable if
  // the peer refuses (wrong epoch, wrong info). Connecting to oneself is allowed and gives a
  // loopback link. Connecting twice to one peer is an error.
  virtual Status Connect(int peer, std::span<const uint8_t> peer_info, Deadline deadline) = 0;

  // Registers caller-owned memory for Post*. Non-blocking (may pin pages). The memory must stay
  // valid until DeregisterMemory or destruction. Fails with kUnimplemented for a memory kind the
  // capabilities do not list.
  virtual Result<MemoryHandle> RegisterMemory(const MemoryDesc& memory) = 0;

  // Releases a registration. Requests still using it must have completed. Non-blocking.
  virtual Status DeregisterMemory(MemoryHandle memory) = 0;

  // Opaque bytes that let a peer PostPut into this registration. Non-blocking. Only for
  // one-sided transports (capabilities().one_sided); the default returns kUnimplemented.
  virtual Result<Bytes> RemoteKey(MemoryHandle memory);

  // Starts sending `buffer` to `peer` under `tag`. Non-blocking: returns a request id at once; the
  // buffer must stay untouched until the request completes in Poll. Zero-byte messages are legal
  // and are delivered. Fails immediately (no request) on bad arguments or an aborted transport.
  virtual Result<RequestId> PostSend(int peer, uint64_t tag, const LocalBuffer& buffer) = 0;

  // Starts receiving the message (peer, tag) into `buffer`. Non-blocking, like PostSend. The
  // completion's `bytes` is the message size; a message larger than the buffer fails with
  // kOutOfRange.
  virtual Result<RequestId> PostRecv(int peer, uint64_t tag, const LocalBuffer& buffer) = 0;

  // One-sided: writes `local` into the peer's memory at `remote`, then delivers a notification
  // (peer = this rank, `tag`) that completes the peer's matching PostRecvNotify. Non-blocking. The
  // local completion means the local buffer may be reused. Only for one-sided transports; the
  // default returns kUnimplemented. The executor does not use it (yet).
  virtual Result<RequestId> PostPut(int peer, uint64_t tag, const LocalBuffer& local,
                                    const RemoteBuffer& remote);

  // One-sided, target side: completes when the put (peer, tag) has landed; `bytes` is its size.
  // Non-blocking. Only for one-sided transports; the default returns kUnimplemented.
  virtual Result<RequestId> PostRecvNotify(int peer, uint64_t tag);

  // Drives progress and returns completions: writes up to out.size() of them and returns how many.
  // Waits until at least one request completes or `deadline` passes (then returns 0: not an
  // error); a past deadline makes it a non-blocking check. A request whose peer died or whose
  // connection broke completes with kUnavailable naming the peer — never a hang. Returns an error
  // (no completions) only when the whole transport failed or was aborted; requests still pending
  // after Abort are reported once, with kAborted, by the next Poll calls.
  virtual Result<int> Poll(std::span<Completion> out, Deadline deadline) = 0;

  // Cancels a pending request: it completes (in a later Poll) with kAborted unless it already
  // finished. A cancelled send or receive may leave its peer's matching request pending; callers
  // cancel only while tearing the exchange down. Non-blocking. Only where capabilities().cancel;
  // the default returns kUnimplemented (the executor tears down with Abort instead).
  virtual Status Cancel(RequestId request);

  // Grouping for transports that need it (capabilities().grouped); no-ops elsewhere.
  virtual Status BeginGroup() { return Status::Ok(); }
  virtual Status EndGroup() { return Status::Ok(); }

  // Fails the transport: every pending and future call fails with kAborted carrying `reason`,
  // a Poll in progress returns promptly, sockets/endpoints are shut down without waiting for
  // peers. Any thread; idempotent; returns promptly (never waits on the network or a hung library
  // call — such calls are left to finish on their own and their results discarded).
  virtual void Abort(const Status& reason) = 0;
};

// Creates a transport instance for one rank of one communicator epoch. Must not block on peers
// (connecting happens in Connect).
using TransportFactory =
    std::function<Result<std::unique_ptr<Transport>>(const TransportContext& context)>;

struct TransportRegistration {
  std::string name;                  // "tcp"
  std::string description;           // one line for `ferry config` / `ferry bench`
  std::vector<OptionSpec> options;   // this transport's options, named "<name>.<option>"
  TransportFactory factory;
};

// Transports by name. Thread-safe. Transport packages register themselves into the default
// registry at static-initialisation time with a TransportRegistrar (their cc_library sets
// alwayslink = True); tests may build their own registries.
class TransportRegistry {
 public:
  // The process-wide registry that transport packages add themselves to.
  static TransportRegistry& Default();

  // Fails with kAlreadyExists if the name is taken.
  Status Register(TransportRegistration registration);
  Result<std::unique_ptr<Transport>> Create(std::string_view name,
                                            const TransportContext& context) const;
  bool Contains(std::string_view name) const;
  std::vector<std::string> Names() const;  // sorted
  // Every option of every registered transport (for Config::Default and `ferry config`).
  std::vector<OptionSpec> AllOptions() const;
  std::vector<TransportRegistration> Registrations() const;  // sorted by name

 private:
  mutable std::mutex mu_;
  std::map<std::string, TransportRegistration, std::less<>> registrations_;
};

// The runtime's options at their defaults: CoreOptions(), ExecutorOptions' table and every option of
// every transport in `registry`. ferry::DefaultConfig() (core/refit/config.h) adds the planner's.
Config RuntimeConfig(const TransportRegistry& registry = TransportRegistry::Default());

// Registers a transport into TransportRegistry::Default() when constructed. Define one static
// instance per transport package:
//   const TransportRegistrar kTcpRegistrar({"tcp", "plain sockets", {...}, &CreateTcpTransport});
class TransportRegistrar {
 public:
  explicit TransportRegistrar(TransportRegistration registration);
};

}  // namespace ferry
