// Direct reads: finding the messages of a plan that can go as one copy, and the offer's encoding.
#include "core/runtime/direct_read.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>

namespace ferry {
namespace {

constexpr uint32_t kOfferMagic = 0x52445246;  // "FRDR"
// Version 5: header of magic, version, pid, boot id, number of buffers, flags (bit 0:
// abbreviated, bit 1: packed), the entries' digest and the sender's GPU UUID; per buffer its
// address, size, shared file, memory kind, CUDA device, buffer flags (bit 0: VMM), allocation size
// and 64-byte CUDA IPC handle or VMM export record (host buffers send the CUDA fields zeroed).
constexpr uint32_t kOfferVersion = 5;
constexpr uint32_t kAbbreviatedFlag = 1;
constexpr uint32_t kPackedFlag = 2;
constexpr int32_t kVmmBufferFlag = 1;
constexpr size_t kBootIdBytes = 40;
constexpr size_t kGpuUuidBytes = 16;
constexpr size_t kHeaderBytes = 4 + 4 + 8 + kBootIdBytes + 4 + 4 + 8 + kGpuUuidBytes;
constexpr size_t kEntryBytes = 8 + 8 + 4 + 4 + 8 + 8 + 4 + 4 + 8 + kCudaIpcHandleBytes;
static_assert(kEntryBytes % 8 == 0, "the digest reads entries as 64-bit words");

// A region of the message's bytes: [offset, offset + NumBytes) of the message holds `region`'s
// elements in row-major order.
struct Span {
  int64_t offset;
  Region region;  // the user-buffer side (source on the sender, destination on the receiver)
  Region staged;  // how the bytes sit in the message (dense); equals region for contiguous sides
};

// Equal ndim and extents (a Pack or Unpack that converts changes the dtype, not the shape).
bool SameExtents(const Region& a, const Region& b) {
  if (a.ndim != b.ndim) return false;
  for (int d = 0; d < a.ndim; ++d) {
    if (a.shape[d] != b.shape[d]) return false;
  }
  return true;
}

bool SameShape(const Region& a, const Region& b) { return a.dtype == b.dtype && SameExtents(a, b); }

// `staged`'s shape and dtype, densely at `offset` bytes into `base` (a contiguous user region).
Region Rebase(const Region& staged, const Region& base, int64_t offset) {
  Region r = staged;
  r.space = base.space;
  r.buffer = base.buffer;
  r.offset = base.offset + offset;
  return r;
}

template <typename T>
void Put(uint8_t*& p, T value) {
  std::memcpy(p, &value, sizeof(T));
  p += sizeof(T);
}

template <typename T>
T Get(const uint8_t*& p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  p += sizeof(T);
  return value;
}

void SortUnique(std::vector<int>& v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
}

// Where `value` is in the sorted `v` (which holds it).
int IndexIn(const std::vector<int>& v, int value) {
  return static_cast<int>(std::lower_bound(v.begin(), v.end(), value) - v.begin());
}

// Whether `slot` is a staging slot of `plan` on `rank`.
bool IsSlotOf(const TransferPlan& plan, int slot, int rank) {
  return slot >= 0 && static_cast<size_t>(slot) < plan.slots.size() && plan.slots[slot].rank == rank;
}

// Whether a direct read's receiver may write `to` in place of the Unpack of `recv`: a destination
// region, or a staging slot of the receiver other than the one the message would land in (a
// Quantize op's twin, which the copy fills as the Unpack would have).
bool WritableByRead(const TransferPlan& plan, const Region& to, const Op& recv) {
  if (to.space == Space::kDestination) return true;
  return to.space == Space::kStaging && to.buffer != recv.data.buffer && IsSlotOf(plan, to.buffer, recv.rank);
}

// The quantizing split of a direct read's copies (quantizing_read.h), their geometries made for
// it; none when one of them has no geometry (the staged path reports the bad copy).
QuantizingSplit SplitOf(const TransferPlan& plan, const std::vector<CopyPair>& copies,
                        const std::vector<int>& quantize_of_slot) {
  std::vector<CopyGeometry> geometries;
  geometries.reserve(copies.size());
  for (const CopyPair& c : copies) {
    Result<CopyGeometry> g = MakeCopyGeometry(c.from, c.to);
    if (!g.ok()) return {};
    geometries.push_back(*g);
  }
  return SplitQuantizingRead(plan, copies, geometries, quantize_of_slot);
}

// Whether `recv` lands in part of a staging slot of its rank that `next`, a Quantize op, reads:
// the bf16 twin of a block-scaled matrix, which a direct read fills as the Recv would have.
bool QuantizesItsSlot(const TransferPlan& plan, const Op& recv, const Op& next) {
  if (recv.data.space != Space::kStaging || next.kind != OpKind::kQuantize || next.NumCopies() != 1) {
    return false;
  }
  const int slot = recv.data.buffer;
  return IsSlotOf(plan, slot, recv.rank) && plan.GeometryOf(next.copies_begin).from_space == Space::kStaging &&
         plan.copies[static_cast<size_t>(next.copies_begin)].from_buffer == slot;
}

// The source buffers (or, for a packed read, the sender's slot) and the receiver's slots that
// `d`'s copies touch, each once, ascending.
void IndexBuffers(DirectRead& d) {
  for (const CopyPair& c : d.copies) {
    d.source_buffers.push_back(c.from.buffer);
    if (c.to.space == Space::kStaging) d.to_slots.push_back(c.to.buffer);
  }
  SortUnique(d.source_buffers);
  SortUnique(d.to_slots);
}

// The receiver's geometry and compact read of every copy of `d`; false when a copy has none (the
// staged path then reports the bad copy).
bool ResolveGeometries(DirectRead& d) {
  d.geometries.reserve(d.copies.size());
  for (const CopyPair& c : d.copies) {
    Result<CopyGeometry> g = MakeCopyGeometry(c.from, c.to);
    if (!g.ok()) return false;
    d.geometries.push_back(*g);
    const int source = IndexIn(d.source_buffers, c.from.buffer);
    const bool to_slot = c.to.space == Space::kStaging;
    d.reads.push_back({c.from.offset, c.to.offset, c.from.SpanBytes(), c.to.SpanBytes(), source,
                       to_slot ? -1 : c.to.buffer, to_slot ? IndexIn(d.to_slots, c.to.buffer) : -1});
  }
  return true;
}

// Whether `d`'s Pack writes fewer bytes than it reads (converts into a narrower dtype): its
// read then moves the wider elements, its packed read the narrower ones.
bool PackNarrows(const TransferPlan& plan, const DirectRead& d) {
  if (d.pack_op < 0) return false;
  for (const CopyPair& c : plan.Copies(plan.ops[d.pack_op])) {
    if (DTypeSize(c.to.dtype) < DTypeSize(c.from.dtype)) return true;
  }
  return false;
}

// The packed read of `d` (a message with a Pack): the message's bytes as the Pack leaves them in
// the sender's slot (the Send's data), copied to where the receiver's side puts them (`to`, the
// Unpack's pieces, or the Recv's region) without converting.
DirectRead PackedRead(const DirectRead& d, const Op& send, const Op& recv, const std::vector<Span>& from,
                      const std::vector<Span>& to) {
  DirectRead p;
  p.message = d.message;
  p.sender = d.sender;
  p.receiver = d.receiver;
  p.send_op = d.send_op;
  p.pack_op = d.pack_op;
  p.recv_op = d.recv_op;
  p.unpack_op = d.unpack_op;
  p.bytes = d.bytes;
  p.from_slot = send.data.buffer;
  if (d.unpack_op < 0) {
    for (const Span& f : from) {
      p.copies.push_back({Rebase(f.staged, send.Data(), f.offset), Rebase(f.staged, recv.Data(), f.offset)});
    }
  } else {
    for (const Span& t : to) p.copies.push_back({Rebase(t.staged, send.Data(), t.offset), t.region});
  }
  return p;
}

// What FindDirectReads looks up per send: each message's receive, and for each op how many ops
// depend on it and (when one does) which.
struct PlanIndex {
  std::vector<int> recv_of_message;
  std::vector<int> dependents, only_dependent;
};

PlanIndex IndexPlan(const TransferPlan& plan) {
  const int num_ops = static_cast<int>(plan.ops.size());
  int64_t max_message = -1;
  for (const Op& op : plan.ops) max_message = std::max<int64_t>(max_message, op.message);
  // Messages are numbered densely by the planner; a sparse numbering only costs memory.
  PlanIndex index{std::vector<int>(static_cast<size_t>(max_message + 1), -1),
                  std::vector<int>(num_ops, 0), std::vector<int>(num_ops, -1)};
  for (const Op& op : plan.ops) {
    if (op.kind == OpKind::kRecv && op.message >= 0 && index.recv_of_message[op.message] < 0) {
      index.recv_of_message[op.message] = op.id;
    }
    for (int dep : plan.Deps(op)) {
      if (dep < 0 || dep >= num_ops) continue;
      ++index.dependents[dep];
      index.only_dependent[dep] = op.id;
    }
  }
  return index;
}

// The receive that pairs with `send` as a direct read (a same-node message between two ranks,
// the receive waiting on nothing, of the same size), or -1; only messages `rank` takes part in
// unless `rank` < 0.
int DirectReceiveOf(const TransferPlan& plan, const PlanIndex& index, const Op& send, int rank) {
  if (send.kind != OpKind::kSend || send.link != LinkClass::kSameNode || send.message < 0) return -1;
  const int recv_id = index.recv_of_message[send.message];
  if (recv_id < 0) return -1;
  const Op& recv = plan.ops[recv_id];
  if (rank >= 0 && send.rank != rank && recv.rank != rank) return -1;
  if (recv.rank == send.rank || recv.link != LinkClass::kSameNode || recv.NumDeps() != 0 ||
      recv.bytes != send.bytes) {
    return -1;
  }
  return recv_id;
}

// Sender side: one contiguous source region, or the Pack (or narrowing Convert) that fills the
// sent slot from source regions and feeds nothing else (its id into d.pack_op). False otherwise.
bool SenderSpans(const TransferPlan& plan, const PlanIndex& index, const Op& send, DirectRead& d,
                 std::vector<Span>& from) {
  if (send.NumDeps() == 0 && send.data.space == Space::kSource) {
    from.push_back({0, send.Data(), send.Data()});
    return true;
  }
  if (send.NumDeps() != 1 || send.data.space != Space::kStaging || send.data.offset != 0) {
    return false;
  }
  const Op& pack = plan.ops[plan.Deps(send)[0]];
  const bool packs = pack.kind == OpKind::kPack || pack.kind == OpKind::kConvert;
  if (!packs || pack.NumDeps() != 0 || index.dependents[pack.id] != 1) return false;
  for (const CopyPair& c : plan.Copies(pack)) {
    if (c.from.space != Space::kSource || c.to.space != Space::kStaging ||
        c.to.buffer != send.data.buffer || !c.to.IsContiguous() || !SameExtents(c.from, c.to)) {
      return false;
    }
    from.push_back({c.to.offset, c.from, c.to});
  }
  d.pack_op = pack.id;
  return true;
}

// Receiver side: one contiguous region (of a destination buffer, or of the twin a Quantize reads),
// or the one Unpack (or widening Convert) of the received slot, without element functions (its id
// into d.unpack_op). False otherwise.
bool ReceiverSpans(const TransferPlan& plan, const PlanIndex& index, const Op& recv,
                   DirectRead& d, std::vector<Span>& to) {
  const int dependents = index.dependents[recv.id];
  const int next = index.only_dependent[recv.id];
  if ((recv.data.space == Space::kDestination && dependents == 0) ||
      (dependents == 1 && QuantizesItsSlot(plan, recv, plan.ops[next]))) {
    to.push_back({0, recv.Data(), recv.Data()});
    return true;
  }
  if (recv.data.space != Space::kStaging || recv.data.offset != 0 || dependents != 1) return false;
  const Op& unpack = plan.ops[next];
  const bool unpacks = unpack.kind == OpKind::kUnpack || unpack.kind == OpKind::kConvert;
  if (!unpacks || unpack.NumDeps() != 1) return false;
  for (const CopyPair& c : plan.Copies(unpack)) {
    // A pair with an element function keeps its staged Convert: the read copies values.
    if (c.from.space != Space::kStaging || c.from.buffer != recv.data.buffer ||
        !WritableByRead(plan, c.to, recv) || !c.from.IsContiguous() ||
        !SameExtents(c.from, c.to) || c.fn != ElementFn::kNone) {
      return false;
    }
    to.push_back({c.from.offset, c.to, c.from});
  }
  d.unpack_op = unpack.id;
  return true;
}

// Meets the two sides at the message's byte offsets: d.copies, each from a source region to a
// destination region. False when packed pieces and unpacked pieces do not line up one to one.
bool MeetSides(const Op& send, const Op& recv, const std::vector<Span>& from,
               const std::vector<Span>& to, DirectRead& d) {
  if (d.pack_op < 0 && d.unpack_op < 0) {
    d.copies.push_back({send.Data(), recv.Data()});
  } else if (d.pack_op < 0) {
    for (const Span& t : to) d.copies.push_back({Rebase(t.staged, send.Data(), t.offset), t.region});
  } else if (d.unpack_op < 0) {
    for (const Span& f : from) d.copies.push_back({f.region, Rebase(f.staged, recv.Data(), f.offset)});
  } else {
    std::map<int64_t, size_t> at_offset;
    for (size_t i = 0; i < from.size(); ++i) at_offset.emplace(from[i].offset, i);
    for (const Span& t : to) {
      auto f = at_offset.find(t.offset);
      if (f == at_offset.end() || !SameShape(from[f->second].staged, t.staged)) return false;
      d.copies.push_back({from[f->second].region, t.region});
    }
  }
  return true;
}

// Completes `d` for `rank`: its buffer indexes, the packed variant where the Pack narrows, and
// on the receiver the copies' geometries and the quantizing split (`quantize_of_slot` is made at
// the first read into a slot). Elsewhere the copies are dropped unless every receiver's are
// wanted. False when the receiver cannot resolve a geometry.
bool CompleteRead(const TransferPlan& plan, int rank, const Op& send, const Op& recv,
                  const std::vector<Span>& from, const std::vector<Span>& to,
                  std::vector<int>& quantize_of_slot, DirectRead& d) {
  IndexBuffers(d);
  DirectRead packed;
  if (PackNarrows(plan, d) && d.to_slots.empty()) {
    packed = PackedRead(d, send, recv, from, to);
    IndexBuffers(packed);
  }
  if (d.receiver == rank) {
    if (!ResolveGeometries(d) || (!packed.copies.empty() && !ResolveGeometries(packed))) {
      return false;
    }
    if (!d.to_slots.empty()) {
      if (quantize_of_slot.empty()) quantize_of_slot = QuantizeOfSlot(plan, rank);
      d.quantizing = SplitQuantizingRead(plan, d.copies, d.geometries, quantize_of_slot);
    }
  } else {
    if (rank < 0 && !d.to_slots.empty()) {  // every rank's: the split, for a model of its cost
      if (quantize_of_slot.empty()) quantize_of_slot = QuantizeOfSlot(plan, rank);
      d.quantizing = SplitOf(plan, d.copies, quantize_of_slot);
    }
    if (rank != kEveryReceiver) {
      d.copies.clear();
      packed.copies.clear();
    }
  }
  if (packed.from_slot >= 0) d.packed.push_back(std::move(packed));
  return true;
}

}  // namespace

std::vector<DirectRead> FindDirectReads(const TransferPlan& plan, int rank) {
  const PlanIndex index = IndexPlan(plan);
  std::vector<DirectRead> found;
  std::vector<int> quantize_of_slot;  // the receiver's, made at its first read into a slot
  for (const Op& send : plan.ops) {
    const int recv_id = DirectReceiveOf(plan, index, send, rank);
    if (recv_id < 0) continue;
    const Op& recv = plan.ops[recv_id];
    DirectRead d;
    d.message = send.message;
    d.sender = send.rank;
    d.receiver = recv.rank;
    d.send_op = send.id;
    d.recv_op = recv.id;
    d.bytes = send.bytes;
    std::vector<Span> from, to;
    if (!SenderSpans(plan, index, send, d, from) || !ReceiverSpans(plan, index, recv, d, to) ||
        !MeetSides(send, recv, from, to, d) ||
        !CompleteRead(plan, rank, send, recv, from, to, quantize_of_slot, d)) {
      continue;
    }
    found.push_back(std::move(d));
  }
  std::sort(found.begin(), found.end(),
            [](const DirectRead& a, const DirectRead& b) { return a.message < b.message; });
  return found;
}

uint64_t PlanFingerprint(const TransferPlan& plan) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over 64-bit words
  auto mix = [&h](uint64_t v) {
    h ^= v;
    h *= 1099511628211ull;
  };
  mix(static_cast<uint64_t>(plan.num_ranks));
  mix(plan.ops.size());
  mix(plan.slots.size());
  mix(plan.source_buffers.size());
  mix(plan.destination_buffers.size());
  for (const Op& op : plan.ops) {
    mix((static_cast<uint64_t>(op.kind) << 56) ^ (static_cast<uint64_t>(op.rank) << 28) ^
        static_cast<uint64_t>(op.peer + 1));
    mix(static_cast<uint64_t>(op.message));
    mix(static_cast<uint64_t>(op.bytes));
    mix((static_cast<uint64_t>(op.NumDeps()) << 32) ^ static_cast<uint64_t>(op.NumCopies()));
    mix(static_cast<uint64_t>(op.data.offset) ^ (static_cast<uint64_t>(op.data.buffer) << 40));
    if (op.NumCopies() > 0) {
      mix(static_cast<uint64_t>(plan.copies[op.copies_begin].from_offset));
      mix(static_cast<uint64_t>(plan.copies[op.copies_end - 1].to_offset));
    }
  }
  return h;
}

