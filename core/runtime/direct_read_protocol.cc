// The executor's side of the direct-read exchange: see direct_read_protocol.h.
#include "core/runtime/direct_read_protocol.h"

#include <algorithm>
#include <array>
#include <set>
#include <string>

#include "core/base/checked_math.h"
#include "core/cuda/pointer.h"

namespace ferry {

const std::vector<DirectRead>& DirectReadCache::Find(const TransferPlan& plan, int rank,
                                                     bool analyse) {
  const uint64_t fingerprint = PlanFingerprint(plan);
  auto hit = std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) {
    return e.plan == &plan && e.fingerprint == fingerprint;
  });
  if (hit == entries_.end()) {
    if (entries_.size() == kSize) entries_.pop_back();
    entries_.insert(entries_.begin(),
                    {&plan, fingerprint, next_generation_++,
                     analyse ? FindDirectReads(plan, rank) : std::vector<DirectRead>{}, {}});
  } else if (hit != entries_.begin()) {
    std::rotate(entries_.begin(), hit, hit + 1);
  }
  return entries_.front().reads;
}

DirectReadRoles DirectReadRoles::Assign(const std::vector<DirectRead>& directs, int rank,
                                        const std::unordered_map<int, int>& local, int num_ops) {
  DirectReadRoles roles;
  roles.role.assign(num_ops, DirectRole::kStaged);
  roles.direct_of.assign(num_ops, -1);
  roles.control_offset.assign(directs.size(), 0);
  for (size_t k = 0; k < directs.size(); ++k) {
    const DirectRead& d = directs[k];
    auto mark = [&](int op, DirectRole r) {
      if (op < 0) return;
      auto it = local.find(op);
      if (it == local.end()) return;
      roles.role[it->second] = r;
      roles.direct_of[it->second] = static_cast<int>(k);
    };
    if (d.sender == rank) {
      mark(d.send_op, DirectRole::kOffer);
      mark(d.pack_op, DirectRole::kElided);
    }
    if (d.receiver == rank) {
      mark(d.recv_op, DirectRole::kRead);
      mark(d.unpack_op, DirectRole::kElided);
    }
    roles.control_offset[k] = roles.control_bytes;
    roles.control_bytes += (LargestOfferBytes(d) + kAnswerBytes + 63) / 64 * 64;
  }
  roles.packs.assign(directs.size(), 0);
  return roles;
}

void DirectReadRoles::Pack(const std::vector<DirectRead>& directs, int k,
                           const std::unordered_map<int, int>& local) {
  packs[static_cast<size_t>(k)] = 1;
  auto it = local.find(directs[static_cast<size_t>(k)].pack_op);
  if (it == local.end()) return;
  role[it->second] = DirectRole::kStaged;
  direct_of[it->second] = -1;
}

namespace {

bool SameSources(const std::vector<MemorySnapshot>& kept, const DirectRead& read,
                 const std::vector<MemoryDesc>& source) {
  if (kept.size() != read.source_buffers.size()) return false;
  for (size_t j = 0; j < kept.size(); ++j) {
    const int b = read.source_buffers[j];
    if (b < 0 || b >= static_cast<int>(source.size()) || !(kept[j] == MemorySnapshot::Of(source[b]))) {
      return false;
    }
  }
  return true;
}

// The GPU `memory` lies on, as offers name it (zero for host memory or an unknown device).
GpuUuid GpuOf(const MemoryDesc& memory) {
  if (memory.kind != MemoryKind::kCuda) return {};
  Result<GpuUuid> uuid = cuda::DeviceUuid(memory.device);
  return uuid.ok() ? *uuid : GpuUuid{};
}

}  // namespace

