// PlanGatherBroadcastOf: buckets, the gather to the root, and the pipelined broadcast.
#include "planner/gather_broadcast.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/layout/tensor_stack.h"
#include "planner/intersect.h"
#include "planner/plan_facts.h"

namespace ferry {
namespace {

// Region of `box` (inside fragment f's box, of `dtype` elements) in the fragment's buffer.
Region FragmentRegion(DType dtype, const Fragment& f, Space space, const Box& box) {
  Region r;
  r.space = space;
  r.buffer = f.loc.buffer;
  r.dtype = dtype;
  const int64_t esize = DTypeSize(r.dtype);
  r.ndim = box.ndim;
  int64_t offset = f.loc.byte_offset;
  for (int d = 0; d < box.ndim; ++d) {
    offset += (box.lo[d] - f.box.lo[d]) * f.loc.strides[d] * esize;
    r.shape[d] = box.Extent(d);
    r.strides[d] = f.loc.strides[d];
  }
  r.offset = offset;
  return r;
}

// A dense row-major block of `box`'s shape at `offset` of staging slot `slot`.
Region SlotRegion(int slot, int64_t offset, DType dtype, const Box& box) {
  Region r;
  r.space = Space::kStaging;
  r.buffer = slot;
  r.offset = offset;
  r.dtype = dtype;
  r.ndim = box.ndim;
  int64_t stride = 1;
  for (int d = box.ndim - 1; d >= 0; --d) {
    r.shape[d] = box.Extent(d);
    r.strides[d] = stride;
    stride *= std::max<int64_t>(1, box.Extent(d));
  }
  return r;
}

// A piece of the root's whole tensors, gathered from the source fragment `frag` on `holder_rank`.
struct GatherItem {
  int bucket, holder_rank, piece, frag;
};

// What a destination rank unpacks of one bucket from one destination fragment: a plain fragment
// whole, or the members [lo, hi) (dim-0 indices) of a tensor stack's fragment that lie in the
// bucket. Stack fragments stay stacked, so that a layout of many experts is not unstacked into
// one fragment a member and rank.
struct UnpackUnit {
  int rank, bucket, fragment;
  int64_t lo, hi;
};

class GatherBroadcast {
 public:
  // `members`: UnstackTensorSpecs(destination); the source has no tensor stacks.
  GatherBroadcast(const Layout& source, const Layout& destination, const UnstackedTensors& members,
                  const Topology& topology, const PlannerOptions& options, TransferPlan& plan)
      : source_(source),
        destination_(destination),
        members_(members),
        topology_(topology),
        options_(options),
        plan_(plan) {}

  // Plans into `plan`, the buffer tables set, ranks below `num_ranks`. The destination's dtypes
  // have been checked against the source's (CheckSameDType); the gather's intersection checks
  // that the source has every destination tensor, shape for shape.
  Status Plan(int num_ranks) {
    num_ranks_ = num_ranks;
    root_ = num_ranks;
    for (const BufferSpec& b : source_.buffers) root_ = std::min(root_, b.rank);
    for (int r = 0; r < num_ranks_ && r < static_cast<int>(topology_.ranks.size()); ++r) {
      const RankPlacement& p = topology_.ranks[r];
      if (p.node == topology_.ranks[root_].node) root_node_rank_.emplace(p.local_device, r);
    }
    // The root's view: every destination tensor whole, row-major, concatenated in tensor order.
    Layout whole;
    for (const TensorSpec& t : members_.tensors) {
      FERRY_ASSIGN_OR_RETURN(int ti, whole.AddTensor(t));
      tensor_offset_.push_back(whole.buffers.empty() ? 0 : whole.buffers[0].bytes);
      whole.AppendFragment(ti, Box::FromShape(t.shape), root_, "gather");
    }
    FERRY_ASSIGN_OR_RETURN(Intersection inter, IntersectLayouts(source_, whole));
    MakeBuckets();
    plan_.strategy = "gather-broadcast";
    plan_.num_ranks = num_ranks;
    for (int64_t bytes : bucket_bytes_) root_slot_.push_back(plan_.AddSlot(root_, bytes));
    bucket_ready_.resize(bucket_bytes_.size());
    const std::vector<GatherItem> items = GatherItems(inter);
    last_send_.assign(num_ranks_, -1);
    last_recv_.assign(num_ranks_, -1);
    FERRY_RETURN_IF_ERROR(PrepareBroadcast());
    size_t i = 0;
    for (int b = 0; b < static_cast<int>(bucket_bytes_.size()); ++b) {
      while (i < items.size() && items[i].bucket == b) {
        size_t j = i;
        while (j < items.size() && items[j].bucket == b && items[j].holder_rank == items[i].holder_rank) ++j;
        GatherFrom(inter, items.data() + i, items.data() + j);
        i = j;
      }
      BroadcastBucket(b);
    }
    return Status::Ok();
  }