int64_t DirectReadOfferBytes(size_t num_buffers) {
  return static_cast<int64_t>(kHeaderBytes + num_buffers * kEntryBytes);
}

int64_t AbbreviatedOfferBytes() { return static_cast<int64_t>(kHeaderBytes); }

namespace {

// FNV-1a over 64-bit words (entries are whole words: kEntryBytes % 8 == 0).
uint64_t EntriesDigest(std::span<const uint8_t> entries) {
  uint64_t h = 1469598103934665603ull;
  for (size_t at = 0; at + 8 <= entries.size(); at += 8) {
    uint64_t word;
    std::memcpy(&word, entries.data() + at, 8);
    h ^= word;
    h *= 1099511628211ull;
  }
  return h;
}

void PutHeader(uint8_t*& p, const ProcessIdentity& owner, size_t num_buffers, uint32_t flags,
               uint64_t digest, const GpuUuid& gpu) {
  Put<uint32_t>(p, kOfferMagic);
  Put<uint32_t>(p, kOfferVersion);
  Put<int64_t>(p, owner.pid);
  std::memset(p, 0, kBootIdBytes);
  std::memcpy(p, owner.boot_id.data(), std::min(owner.boot_id.size(), kBootIdBytes));
  p += kBootIdBytes;
  Put<uint32_t>(p, static_cast<uint32_t>(num_buffers));
  Put<uint32_t>(p, flags);
  Put<uint64_t>(p, digest);
  std::memcpy(p, gpu.data(), kGpuUuidBytes);
  p += kGpuUuidBytes;
}

}  // namespace