Status OfferWriter::Encode(const DirectRead& read, OfferHistory::Sent& sent) {
  std::vector<PeerBuffer> buffers(read.source_buffers.size());
  std::vector<MemorySnapshot> sources(buffers.size());
  for (size_t j = 0; j < buffers.size(); ++j) {
    const int b = read.source_buffers[j];
    if (b < 0 || b >= static_cast<int>(source_.size()) || source_[b].base == nullptr) {
      return InvalidArgument("source buffer " + std::to_string(b) + " has no memory on rank " +
                             std::to_string(rank_));
    }
    if (described_.empty()) {
      described_.resize(source_.size());
      is_described_.assign(source_.size(), 0);
    }
    if (!is_described_[b]) {
      FERRY_ASSIGN_OR_RETURN(described_[b], source_[b].kind == MemoryKind::kCuda
                                                ? cuda_exports_.Describe(source_[b], source_)
                                                : describer_.Describe(source_[b]));
      is_described_[b] = 1;
    }
    buffers[j] = described_[b];
    sources[j] = MemorySnapshot::Of(source_[b]);
  }
  sent.full.assign(static_cast<size_t>(DirectReadOfferBytes(buffers.size())), 0);
  sent.gpu = read.source_buffers.empty() ? GpuUuid{} : GpuOf(source_[read.source_buffers.front()]);
  sent.digest = EncodeDirectReadOffer(ProcessIdentity::Self(), buffers, sent.full, false, sent.gpu);
  sent.sources = std::move(sources);
  sent.taken = false;
  return Status::Ok();
}

// The packed offer: one entry, the staging slot the Pack filled. Its CUDA export is made afresh
// (not through CudaExports, whose cache is by address and size: a reallocated arena may reuse
// both).
Status OfferWriter::EncodePacked(const MemoryDesc& slot, OfferHistory::Sent& sent) {
  PeerBuffer buffer;
  if (slot.kind == MemoryKind::kCuda) {
    FERRY_ASSIGN_OR_RETURN(buffer, DescribeCudaAllocation(slot));
  } else {
    FERRY_ASSIGN_OR_RETURN(buffer, describer_.Describe(slot));
  }
  sent.full.assign(static_cast<size_t>(DirectReadOfferBytes(1)), 0);
  sent.gpu = GpuOf(slot);
  sent.digest = EncodeDirectReadOffer(ProcessIdentity::Self(), std::span<const PeerBuffer>(&buffer, 1), sent.full,
                                      true, sent.gpu);
  sent.sources = {MemorySnapshot::Of(slot)};
  sent.taken = false;
  return Status::Ok();
}

Result<int64_t> OfferWriter::Write(uint64_t generation, int index, const DirectRead& read, bool full,
                                   std::span<uint8_t> slot, const MemoryDesc* packed,
                                   uint64_t arena_serial) {
  OfferHistory::Sent& sent = history_.SentOf(generation, HistoryIndex(index, packed != nullptr));
  const DirectRead& offered = packed != nullptr ? read.packed.front() : read;
  if (packed != nullptr) {
    const bool same = !sent.full.empty() && sent.arena_serial == arena_serial &&
                      sent.sources.size() == 1 && sent.sources.front() == MemorySnapshot::Of(*packed);
    if (!same) {
      FERRY_RETURN_IF_ERROR(EncodePacked(*packed, sent));
      sent.arena_serial = arena_serial;
    }
  } else if (sent.full.empty() || !SameSources(sent.sources, read, source_)) {
    FERRY_RETURN_IF_ERROR(Encode(read, sent));
  }
  if (sent.taken && !full) {
    EncodeAbbreviatedOffer(ProcessIdentity::Self(), offered.source_buffers.size(), sent.digest, slot,
                           packed != nullptr, sent.gpu);
    return AbbreviatedOfferBytes();
  }
  std::copy(sent.full.begin(), sent.full.end(), slot.begin());
  return static_cast<int64_t>(sent.full.size());
}

void OfferWriter::Acknowledged(uint64_t generation, int index, bool packed, bool pack) {
  history_.SentOf(generation, HistoryIndex(index, packed)).taken = true;
  if (pack) history_.SentOf(generation, HistoryIndex(index, false)).pack_requested = true;
}

bool OfferWriter::PackRequested(uint64_t generation, int index) {
  return history_.SentOf(generation, HistoryIndex(index, false)).pack_requested;
}