 private:
  // Buckets: consecutive tensors up to bucket_bytes (a larger tensor gets its own bucket).
  void MakeBuckets() {
    const int num_tensors = static_cast<int>(members_.tensors.size());
    bucket_of_.resize(num_tensors);
    for (int t = 0; t < num_tensors; ++t) {
      const int64_t bytes = members_.tensors[t].NumBytes();
      if (bucket_bytes_.empty() || bucket_bytes_.back() + bytes > options_.bucket_bytes) {
        bucket_start_.push_back(tensor_offset_[t]);
        bucket_bytes_.push_back(0);
      }
      bucket_of_[t] = static_cast<int>(bucket_bytes_.size()) - 1;
      bucket_bytes_.back() += bytes;
    }
  }

  // Region of `box` of tensor t inside bucket slot `slot` (row-major whole tensor).
  Region BucketRegion(int t, int slot, const Box& box) const {
    const TensorSpec& spec = members_.tensors[t];
    Fragment f;
    f.tensor = t;
    f.box = Box::FromShape(spec.shape);
    f.loc.rank = root_;
    f.loc.buffer = slot;
    f.loc.byte_offset = tensor_offset_[t] - bucket_start_[bucket_of_[t]];
    f.loc.strides = RowMajorStrides(spec.shape);
    return FragmentRegion(spec.dtype, f, Space::kStaging, box);
  }

  // The gather: each piece from its least-loaded holder (the root itself when it holds it), in
  // (bucket, holder) order; the pieces of one bucket and holder travel in one message.
  std::vector<GatherItem> GatherItems(const Intersection& inter) const {
    std::vector<GatherItem> items;
    std::vector<int64_t> load(num_ranks_, 0);
    for (size_t p = 0; p < inter.pieces.size(); ++p) {
      const Piece& piece = inter.pieces[p];
      const int t = inter.groups[piece.group].dst_tensor;
      int best = -1;
      for (int h = piece.holders_begin; h < piece.holders_end; ++h) {
        const int f = inter.holders[h];
        const int r = source_.fragments.Rank(f);
        if (r == root_) {
          best = f;
          break;
        }
        if (best < 0 || load[r] < load[source_.fragments.Rank(best)]) best = f;
      }
      const int r = source_.fragments.Rank(best);
      load[r] += inter.VolumeOf(piece) * DTypeSize(members_.tensors[t].dtype);
      items.push_back({bucket_of_[t], r, static_cast<int>(p), best});
    }
    std::stable_sort(items.begin(), items.end(), [](const GatherItem& a, const GatherItem& b) {
      if (a.bucket != b.bucket) return a.bucket < b.bucket;
      return a.holder_rank < b.holder_rank;
    });
    return items;
  }

  // The ops on `rank` that must finish before it fills bucket b: those that read its buffer for
  // bucket b - broadcast_buffers (the buffer it reuses), none for the first buckets.
  std::vector<int> BufferFree(int rank, int b) const {
    auto it = slot_readers_.find({rank, b - options_.broadcast_buffers});
    return it == slot_readers_.end() ? std::vector<int>{} : it->second;
  }