size_t PackedOfferBuffers(const DirectRead& read) {
  return read.packed.empty() ? 0 : read.packed.front().source_buffers.size();
}

int64_t LargestOfferBytes(const DirectRead& read) {
  return DirectReadOfferBytes(std::max(read.source_buffers.size(), PackedOfferBuffers(read)));
}

uint64_t EncodeDirectReadOffer(const ProcessIdentity& owner, std::span<const PeerBuffer> buffers,
                               std::span<uint8_t> out, bool packed, const GpuUuid& gpu) {
  uint8_t* p = out.data() + kHeaderBytes;
  for (const PeerBuffer& b : buffers) {
    Put<uint64_t>(p, b.address);
    Put<int64_t>(p, b.bytes);
    Put<int32_t>(p, b.shared_fd);
    Put<int32_t>(p, static_cast<int32_t>(b.kind));
    Put<int64_t>(p, b.shared_offset);
    Put<uint64_t>(p, b.inode);
    Put<int32_t>(p, b.device);
    Put<int32_t>(p, b.cuda_vmm ? kVmmBufferFlag : 0);
    Put<int64_t>(p, b.allocation_bytes);
    std::memcpy(p, b.ipc_handle.data(), kCudaIpcHandleBytes);
    p += kCudaIpcHandleBytes;
  }
  const uint64_t digest = EntriesDigest(out.subspan(kHeaderBytes, buffers.size() * kEntryBytes));
  uint8_t* h = out.data();
  PutHeader(h, owner, buffers.size(), packed ? kPackedFlag : 0, digest, gpu);
  return digest;
}