Status CheckOfferSize(const DirectRead& read, int64_t received) {
  const int64_t expected = DirectReadOfferBytes(read.source_buffers.size());
  const int64_t packed = read.packed.empty() ? -1 : DirectReadOfferBytes(PackedOfferBuffers(read));
  if (received == expected || received == packed || received == AbbreviatedOfferBytes()) return Status::Ok();
  return InvalidArgument("direct-read offer of " + std::to_string(received) +
                         " bytes, expected " + std::to_string(expected) +
                         (packed > 0 ? " (packed: " + std::to_string(packed) + ")" : std::string()) + " (or " +
                         std::to_string(AbbreviatedOfferBytes()) +
                         " abbreviated; do both ranks set executor.direct_intra_node alike?)");
}

namespace {

// The sender's process as a CUDA mapping reaches it: the offer's pid (checked against the
// verified process already, CheckOfferSender) and the verified pidfd, where there is one.
PeerOwner OwnerOf(int sender, int64_t pid, const PeerMemory& peers) {
  PeerOwner owner{pid, -1};
  if (peers.processes != nullptr) {
    Result<int> pidfd = peers.processes->PidFd(sender);
    if (pidfd.ok()) owner.pidfd = *pidfd;
  }
  return owner;
}

// Where each offered buffer is mapped in this process (null: not shared, read it through
// process_vm_readv). Buffers of one shared file (ferry run puts a rank's buffers in one) share
// its mapping: it is looked up once per file, not per buffer. CUDA buffers are opened through
// CUDA IPC on `device`, once per peer allocation.
Result<std::vector<const char*>> MapOfferedBuffers(const DirectRead& read,
                                                   const ProcessIdentity& owner,
                                                   const std::vector<PeerBuffer>& buffers,
                                                   PeerMemory& peers, int device) {
  std::vector<const char*> mapped(buffers.size(), nullptr);
  const PeerBuffer* last = nullptr;
  PeerMappings::File file;
  for (size_t j = 0; j < buffers.size(); ++j) {
    const PeerBuffer& b = buffers[j];
    if (b.kind == MemoryKind::kCuda) {
      FERRY_ASSIGN_OR_RETURN(mapped[j], peers.cuda.Map(OwnerOf(read.sender, owner.pid, peers), b, device));
      continue;
    }
    if (b.shared_fd < 0) continue;
    if (last == nullptr || last->shared_fd != b.shared_fd || last->inode != b.inode) {
      FERRY_ASSIGN_OR_RETURN(file, peers.host.MapFile(owner, b));
      last = &b;
    }
    // Saturating: an offset and size near int64's end must not wrap into range.
    if (b.shared_offset < 0 || b.bytes < 0 || SatAdd(b.shared_offset, b.bytes) > file.length) {
      return OutOfRange("peer " + std::to_string(read.sender) + "'s buffer " +
                        std::to_string(read.source_buffers[j]) + " lies outside its shared file");
    }
    mapped[j] = file.base + b.shared_offset;
  }
  return mapped;
}

// The offer's pid must be the process the kernel verified as the sender rank's: a rank (or a
// forger on the wire) naming another process would make this rank copy that process's memory.
Status CheckOfferOwner(const DirectRead& read, const ProcessIdentity& owner,
                       const PeerProcesses* processes) {
  const std::string sender = "rank " + std::to_string(read.sender);
  if (processes == nullptr) {
    return FailedPrecondition("direct read from " + sender +
                              ": no same-node peer process was verified for this communicator");
  }
  FERRY_ASSIGN_OR_RETURN(int64_t verified, processes->Pid(read.sender));
  if (owner.pid != verified) {
    return FailedPrecondition("forged direct-read offer for message " + std::to_string(read.message) +
                              ": it names process " + std::to_string(owner.pid) + ", but " + sender +
                              " is process " + std::to_string(verified) +
                              " (verified by the kernel over the node socket); refused");
  }
  return Status::Ok();
}

// The memory kind all of a read's buffers share, or an error when host and CUDA buffers mix.
Result<MemoryKind> ReadMemoryKind(const DirectRead& read, const std::vector<PeerBuffer>& buffers,
                                  const ReadTargets& targets) {
  const MemoryKind kind = buffers.empty() ? MemoryKind::kHost : buffers.front().kind;
  bool mixed = false;
  for (const PeerBuffer& b : buffers) mixed |= b.kind != kind;
  for (const DirectRead::Read& r : read.reads) {
    const MemoryDesc* to = targets.Of(r);
    if (to != nullptr && to->base != nullptr) mixed |= to->kind != kind;
  }
  if (mixed) {
    return Unimplemented("direct read of message " + std::to_string(read.message) +
                         " mixes host and CUDA buffers; set executor.direct_intra_node=false");
  }
  return kind;
}

}  // namespace