  // The gather of items [first, last), of one bucket and holder: a Copy on the root, or a Pack,
  // Send, Recv and Unpack. A holder sends its pieces bucket after bucket (each send waits for its
  // previous one, and the root's receive from it likewise), so buckets fill in order.
  void GatherFrom(const Intersection& inter, const GatherItem* first, const GatherItem* last) {
    if (first->holder_rank == root_) {
      CopyIntoBucket(inter, first, last);
    } else {
      SendToRoot(inter, first, last);
    }
  }

  // One gathered item: its source region, its destination tensor and box.
  struct ItemRegion {
    Region source;
    int tensor;
    Box box;
  };

  ItemRegion RegionOf(const Intersection& inter, const GatherItem& item) const {
    const Piece& piece = inter.pieces[item.piece];
    const int t = inter.groups[piece.group].dst_tensor;
    const Box box = inter.BoxOf(piece);
    const Fragment from = source_.fragments[item.frag];
    return {FragmentRegion(source_.tensors[from.tensor].dtype, from, Space::kSource, box), t, box};
  }

  // The root's own items: one Copy into the bucket.
  void CopyIntoBucket(const Intersection& inter, const GatherItem* first, const GatherItem* last) {
    const int bucket = first->bucket;
    std::vector<CopyPair> to_bucket;
    for (const GatherItem* it = first; it != last; ++it) {
      const ItemRegion r = RegionOf(inter, *it);
      to_bucket.push_back({r.source, BucketRegion(r.tensor, root_slot_[bucket], r.box)});
    }
    Op copy;
    copy.kind = OpKind::kCopy;
    copy.rank = root_;
    copy.round = bucket;
    for (const CopyPair& c : to_bucket) copy.bytes += c.to.NumBytes();
    bucket_ready_[bucket].push_back(plan_.AddOp(std::move(copy), BufferFree(root_, bucket), to_bucket));
  }

  // Another holder's items: packed into a slot of the holder, sent to a slot of the root (through
  // a relay of the root's node where the holder is on another node), unpacked into the bucket.
  void SendToRoot(const Intersection& inter, const GatherItem* first, const GatherItem* last) {
    const int bucket = first->bucket, holder = first->holder_rank;
    int64_t bytes = 0;
    for (const GatherItem* it = first; it != last; ++it) {
      const Piece& piece = inter.pieces[it->piece];
      bytes += inter.VolumeOf(piece) *
               DTypeSize(members_.tensors[inter.groups[piece.group].dst_tensor].dtype);
    }
    const int slot = plan_.AddSlot(holder, bytes);
    const int remote_slot = plan_.AddSlot(root_, bytes);
    std::vector<CopyPair> to_bucket, packs;
    int64_t offset = 0;
    for (const GatherItem* it = first; it != last; ++it) {
      const ItemRegion r = RegionOf(inter, *it);
      const DType dt = members_.tensors[r.tensor].dtype;
      packs.push_back({r.source, SlotRegion(slot, offset, dt, r.box)});
      to_bucket.push_back({SlotRegion(remote_slot, offset, dt, r.box),
                           BucketRegion(r.tensor, root_slot_[bucket], r.box)});
      offset += r.box.Volume() * DTypeSize(dt);
    }
    Op pack;
    pack.kind = OpKind::kPack;
    pack.rank = holder;
    pack.bytes = bytes;
    pack.round = bucket;
    const int pack_id = plan_.AddOp(std::move(pack), {}, packs);
    const int recv_id = AddGatherMessage(holder, bucket, bytes, slot, remote_slot, pack_id);
    Op unpack;
    unpack.kind = OpKind::kUnpack;
    unpack.rank = root_;
    unpack.bytes = bytes;
    unpack.round = bucket;
    bucket_ready_[bucket].push_back(plan_.AddOp(std::move(unpack), {recv_id}, to_bucket));
  }