void EncodeAbbreviatedOffer(const ProcessIdentity& owner, size_t num_buffers, uint64_t digest,
                            std::span<uint8_t> out, bool packed, const GpuUuid& gpu) {
  uint8_t* p = out.data();
  PutHeader(p, owner, num_buffers, kAbbreviatedFlag | (packed ? kPackedFlag : 0), digest, gpu);
}

namespace {

// The offer's header from `p` (advanced past it) into `header`, checked against the buffers the
// plan expects (`num_buffers`, or `packed_buffers` for a packed offer) and the offer's size.
Status DecodeOfferHeader(std::span<const uint8_t> bytes, size_t num_buffers,
                         size_t packed_buffers, OfferHeader& header, const uint8_t*& p) {
  if (Get<uint32_t>(p) != kOfferMagic || Get<uint32_t>(p) != kOfferVersion) {
    return InvalidArgument("not a direct-read offer (bad magic or version)");
  }
  header.owner.pid = Get<int64_t>(p);
  const char* boot = reinterpret_cast<const char*>(p);
  header.owner.boot_id.assign(boot, strnlen(boot, kBootIdBytes));
  p += kBootIdBytes;
  const uint32_t named = Get<uint32_t>(p);
  const uint32_t flags = Get<uint32_t>(p);
  header.digest = Get<uint64_t>(p);
  std::memcpy(header.gpu.data(), p, kGpuUuidBytes);
  p += kGpuUuidBytes;
  header.abbreviated = (flags & kAbbreviatedFlag) != 0;
  header.packed = (flags & kPackedFlag) != 0;
  if (header.packed && packed_buffers == 0) {
    return InvalidArgument("packed direct-read offer for a message that has no packed read");
  }
  num_buffers = header.packed ? packed_buffers : num_buffers;
  if (named != num_buffers) {
    return InvalidArgument("direct-read offer names " + std::to_string(named) + " buffers, expected " +
                           std::to_string(num_buffers));
  }
  const size_t full_bytes = static_cast<size_t>(DirectReadOfferBytes(num_buffers));
  if ((flags & ~(kAbbreviatedFlag | kPackedFlag)) != 0 ||
      bytes.size() != (header.abbreviated ? kHeaderBytes : full_bytes)) {
    return InvalidArgument("direct-read offer with flags " + std::to_string(flags) + " in " +
                           std::to_string(bytes.size()) + " bytes");
  }
  if (header.owner.pid <= 0 || header.owner.pid > std::numeric_limits<pid_t>::max()) {
    return InvalidArgument("direct-read offer from pid " + std::to_string(header.owner.pid));
  }
  return Status::Ok();
}

// One buffer entry from `p` (advanced past it) into `b`. Bounds are checked against the plan and
// the mapped file or allocation later; here what no honest sender writes: an unknown memory kind
// or buffer flag, negative sizes or offsets, fds out of range, a CUDA buffer outside its
// allocation (compared without overflow).
Status DecodeOfferEntry(const uint8_t*& p, PeerBuffer& b) {
  b.address = Get<uint64_t>(p);
  b.bytes = Get<int64_t>(p);
  b.shared_fd = Get<int32_t>(p);
  const int32_t kind = Get<int32_t>(p);
  b.shared_offset = Get<int64_t>(p);
  b.inode = Get<uint64_t>(p);
  b.device = Get<int32_t>(p);
  const int32_t buffer_flags = Get<int32_t>(p);
  b.allocation_bytes = Get<int64_t>(p);
  std::memcpy(b.ipc_handle.data(), p, kCudaIpcHandleBytes);
  p += kCudaIpcHandleBytes;
  if (kind != static_cast<int32_t>(MemoryKind::kHost) && kind != static_cast<int32_t>(MemoryKind::kCuda)) {
    return InvalidArgument("direct-read offer names an unknown memory kind " + std::to_string(kind));
  }
  b.kind = static_cast<MemoryKind>(kind);
  if ((buffer_flags & ~kVmmBufferFlag) != 0 || (buffer_flags != 0 && b.kind != MemoryKind::kCuda)) {
    return InvalidArgument("direct-read offer: buffer flags " + std::to_string(buffer_flags) +
                           " on a " + (b.kind == MemoryKind::kCuda ? "CUDA" : "host") + " buffer");
  }
  b.cuda_vmm = buffer_flags == kVmmBufferFlag;
  if (b.bytes < 0 || b.shared_offset < 0 || b.shared_fd < -1) {
    return InvalidArgument("direct-read offer with a negative size, offset or fd");
  }
  if (b.kind == MemoryKind::kCuda &&
      (b.device < 0 || b.allocation_bytes < 0 || b.shared_offset > b.allocation_bytes ||
       b.bytes > b.allocation_bytes - b.shared_offset)) {
    return InvalidArgument("direct-read offer: a CUDA buffer of " + std::to_string(b.bytes) + " bytes at " +
                           std::to_string(b.shared_offset) + " lies outside its allocation of " +
                           std::to_string(b.allocation_bytes) + " bytes");
  }
  return Status::Ok();
}

}  // namespace

Status DecodeDirectReadOffer(std::span<const uint8_t> bytes, size_t num_buffers,
                             OfferHeader& header, std::vector<PeerBuffer>& buffers,
                             size_t packed_buffers) {
  if (bytes.size() < kHeaderBytes) {
    return InvalidArgument("direct-read offer of " + std::to_string(bytes.size()) +
                           " bytes, shorter than its header (" + std::to_string(kHeaderBytes) + ")");
  }
  const uint8_t* p = bytes.data();
  FERRY_RETURN_IF_ERROR(DecodeOfferHeader(bytes, num_buffers, packed_buffers, header, p));
  buffers.clear();
  if (header.abbreviated) return Status::Ok();
  if (EntriesDigest(bytes.subspan(kHeaderBytes)) != header.digest) {
    return InvalidArgument("direct-read offer whose digest does not match its entries");
  }
  buffers.resize(header.packed ? packed_buffers : num_buffers);
  for (PeerBuffer& b : buffers) FERRY_RETURN_IF_ERROR(DecodeOfferEntry(p, b));
  return Status::Ok();
}

}  // namespace ferry