namespace {

// The sender must be on this machine and be the process the kernel verified as its rank.
Status CheckOfferSender(const DirectRead& read, const ProcessIdentity& owner,
                        const PeerProcesses* processes) {
  if (owner.boot_id != ProcessIdentity::Self().boot_id) {
    return FailedPrecondition("peer " + std::to_string(read.sender) +
                              " runs on another machine, but the plan links it as same-node; fix "
                              "the topology or set executor.direct_intra_node=false");
  }
  return CheckOfferOwner(read, owner, processes);
}

// This rank's device, where peers' CUDA allocations are opened (-1: no CUDA destination).
int DestinationDevice(const ReadTargets& targets) {
  int device = -1;
  for (const MemoryDesc& m : targets.destination) {
    if (m.base != nullptr && m.kind == MemoryKind::kCuda) device = m.device;
  }
  for (const MemoryDesc& m : targets.slots) {
    if (m.base != nullptr && m.kind == MemoryKind::kCuda) device = m.device;
  }
  return device;
}

// Maps `buffers` (a checked full offer of `owner`) and checks every region of `read` against them
// and this rank's `targets`; fills `ends` and `on_gpu`, returns the bytes the copies write.
// `mapped_out`, when given, receives where each buffer was mapped (MapOfferedBuffers).
Result<int64_t> ResolveBuffers(const DirectRead& read, const ProcessIdentity& owner,
                               const std::vector<PeerBuffer>& buffers, const ReadTargets& targets,
                               int rank, PeerMemory& peers, std::vector<CopyEnds>& ends, bool& on_gpu,
                               std::vector<const char*>* mapped_out = nullptr) {
  FERRY_ASSIGN_OR_RETURN(MemoryKind kind, ReadMemoryKind(read, buffers, targets));
  on_gpu = kind == MemoryKind::kCuda;
  FERRY_ASSIGN_OR_RETURN(std::vector<const char*> mapped,
                         MapOfferedBuffers(read, owner, buffers, peers, DestinationDevice(targets)));
  // The files were opened through /proc/<pid>: the pid still named the verified process then.
  FERRY_RETURN_IF_ERROR(peers.processes->CheckAlive(read.sender));
  ends.clear();
  ends.reserve(read.reads.size());
  int64_t bytes = 0;
  for (size_t c = 0; c < read.reads.size(); ++c) {
    const DirectRead::Read& r = read.reads[c];
    const size_t j = static_cast<size_t>(r.source);
    if (r.from_offset < 0 || SatAdd(r.from_offset, r.from_span) > buffers[j].bytes) {
      return OutOfRange("source region of " + std::to_string(r.from_span) + " bytes at " +
                        std::to_string(r.from_offset) + " is outside peer " +
                        std::to_string(read.sender) + "'s buffer " +
                        std::to_string(read.source_buffers[j]) + " of " +
                        std::to_string(buffers[j].bytes) + " bytes");
    }
    // The destination side, checked inline (a general region lookup per pair costs more than a
    // small copy).
    const MemoryDesc* target = targets.Of(r);
    const bool elided = targets.Elided(r);
    if (target == nullptr || (target->base == nullptr && !elided) || target->kind != kind || r.to_offset < 0 ||
        SatAdd(r.to_offset, r.to_span) > target->bytes) {
      const std::string what = r.to_slot >= 0 ? "staging slot " + std::to_string(read.to_slots[r.to_slot])
                                              : "destination buffer " + std::to_string(r.to_buffer);
      return InvalidArgument(what + " on rank " + std::to_string(rank) + " has no " +
                             std::string(MemoryKindName(kind)) + " memory covering a region the plan writes");
    }
    char* to = elided ? nullptr : static_cast<char*>(target->base) + r.to_offset;
    if (mapped[j] != nullptr) {
      ends.push_back({mapped[j] + r.from_offset, to, 0});
    } else {  // ordinary memory: process_vm_readv, any geometry (peer_read.h)
      ends.push_back({reinterpret_cast<const char*>(buffers[j].address + r.from_offset), to,
                      owner.pid});
    }
    bytes += read.geometries[c].bytes();
  }
  if (mapped_out != nullptr) *mapped_out = std::move(mapped);
  return bytes;
}

// One pin per shared file or CUDA allocation among `buffers` (OfferHistory::Pin).
std::vector<OfferHistory::Pin> PinsOf(const std::vector<PeerBuffer>& buffers,
                                      const std::vector<const char*>& mapped) {
  std::set<std::pair<int, uint64_t>> files;
  std::set<std::array<uint8_t, kCudaIpcHandleBytes>> allocations;
  std::vector<OfferHistory::Pin> pins;
  for (size_t j = 0; j < buffers.size(); ++j) {
    const PeerBuffer& b = buffers[j];
    const bool first = b.kind == MemoryKind::kCuda ? allocations.insert(b.ipc_handle).second
                       : b.shared_fd >= 0          ? files.insert({b.shared_fd, b.inode}).second
                                                   : false;
    if (first) pins.push_back({j, mapped[j]});
  }
  return pins;
}

// Maps the pinned buffers of `taken` again (marking their mappings used this run); false when
// one is no longer where the copies were resolved for.
Result<bool> RenewPins(const OfferHistory::Taken& taken, int sender, PeerMemory& peers) {
  for (const OfferHistory::Pin& pin : taken.pins) {
    const PeerBuffer& b = taken.buffers[pin.buffer];
    const char* at = nullptr;
    if (b.kind == MemoryKind::kCuda) {
      FERRY_ASSIGN_OR_RETURN(at, peers.cuda.Map(OwnerOf(sender, taken.header.owner.pid, peers), b, taken.device));
    } else {
      FERRY_ASSIGN_OR_RETURN(PeerMappings::File file, peers.host.MapFile(taken.header.owner, b));
      at = file.base + b.shared_offset;
    }
    if (at != pin.at) return false;
  }
  return true;
}

// The destination buffers `read` writes (ascending, once each) as they are in `table` now: a read
// touches a few of a layout's buffers, so a refit compares those, not every buffer of every rank.
std::vector<std::pair<int, MemorySnapshot>> Snapshot(const DirectRead& read,
                                                     const std::vector<MemoryDesc>& table) {
  std::vector<int> buffers;
  buffers.reserve(read.reads.size());
  for (const DirectRead::Read& r : read.reads) {
    if (r.to_slot < 0) buffers.push_back(r.to_buffer);
  }
  std::sort(buffers.begin(), buffers.end());
  buffers.erase(std::unique(buffers.begin(), buffers.end()), buffers.end());
  std::vector<std::pair<int, MemorySnapshot>> snapshot;
  snapshot.reserve(buffers.size());
  for (int b : buffers) snapshot.emplace_back(b, MemorySnapshot::Of(table[static_cast<size_t>(b)]));
  return snapshot;
}

// The staging slots a read writes, as they are placed now (the arena may have moved them).
std::vector<MemorySnapshot> SlotSnapshot(std::span<const MemoryDesc> slots) {
  std::vector<MemorySnapshot> snapshot;
  snapshot.reserve(slots.size());
  for (const MemoryDesc& m : slots) snapshot.push_back(MemorySnapshot::Of(m));
  return snapshot;
}

bool SameMemory(const OfferHistory::Taken& taken, const ReadTargets& targets) {
  for (const auto& [b, snapshot] : taken.destination) {
    if (b < 0 || b >= static_cast<int>(targets.destination.size()) ||
        !(snapshot == MemorySnapshot::Of(targets.destination[static_cast<size_t>(b)]))) {
      return false;
    }
  }
  return taken.slots == SlotSnapshot(targets.slots);
}

// Decodes an offer for `read`: of its source buffers, or of its packed read's one slot.
Status DecodeOffer(const DirectRead& read, std::span<const uint8_t> offer, OfferHeader& header,
                   std::vector<PeerBuffer>& buffers) {
  return DecodeDirectReadOffer(offer, read.source_buffers.size(), header, buffers, PackedOfferBuffers(read));
}

}  // namespace