  // The Send of the holder's packed `slot` after `pack_id` and the root's Recv into
  // `remote_slot`, crossing the network on the holder's rail into the root's node and then NVLink
  // where RootNodeRelay names a relay. Returns the root's Recv.
  int AddGatherMessage(int holder, int bucket, int64_t bytes, int slot, int remote_slot,
                       int pack_id) {
    Op send;
    send.kind = OpKind::kSend;
    send.rank = holder;
    send.peer = root_;
    send.bytes = bytes;
    send.round = bucket;
    send.link = topology_.Link(holder, root_);
    send.message = next_message_++;
    send.data = {Space::kStaging, slot, 0};
    std::vector<int> send_deps = {pack_id};
    if (last_send_[holder] >= 0) send_deps.push_back(last_send_[holder]);
    Op recv = send;
    recv.kind = OpKind::kRecv;
    recv.rank = root_;
    recv.peer = holder;
    std::vector<int> recv_deps = BufferFree(root_, bucket);
    if (last_recv_[holder] >= 0) recv_deps.push_back(last_recv_[holder]);
    recv.data = {Space::kStaging, remote_slot, 0};
    const int relay = RootNodeRelay(holder);
    if (relay >= 0) {
      send.peer = relay;
      send.link = topology_.Link(holder, relay);
      Op relay_recv = send;
      relay_recv.kind = OpKind::kRecv;
      relay_recv.rank = relay;
      relay_recv.peer = holder;
      relay_recv.data = {Space::kStaging, plan_.AddSlot(relay, bytes), 0};
      Op forward = relay_recv;
      forward.kind = OpKind::kForward;
      forward.peer = root_;
      forward.link = topology_.Link(relay, root_);
      forward.message = next_message_++;
      recv.peer = relay;
      recv.link = forward.link;
      recv.message = forward.message;
      last_send_[holder] = plan_.AddOp(std::move(send), send_deps);
      const int relay_recv_id = plan_.AddOp(std::move(relay_recv));
      plan_.AddOp(std::move(forward), {relay_recv_id});
    } else {
      last_send_[holder] = plan_.AddOp(std::move(send), send_deps);
    }
    const int recv_id = plan_.AddOp(std::move(recv), recv_deps);
    last_recv_[holder] = recv_id;
    return recv_id;
  }

  // The rank of the root's node on `rank`'s rail (same local device) that relays its traffic
  // to or from the root, or -1 when `rank` is on the root's node, is the root's rail-mate, or
  // the root's node has no rank on that rail.
  int RootNodeRelay(int rank) const {
    const RankPlacement& p = topology_.ranks[rank];
    if (p.node == topology_.ranks[root_].node) return -1;
    auto it = root_node_rank_.find(p.local_device);
    return it == root_node_rank_.end() || it->second == root_ ? -1 : it->second;
  }

  // Destination ranks other than the root, per node, by local device.
  void GroupDestinationsByNode() {
    std::vector<int> order = destination_.Ranks();
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
      const RankPlacement& pa = topology_.ranks[a];
      const RankPlacement& pb = topology_.ranks[b];
      if (pa.node != pb.node) return pa.node < pb.node;
      return pa.local_device < pb.local_device;
    });
    int last_node = -1;
    for (int rank : order) {
      if (rank == root_) continue;
      if (topology_.ranks[rank].node != last_node) node_members_.emplace_back();
      last_node = topology_.ranks[rank].node;
      node_members_.back().push_back(rank);
    }
  }

  // Broadcast, pipelined as NCCL does across nodes: each bucket is cut into chunks of
  // broadcast_chunk_bytes; chunk c travels on channel k = c mod (GPUs a node): the root sends it
  // to the channel's leader on the first destination node (local GPU k, so consecutive chunks use
  // different rails), each leader forwards it to the next node's leader (same rail) and down a
  // chain through the other destination GPUs of its node, starting after itself. Every hop is a
  // Forward of one chunk, so chunks flow down the chains concurrently. This prepares the chains
  // and what each destination rank unpacks of each bucket; BroadcastBucket plans one bucket.
  Status PrepareBroadcast() {
    const std::vector<int> dst_ranks = destination_.Ranks();
    root_is_destination_ = std::binary_search(dst_ranks.begin(), dst_ranks.end(), root_);
    GroupDestinationsByNode();
    FERRY_RETURN_IF_ERROR(CutUnpackUnits());
    std::stable_sort(units_.begin(), units_.end(), [](const UnpackUnit& a, const UnpackUnit& b) {
      return std::tie(a.rank, a.bucket) < std::tie(b.rank, b.bucket);
    });
    return Status::Ok();
  }

  // units_, in fragment order: each plain fragment whole, each stack fragment's members cut
  // where the bucket changes.
  Status CutUnpackUnits() {
    const FragmentTable& fragments = destination_.fragments;
    units_.reserve(fragments.size());
    for (int f = 0; f < static_cast<int>(fragments.size()); ++f) {
      const int t = fragments.Tensor(f), rank = fragments.Rank(f);
      const int first = members_.first_of[static_cast<size_t>(t)];
      if (!members_.stacked[static_cast<size_t>(t)]) {
        units_.push_back({rank, bucket_of_[first], f, 0, 0});
        continue;
      }
      const Fragment stack = fragments[f];
      FERRY_RETURN_IF_ERROR(CheckStackFragment(stack, destination_.tensors[t])
                                .WithContext("destination layout"));
      for (int64_t j = stack.box.lo[0]; j < stack.box.hi[0]; ++j) {
        const int bucket = bucket_of_[first + static_cast<int>(j)];
        if (j > stack.box.lo[0] && units_.back().bucket == bucket) {
          units_.back().hi = j + 1;
        } else {
          units_.push_back({rank, bucket, f, j, j + 1});
        }
      }
    }
    return Status::Ok();
  }

  // Bucket b's broadcast, once its gather is planned.
  void BroadcastBucket(int b) {
    if (root_is_destination_) AddUnpack(root_, b, root_slot_[b], bucket_ready_[b]);
    slot_of_.clear();
    recvs_.clear();
    for (const std::vector<int>& members : node_members_) {
      for (int rank : members) slot_of_[rank] = plan_.AddSlot(rank, bucket_bytes_[b]);
    }
    const int64_t chunk_bytes = options_.broadcast_chunk_bytes;
    const int64_t num_chunks = (bucket_bytes_[b] + chunk_bytes - 1) / chunk_bytes;
    for (int64_t c = 0; c < num_chunks; ++c, ++chunk_counter_) {
      const int64_t offset = c * chunk_bytes;
      BroadcastChunk(b, offset, std::min(chunk_bytes, bucket_bytes_[b] - offset), chunk_counter_);
    }
    for (const std::vector<int>& members : node_members_) {
      for (int rank : members) AddUnpack(rank, b, slot_of_[rank], recvs_[rank]);
    }
  }