Result<int64_t> ResolveOffer(const DirectRead& read, std::span<const uint8_t> offer,
                             const std::vector<MemoryDesc>& destination, int rank,
                             PeerMemory& peers, std::vector<CopyEnds>& ends, bool& on_gpu,
                             std::span<const MemoryDesc> slots, std::span<const char> elided_slots) {
  OfferHeader header;
  std::vector<PeerBuffer> buffers;
  FERRY_RETURN_IF_ERROR(DecodeOffer(read, offer, header, buffers));
  if (header.abbreviated) {
    return FailedPrecondition("abbreviated direct-read offer from rank " + std::to_string(read.sender) +
                              " where a full one was expected");
  }
  FERRY_RETURN_IF_ERROR(CheckOfferSender(read, header.owner, peers.processes));
  return ResolveBuffers(header.packed ? read.packed.front() : read, header.owner, buffers,
                        ReadTargets{destination, slots, elided_slots}, rank, peers, ends, on_gpu);
}

Result<const OfferHistory::Taken*> TakeOffer(uint64_t generation, int index,
                                             const DirectRead& read,
                                             std::span<const uint8_t> offer,
                                             const std::vector<MemoryDesc>& destination, int rank,
                                             PeerMemory& peers, OfferHistory& history,
                                             std::span<const MemoryDesc> slots,
                                             std::span<const char> elided_slots) {
  const ReadTargets targets{destination, slots, elided_slots};
  OfferHeader header;
  std::vector<PeerBuffer> buffers;
  FERRY_RETURN_IF_ERROR(DecodeOffer(read, offer, header, buffers));
  FERRY_RETURN_IF_ERROR(CheckOfferSender(read, header.owner, peers.processes));
  OfferHistory::Taken& taken = history.TakenOf(generation, HistoryIndex(index, header.packed));
  const DirectRead& offered = header.packed ? read.packed.front() : read;
  if (header.abbreviated) {
    const bool held = taken.valid && taken.header.digest == header.digest &&
                      taken.header.owner.pid == header.owner.pid;
    if (!held) return nullptr;
    FERRY_ASSIGN_OR_RETURN(bool pinned, RenewPins(taken, read.sender, peers));
    if (pinned && SameMemory(taken, targets)) return &taken;
  } else {
    taken.header = header;
    taken.buffers = std::move(buffers);
  }
  taken.valid = false;
  std::vector<const char*> mapped;
  FERRY_ASSIGN_OR_RETURN(taken.bytes, ResolveBuffers(offered, taken.header.owner, taken.buffers, targets,
                                                     rank, peers, taken.ends, taken.on_gpu, &mapped));
  taken.pins = PinsOf(taken.buffers, mapped);
  taken.device = DestinationDevice(targets);
  taken.destination = Snapshot(offered, destination);
  taken.slots = SlotSnapshot(slots);
  taken.valid = true;
  return &taken;
}

bool AsksToPack(const DirectRead& read, const OfferHistory::Taken& taken) {
  if (taken.header.packed || read.packed.empty() || taken.device < 0 || taken.header.gpu == GpuUuid{}) {
    return false;
  }
  Result<GpuUuid> own = cuda::DeviceUuid(taken.device);
  return own.ok() && *own != taken.header.gpu;
}

}  // namespace ferry