  // One chunk (`bytes` at `offset` of bucket b) down the chain of node leaders and each node's
  // chain; `counter` numbers it among all buckets' chunks.
  void BroadcastChunk(int b, int64_t offset, int64_t bytes, int64_t counter) {
    const int base_round = static_cast<int>(counter);
    int prev_leader = root_, prev_recv = -1, depth = 0;
    for (const std::vector<int>& members : node_members_) {
      const int n = static_cast<int>(members.size());
      const int k = static_cast<int>(counter % n);
      const int leader = members[k];
      const int relay = prev_leader == root_ ? RootNodeRelay(leader) : -1;
      if (relay >= 0) {
        // NCCL's ring leaves the root's node through the channel's GPU and NIC, not the root's.
        if (!slot_of_.count(relay)) slot_of_[relay] = plan_.AddSlot(relay, bucket_bytes_[b]);
        prev_recv = Hop(b, offset, bytes, root_, -1, relay, base_round);
        prev_leader = relay;
        ++depth;
      }
      const int leader_recv =
          Hop(b, offset, bytes, prev_leader, prev_recv, leader, base_round + depth);
      int prev = leader, prev_local_recv = leader_recv;
      for (int i = 1; i < n; ++i) {
        const int rank = members[(k + i) % n];
        prev_local_recv =
            Hop(b, offset, bytes, prev, prev_local_recv, rank, base_round + depth + i);
        prev = rank;
      }
      prev_leader = leader;
      prev_recv = leader_recv;
      ++depth;
    }
  }

  // One hop of a chunk of bucket b: `from` (the root, or a rank holding the chunk after Recv
  // `from_recv`) sends it to `to` in `round`; returns `to`'s Recv.
  int Hop(int b, int64_t offset, int64_t bytes, int from, int from_recv, int to, int round) {
    Op send;
    send.kind = from == root_ ? OpKind::kSend : OpKind::kForward;
    send.rank = from;
    send.peer = to;
    send.bytes = bytes;
    send.round = round;
    send.link = topology_.Link(from, to);
    send.message = next_message_++;
    const int from_slot = from == root_ ? root_slot_[b] : slot_of_[from];
    send.data = {Space::kStaging, from_slot, offset};
    Op recv;
    recv.kind = OpKind::kRecv;
    recv.rank = to;
    recv.peer = from;
    recv.bytes = bytes;
    recv.round = send.round;
    recv.link = send.link;
    recv.message = send.message;
    recv.data = {Space::kStaging, slot_of_[to], offset};
    const int send_id = plan_.AddOp(std::move(send), from == root_ ? bucket_ready_[b] : std::vector<int>{from_recv});
    slot_readers_[{from, b}].push_back(send_id);
    const int recv_id = plan_.AddOp(std::move(recv), BufferFree(to, b));
    recvs_[to].push_back(recv_id);
    return recv_id;
  }

  // Adds the Unpack of `rank`'s fragments of `bucket` from staging slot `slot`, after `deps`,
  // unless the rank has none.
  void AddUnpack(int rank, int bucket, int slot, const std::vector<int>& deps) {
    Op unpack;
    unpack.kind = OpKind::kUnpack;
    unpack.rank = rank;
    unpack.round = bucket;
    std::vector<CopyPair> copies;
    auto unpack_fragment = [&](const Fragment& f) {
      if (f.box.Volume() == 0) return;
      copies.push_back({BucketRegion(f.tensor, slot, f.box),
                        FragmentRegion(members_.tensors[f.tensor].dtype, f, Space::kDestination, f.box)});
      unpack.bytes += copies.back().to.NumBytes();
    };
    auto it = std::lower_bound(units_.begin(), units_.end(), std::make_pair(rank, bucket),
                               [](const UnpackUnit& u, const std::pair<int, int>& key) {
                                 return std::tie(u.rank, u.bucket) < std::tie(key.first, key.second);
                               });
    for (; it != units_.end() && it->rank == rank && it->bucket == bucket; ++it) {
      Fragment f = destination_.fragments[it->fragment];
      if (!members_.stacked[static_cast<size_t>(f.tensor)]) {
        f.tensor = members_.first_of[static_cast<size_t>(f.tensor)];
        unpack_fragment(f);
        continue;
      }
      const int64_t esize = DTypeSize(destination_.tensors[f.tensor].dtype);
      for (int64_t j = it->lo; j < it->hi; ++j) unpack_fragment(StackMemberFragment(f, members_, j, esize));
    }
    if (!copies.empty()) slot_readers_[{rank, bucket}].push_back(plan_.AddOp(std::move(unpack), deps, copies));
  }

  const Layout& source_;
  const Layout& destination_;  // stacks as given
  const UnstackedTensors& members_;
  const Topology& topology_;
  const PlannerOptions& options_;
  TransferPlan& plan_;
  int num_ranks_ = 0;
  int root_ = 0;
  int next_message_ = 0;
  std::vector<int64_t> tensor_offset_;  // byte offset of each tensor in the concatenation
  std::vector<int> bucket_of_;          // by tensor
  std::vector<int64_t> bucket_start_, bucket_bytes_;
  std::vector<int> root_slot_;                  // by bucket
  std::vector<std::vector<int>> bucket_ready_;  // by bucket: root ops its broadcast waits for
  std::vector<int> last_send_, last_recv_;      // by holder: its last gather Send, root's Recv
  std::vector<std::vector<int>> node_members_;  // destination ranks other than the root, by node
  std::vector<UnpackUnit> units_;               // by (rank, bucket)
  std::map<int, int> slot_of_;                  // rank -> its slot for the current bucket
  std::map<int, std::vector<int>> recvs_;       // rank -> its Recv ops of the current bucket
  std::map<int, int> root_node_rank_;           // local device -> rank, on the root's node
  // (rank, bucket) -> the ops that read that rank's buffer of the bucket (sends, forwards, its
  // unpack): what filling the buffer again waits for (BufferFree).
  std::map<std::pair<int, int>, std::vector<int>> slot_readers_;
  bool root_is_destination_ = false;
  int64_t chunk_counter_ = 0;  // chunks of all buckets so far: picks the channel
};

// The baseline moves bytes as they are: a destination tensor's dtype must be its source's.
Status CheckSameDType(const TensorSpec& s, const TensorSpec& d) {
  if (s.dtype == d.dtype) return Status::Ok();
  return InvalidArgument("tensor '" + d.name + "' is " + std::string(DTypeName(s.dtype)) +
                         " in the source and " + std::string(DTypeName(d.dtype)) +
                         " in the destination: the gather-broadcast baseline does not convert "
                         "(the reshard planner does)");
}

// CheckSameDType of every destination tensor the source has by name (the gather's intersection
// refuses the others).
Status CheckSameDTypes(const Layout& source, const std::vector<TensorSpec>& destination) {
  std::unordered_map<std::string_view, const TensorSpec*> by_name;
  for (const TensorSpec& t : source.tensors) by_name.emplace(t.name, &t);
  for (const TensorSpec& d : destination) {
    auto it = by_name.find(d.name);
    if (it != by_name.end()) FERRY_RETURN_IF_ERROR(CheckSameDType(*it->second, d));
  }
  return Status::Ok();
}

}  // namespace

Result<PlanResult> PlanGatherBroadcastOf(const Layout& source, const Layout& destination,
                                         const Topology& topology, const PlannerOptions& options) {
  if (options.bucket_bytes < 1) return InvalidArgument("bucket size must be positive");
  if (options.broadcast_chunk_bytes < 1) {
    return InvalidArgument("broadcast chunk size must be positive");
  }
  PlanResult result;
  result.plan.source_buffers = source.buffers;
  result.plan.destination_buffers = destination.buffers;
  const int num_ranks = NumRanksOf(result.plan.source_buffers, result.plan.destination_buffers);
  FERRY_RETURN_IF_ERROR(CheckTopology(topology, num_ranks));
  if (source.fragments.empty()) return InvalidArgument("the source layout has no fragments");
  FERRY_ASSIGN_OR_RETURN(const UnstackedTensors members,
                         UnstackTensorSpecs(destination).WithContext("destination layout"));
  FERRY_RETURN_IF_ERROR(CheckSameDTypes(source, members.tensors));
  FERRY_RETURN_IF_ERROR(GatherBroadcast(source, destination, members, topology, options, result.plan)
                            .Plan(num_ranks));
  return result;
}

}  // namespace ferry
