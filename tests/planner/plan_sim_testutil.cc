// Host interpreter, oracle and random layout generator for planner tests.
#include "tests/planner/plan_sim_testutil.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <numeric>
#include <optional>

#include "core/layout/tensor_stack.h"

namespace ferry::testing {
namespace {

struct Memory {
  std::vector<std::vector<uint8_t>> source, destination, slots;
  std::vector<std::vector<uint8_t>> dst_writes;
  std::vector<uint8_t>& Buffer(const Region& r) {
    switch (r.space) {
      case Space::kSource: return source[r.buffer];
      case Space::kDestination: return destination[r.buffer];
      case Space::kStaging: return slots[r.buffer];
    }
    return slots[r.buffer];
  }
};

// Byte offsets of every element of `r`, in row-major element order.
void ElementOffsets(const Region& r, std::vector<int64_t>& out) {
  out.clear();
  const int64_t esize = DTypeSize(r.dtype);
  if (r.NumElements() == 0) return;
  std::array<int64_t, kMaxDims> index{};
  while (true) {
    int64_t off = r.offset;
    for (int d = 0; d < r.ndim; ++d) off += index[d] * r.strides[d] * esize;
    out.push_back(off);
    int d = r.ndim - 1;
    while (d >= 0 && ++index[d] == r.shape[d]) index[d--] = 0;
    if (d < 0) break;
  }
}

void Write(Memory& mem, const Region& r, int64_t off, uint8_t value) {
  mem.Buffer(r)[off] = value;
  if (r.space == Space::kDestination) ++mem.dst_writes[r.buffer][off];
}

}  // namespace

namespace {

// OracleByte in two steps: the name's hash, then the element's byte from it.
uint64_t OracleNameHash(const std::string& name) {
  uint64_t h = 1469598103934665603ull;
  for (char c : name) h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ull;
  return h;
}

uint8_t OracleByteOf(uint64_t name_hash, int64_t flat, int k) {
  uint64_t h = (name_hash ^ static_cast<uint64_t>(flat)) * 1099511628211ull;
  h = (h ^ static_cast<uint64_t>(k + 7)) * 1099511628211ull;
  return static_cast<uint8_t>(h >> 29);
}

}  // namespace

uint8_t OracleByte(const std::string& name, int64_t flat, int k) {
  return OracleByteOf(OracleNameHash(name), flat, k);
}

// Calls fn(flat index in the tensor, byte offset in the buffer) for every element of fragment f.
template <typename Fn>
void ForEachElement(const Layout& layout, const Fragment& f, Fn fn) {
  const TensorSpec& t = layout.tensors[f.tensor];
  const int64_t esize = DTypeSize(t.dtype);
  if (f.box.Empty()) return;
  const auto tstrides = RowMajorStrides(t.shape);
  std::array<int64_t, kMaxDims> index{};
  for (int d = 0; d < f.box.ndim; ++d) index[d] = f.box.lo[d];
  while (true) {
    int64_t flat = 0, off = f.loc.byte_offset;
    for (int d = 0; d < f.box.ndim; ++d) {
      flat += index[d] * tstrides[d];
      off += (index[d] - f.box.lo[d]) * f.loc.strides[d] * esize;
    }
    fn(flat, off);
    int d = f.box.ndim - 1;
    while (d >= 0 && ++index[d] == f.box.hi[d]) {
      index[d] = f.box.lo[d];
      --d;
    }
    if (d < 0) break;
  }
}

namespace {

// The oracle's byte for element `flat` of each tensor of a layout: a tensor stack's element is its
// member's (core/layout/tensor_stack.h), so a stack on one side and its members on the other agree.
class LayoutOracle {
 public:
  explicit LayoutOracle(const Layout& layout) {
    for (const TensorSpec& t : layout.tensors) {
      Entry e;
      const std::optional<TensorStackName> stack = ParseTensorStackName(t.name);
      if (stack && CheckTensorStackShape(t, *stack).ok()) {
        e.member_elements = t.NumElements() / t.shape[0];
        for (int64_t m = stack->first; m < stack->end; ++m) {
          e.name_hashes.push_back(OracleNameHash(stack->MemberName(m)));
        }
      } else {
        e.name_hashes.push_back(OracleNameHash(t.name));
      }
      tensors_.push_back(std::move(e));
    }
  }
  uint8_t Byte(int tensor, int64_t flat, int k) const {
    const Entry& e = tensors_[static_cast<size_t>(tensor)];
    if (e.member_elements == 0) return OracleByteOf(e.name_hashes[0], flat, k);
    return OracleByteOf(e.name_hashes[static_cast<size_t>(flat / e.member_elements)],
                        flat % e.member_elements, k);
  }

 private:
  struct Entry {
    int64_t member_elements = 0;        // 0: a plain tensor
    std::vector<uint64_t> name_hashes;  // the tensor's, or each member's
  };
  std::vector<Entry> tensors_;
};

}  // namespace

Status ExecuteAndCheck(const TransferPlan& plan, const Layout& source, const Layout& destination) {
  const LayoutOracle source_oracle(source), destination_oracle(destination);
  Memory mem;
  for (const BufferTable::Entry& b : plan.source_buffers) mem.source.emplace_back(b.bytes, 0);
  for (const BufferTable::Entry& b : plan.destination_buffers) {
    mem.destination.emplace_back(b.bytes, 0);
    mem.dst_writes.emplace_back(b.bytes, 0);
  }
  for (const StagingSlot& s : plan.slots) mem.slots.emplace_back(s.bytes, 0);
  for (const Fragment& f : source.fragments) {
    const TensorSpec& t = source.tensors[f.tensor];
    const int64_t esize = DTypeSize(t.dtype);
    ForEachElement(source, f, [&](int64_t flat, int64_t off) {
      for (int k = 0; k < esize; ++k) {
        mem.source[f.loc.buffer][off + k] = source_oracle.Byte(f.tensor, flat, k);
      }
    });
  }
  const int n = static_cast<int>(plan.ops.size());
  std::vector<char> done(n, 0);
  std::map<int64_t, std::vector<uint8_t>> in_flight;
  std::vector<int64_t> from, to;
  int remaining = n;
  while (remaining > 0) {
    bool progress = false;
    for (const Op& op : plan.ops) {
      if (done[op.id]) continue;
      bool ready = std::ranges::all_of(plan.Deps(op), [&](int d) { return done[d] != 0; });
      if (!ready) continue;
      if (op.kind == OpKind::kRecv && !in_flight.count(op.message)) continue;
      switch (op.kind) {
        case OpKind::kCopy:
        case OpKind::kPack:
        case OpKind::kUnpack:
        case OpKind::kConvert:
          for (const CopyPair& c : plan.Copies(op)) {
            ElementOffsets(c.from, from);
            ElementOffsets(c.to, to);
            const int64_t esize = DTypeSize(c.from.dtype);
            std::vector<uint8_t>& src = mem.Buffer(c.from);
            for (size_t i = 0; i < from.size(); ++i) {
              for (int64_t k = 0; k < esize; ++k) Write(mem, c.to, to[i] + k, src[from[i] + k]);
            }
          }
          break;
        case OpKind::kSend:
        case OpKind::kForward: {
          std::vector<uint8_t>& src = mem.Buffer(op.Data());
          in_flight[op.message].assign(src.begin() + op.data.offset,
                                       src.begin() + op.data.offset + op.bytes);
          break;
        }
        case OpKind::kRecv: {
          std::vector<uint8_t> payload = std::move(in_flight[op.message]);
          in_flight.erase(op.message);
          if (static_cast<int64_t>(payload.size()) != op.bytes) {
            return Internal("recv op " + std::to_string(op.id) + " got " +
                            std::to_string(payload.size()) + " bytes, expected " +
                            std::to_string(op.bytes));
          }
          for (int64_t k = 0; k < op.bytes; ++k) Write(mem, op.Data(), op.data.offset + k, payload[k]);
          break;
        }
        case OpKind::kQuantize:  // values of another meaning: tests/planner/block_quantize_test.cc
          return Unimplemented("op " + std::to_string(op.id) + ": this byte oracle does not quantize");
      }
      done[op.id] = 1;
      --remaining;
      progress = true;
    }
    if (!progress) return Internal(std::to_string(remaining) + " ops never became ready");
  }
  int64_t expected_writes = 0;
  for (size_t fi = 0; fi < destination.fragments.size(); ++fi) {
    const Fragment& f = destination.fragments[fi];
    const TensorSpec& t = destination.tensors[f.tensor];
    const int64_t esize = DTypeSize(t.dtype);
    Status status;
    ForEachElement(destination, f, [&](int64_t flat, int64_t off) {
      for (int k = 0; k < esize && status.ok(); ++k) {
        const uint8_t got = mem.destination[f.loc.buffer][off + k];
        const int writes = mem.dst_writes[f.loc.buffer][off + k];
        const uint8_t expected = destination_oracle.Byte(f.tensor, flat, k);
        if (writes != 1 || got != expected) {
          status = Internal("tensor '" + t.name + "' element " + std::to_string(flat) + " byte " +
                            std::to_string(k) + " of destination fragment " + std::to_string(fi) +
                            " on rank " + std::to_string(f.loc.rank) + ": written " +
                            std::to_string(writes) + " times, value " + std::to_string(got) +
                            " expected " + std::to_string(expected));
        }
      }
    });
    FERRY_RETURN_IF_ERROR(status);
    expected_writes += f.box.Volume() * esize;
  }
  int64_t total_writes = 0;
  for (const auto& w : mem.dst_writes) {
    for (uint8_t c : w) total_writes += c;
  }
  if (total_writes != expected_writes) {
    return Internal(std::to_string(total_writes - expected_writes) +
                    " destination bytes outside any fragment were written");
  }
  return Status::Ok();
}

namespace {

int Uniform(std::mt19937_64& rng, int lo, int hi) {  // inclusive
  return std::uniform_int_distribution<int>(lo, hi)(rng);
}

// Random cut of [0, n) into `parts` consecutive ranges (some may be empty).
std::vector<int64_t> RandomCuts(std::mt19937_64& rng, int64_t n, int parts) {
  std::vector<int64_t> cuts = {0, n};
  for (int i = 1; i < parts; ++i) cuts.push_back(Uniform(rng, 0, static_cast<int>(n)));
  std::sort(cuts.begin(), cuts.end());
  return cuts;
}

// A random grid over `shape`: per dim, 1-3 consecutive ranges (some may be empty).
std::vector<std::vector<int64_t>> RandomGrid(std::mt19937_64& rng,
                                             const std::vector<int64_t>& shape) {
  std::vector<std::vector<int64_t>> cuts(shape.size());
  for (size_t d = 0; d < shape.size(); ++d) {
    cuts[d] = RandomCuts(rng, shape[d], Uniform(rng, 1, std::min<int>(3, shape[d] + 1)));
  }
  return cuts;
}

// Calls fn(box) for every cell of the grid, empty ones included, in row-major order.
template <typename Fn>
void ForEachGridCell(const std::vector<std::vector<int64_t>>& cuts, Fn fn) {
  const int ndim = static_cast<int>(cuts.size());
  std::array<int, kMaxDims> cell{};
  while (true) {
    Box box;
    box.ndim = ndim;
    for (int d = 0; d < ndim; ++d) {
      box.lo[d] = cuts[d][cell[d]];
      box.hi[d] = cuts[d][cell[d] + 1];
    }
    fn(box);
    int d = ndim - 1;
    while (d >= 0 && ++cell[d] == static_cast<int>(cuts[d].size()) - 1) cell[d--] = 0;
    if (d < 0) break;
  }
}

// Random chunk sizes, hierarchy and relay mode.
void RandomRoutingOptions(std::mt19937_64& rng, PlannerOptions& options) {
  const int64_t chunks[] = {64, 96, 256, 1 << 20};
  options.network_chunk_bytes = chunks[Uniform(rng, 0, 3)];
  options.fanout_chunk_bytes = chunks[Uniform(rng, 0, 3)];
  options.relay_chunk_bytes = chunks[Uniform(rng, 0, 3)];
  options.hierarchical = Uniform(rng, 0, 3) != 0;
  const RelayMode relays[] = {RelayMode::kAuto, RelayMode::kOff, RelayMode::kOn};
  options.relay = relays[Uniform(rng, 0, 2)];
}

void AddSide(std::mt19937_64& rng, Layout& layout, const std::vector<TensorSpec>& tensors,
             int num_ranks, int spare_rank_base, int& next_spare, bool fused) {
  for (const TensorSpec& spec : tensors) {
    const int t = layout.AddTensor(spec).value();
    const int ndim = static_cast<int>(spec.shape.size());
    const int sets = Uniform(rng, 1, 3);
    std::map<int, std::vector<Box>> held;  // rank -> boxes of this tensor
    for (int s = 0; s < sets; ++s) {
      ForEachGridCell(RandomGrid(rng, spec.shape), [&](const Box& box) {
        if (!box.Empty()) {
          std::vector<int> order(num_ranks);
          std::iota(order.begin(), order.end(), 0);
          std::shuffle(order.begin(), order.end(), rng);
          int rank = -1;
          for (int r : order) {
            bool clash = false;
            for (const Box& b : held[r]) clash = clash || b.Intersects(box);
            if (!clash) {
              rank = r;
              break;
            }
          }
          if (rank < 0) rank = spare_rank_base + next_spare++;
          held[rank].push_back(box);
          // Placement: appended row-major, or placed in a shared fused buffer with a gap and a
          // random dimension order.
          if (!fused || Uniform(rng, 0, 1) == 0) {
            layout.AppendFragment(t, box, rank, spec.name + "/" + std::to_string(s));
          } else {
            std::vector<int> perm(ndim);
            std::iota(perm.begin(), perm.end(), 0);
            std::shuffle(perm.begin(), perm.end(), rng);
            std::array<int64_t, kMaxDims> strides{};
            int64_t stride = 1;
            for (int k = ndim - 1; k >= 0; --k) {
              strides[perm[k]] = stride;
              stride *= box.Extent(perm[k]);
            }
            const int b = layout.GetOrAddBuffer(rank, "fused");
            const int64_t offset = layout.buffers[b].bytes + Uniform(rng, 0, 3) * DTypeSize(spec.dtype);
            layout.PlaceFragment(t, box, rank, "fused", offset, strides);
          }
        }
      });
    }
  }
}

// One side of a stacked case: every member of each family gets the same random replica sets and
// grid; a cell's members sit in one buffer at a constant stride (a gap of 0-2 elements between
// them), sometimes with one member moved past the others (breaking the run), or each in its own
// buffer.
// Fragments are appended member by member in ascending, descending or shuffled order.
// With `name_stacks`, half the families are named as one tensor stack (core/layout/
// tensor_stack.h): a cell's members at a constant stride in order are then one stack fragment, and
// other members one stack fragment each.
void AddStackedSide(std::mt19937_64& rng, Layout& layout,
                    const std::vector<std::vector<TensorSpec>>& families,
                    const std::vector<TensorSpec>& plain, int num_ranks, int side,
                    bool name_stacks) {
  for (const TensorSpec& spec : plain) {
    const int t = layout.AddTensor(spec).value();
    layout.AppendFragment(t, Box::FromShape(spec.shape), Uniform(rng, 0, num_ranks - 1),
                          spec.name);
  }
  for (size_t fi = 0; fi < families.size(); ++fi) {
    const std::vector<TensorSpec>& members = families[fi];
    const TensorSpec& spec = members[0];
    std::vector<int> ids;
    const bool as_stack = name_stacks && Uniform(rng, 0, 1) == 1;
    int stack = -1;
    if (as_stack) {
      const size_t number = spec.name.find(".0.");
      TensorSpec stacked{spec.name.substr(0, number) + ".[0:" + std::to_string(members.size()) +
                             "]" + spec.name.substr(number + 2),
                         {static_cast<int64_t>(members.size())}, spec.dtype};
      stacked.shape.insert(stacked.shape.end(), spec.shape.begin(), spec.shape.end());
      stack = layout.AddTensor(stacked).value();
    } else {
      for (const TensorSpec& m : members) ids.push_back(layout.AddTensor(m).value());
    }
    // Members [first, first + count) of `box` as one fragment of the stack.
    auto place_stack = [&](int first, int count, const Box& box, int rank,
                           const std::string& buffer, int64_t offset, int64_t member_stride,
                           const std::array<int64_t, kMaxDims>& strides) {
      Box stacked;
      stacked.ndim = box.ndim + 1;
      stacked.lo[0] = first;
      stacked.hi[0] = first + count;
      std::array<int64_t, kMaxDims> stacked_strides{};
      stacked_strides[0] = member_stride;
      for (int d = 0; d < box.ndim; ++d) {
        stacked.lo[d + 1] = box.lo[d];
        stacked.hi[d + 1] = box.hi[d];
        stacked_strides[d + 1] = strides[d];
      }
      layout.PlaceFragment(stack, stacked, rank, buffer, offset, stacked_strides);
    };
    const int64_t esize = DTypeSize(spec.dtype);
    const int sets = Uniform(rng, 1, 2);
    std::map<int, std::vector<Box>> held;
    for (int s = 0; s < sets; ++s) {
      int cell_index = 0;
      ForEachGridCell(RandomGrid(rng, spec.shape), [&](const Box& box) {
        if (!box.Empty()) {
          int rank = -1;
          for (int tries = 0; tries < 2 * num_ranks && rank < 0; ++tries) {
            const int r = Uniform(rng, 0, num_ranks - 1);
            bool clash = false;
            for (const Box& b : held[r]) clash = clash || b.Intersects(box);
            if (!clash) rank = r;
          }
          if (rank < 0) rank = num_ranks + static_cast<int>(held.size());  // a rank of its own
          held[rank].push_back(box);
          const std::string buffer = "stack" + std::to_string(side) + "/" + std::to_string(fi) +
                                     "/" + std::to_string(s) + "/" + std::to_string(cell_index);
          const int k = static_cast<int>(members.size());
          std::vector<int> order(k);
          std::iota(order.begin(), order.end(), 0);
          const int order_kind = Uniform(rng, 0, 3);
          if (order_kind == 2) std::reverse(order.begin(), order.end());
          if (order_kind == 3) std::shuffle(order.begin(), order.end(), rng);
          const int64_t stride = (box.Volume() + Uniform(rng, 0, 2)) * esize;
          const int moved = Uniform(rng, 0, 3) == 0 ? Uniform(rng, 0, k - 1) : -1;
          const bool separate = Uniform(rng, 0, 4) == 0;
          const auto strides = RowMajorStrides(box.Shape());
          if (as_stack && !separate && moved < 0) {
            place_stack(0, k, box, rank, buffer, 0, stride / esize, strides);
          } else if (as_stack) {
            for (int j : order) {
              const std::string own = separate ? buffer + "/" + std::to_string(j) : buffer;
              const int64_t offset = separate ? 0 : (j == moved ? k : j) * stride;
              place_stack(j, 1, box, rank, own, offset, box.Volume(), strides);
            }
          }
          for (int j : as_stack ? std::vector<int>{} : order) {
            if (separate) {
              layout.AppendFragment(ids[j], box, rank, buffer + "/" + std::to_string(j));
            } else {
              const int64_t offset = (j == moved ? k : j) * stride;
              layout.PlaceFragment(ids[j], box, rank, buffer, offset, strides);
            }
          }
        }
        ++cell_index;
      });
    }
  }
}

}  // namespace

RandomCase MakeRandomStackedCase(std::mt19937_64& rng, bool name_stacks) {
  RandomCase c;
  const int num_ranks = Uniform(rng, 2, 8);
  const DType dtypes[] = {DType::kInt8, DType::kBF16, DType::kFP32};
  // 1-2 families of 2-6 members named like experts, which may share a shape; a plain tensor.
  std::vector<std::vector<TensorSpec>> families(Uniform(rng, 1, 2));
  std::vector<int64_t> shape;
  const int ndim = Uniform(rng, 1, 4);
  for (int d = 0; d < ndim; ++d) shape.push_back(Uniform(rng, 1, ndim <= 2 ? 7 : 3));
  const DType dtype = dtypes[Uniform(rng, 0, 2)];
  for (size_t f = 0; f < families.size(); ++f) {
    const int k = Uniform(rng, 2, 6);
    for (int j = 0; j < k; ++j) {
      TensorSpec t;
      t.name = "layers.1.experts." + std::to_string(j) + (f == 0 ? ".gate" : ".down");
      t.shape = shape;
      t.dtype = dtype;
      families[f].push_back(t);
    }
  }
  std::vector<TensorSpec> plain = {{"norm", {Uniform(rng, 1, 9)}, DType::kFP32}};
  AddStackedSide(rng, c.source, families, plain, num_ranks, 0, name_stacks);
  AddStackedSide(rng, c.destination, families, plain, num_ranks, 1, name_stacks);
  // Destination ranks follow the source ranks, or overlap them.
  int max_rank = 0;
  for (const BufferSpec& b : c.source.buffers) max_rank = std::max(max_rank, b.rank);
  if (Uniform(rng, 0, 1) == 1) {
    for (size_t b = 0; b < c.destination.buffers.size(); ++b) {
      c.destination.buffers.SetRank(b, c.destination.buffers[b].rank + max_rank + 1);
    }
    FragmentTable& fragments = c.destination.fragments;
    for (size_t i = 0; i < fragments.size(); ++i) {
      fragments.Edit(i,
                     [&](Fragment& f) { f.loc.rank = c.destination.buffers[f.loc.buffer].rank; });
    }
  }
  for (const BufferSpec& b : c.destination.buffers) max_rank = std::max(max_rank, b.rank);
  c.topology = Topology::Uniform(max_rank + 1, Uniform(rng, 1, 4));
  RandomRoutingOptions(rng, c.options);
  return c;
}

uint64_t PropertySeed(uint64_t seed) {
  const char* value = std::getenv("FERRY_PROPERTY_SEED");
  if (value == nullptr || *value == '\0') return seed;
  const uint64_t n = std::strtoull(value, nullptr, 10);
  return seed ^ (n + 1) * 0x9e3779b97f4a7c15ull;
}

RandomCase MakeRandomCase(std::mt19937_64& rng) {
  RandomCase c;
  const int num_ranks = Uniform(rng, 2, 12);
  const DType dtypes[] = {DType::kInt8, DType::kBF16, DType::kFP32, DType::kFP64};
  std::vector<TensorSpec> tensors;
  const int num_tensors = Uniform(rng, 1, 3);
  for (int i = 0; i < num_tensors; ++i) {
    TensorSpec t;
    t.name = "t" + std::to_string(i);
    const int ndim = Uniform(rng, 1, 5);
    for (int d = 0; d < ndim; ++d) t.shape.push_back(Uniform(rng, 1, ndim <= 2 ? 9 : 4));
    t.dtype = dtypes[Uniform(rng, 0, 3)];
    tensors.push_back(t);
  }
  // Destination ranks overlap the source ranks (colocated) or are offset from them.
  const int dst_base = Uniform(rng, 0, 1) ? 0 : Uniform(rng, 0, num_ranks);
  int next_spare = 0;
  const int spare_base = 2 * num_ranks + 1;
  AddSide(rng, c.source, tensors, num_ranks, spare_base, next_spare, Uniform(rng, 0, 1) == 1);
  Layout dst_local;
  AddSide(rng, dst_local, tensors, num_ranks, spare_base, next_spare, Uniform(rng, 0, 1) == 1);
  // Shift destination ranks (spares keep their numbers).
  for (size_t b = 0; b < dst_local.buffers.size(); ++b) {
    const int rank = dst_local.buffers[b].rank;
    if (rank < num_ranks) dst_local.buffers.SetRank(b, rank + dst_base);
  }
  for (size_t i = 0; i < dst_local.fragments.size(); ++i) {
    dst_local.fragments.Edit(
        i, [&](Fragment& f) { f.loc.rank = dst_local.buffers[f.loc.buffer].rank; });
  }
  c.destination = std::move(dst_local);
  const int total = spare_base + next_spare + 1;
  c.topology = Topology::Uniform(total, Uniform(rng, 1, 4));
  RandomRoutingOptions(rng, c.options);
  const int64_t buckets[] = {1, 100, 1 << 20};
  c.options.bucket_bytes = buckets[Uniform(rng, 0, 2)];
  const int64_t broadcast_chunks[] = {16, 100, 1 << 20};
  c.options.broadcast_chunk_bytes = broadcast_chunks[Uniform(rng, 0, 2)];
  return c;
}

Result<int64_t> NodeNeedBytes(const Layout& destination, const Topology& topology, int node) {
  std::map<int, std::vector<Box>> boxes;  // tensor -> distinct boxes on the node
  for (const Fragment& f : destination.fragments) {
    if (topology.NodeOf(f.loc.rank) != node) continue;
    std::vector<Box>& seen = boxes[f.tensor];
    bool known = false;
    for (const Box& b : seen) {
      if (b == f.box) {
        known = true;
      } else if (b.Intersects(f.box)) {
        return Internal(destination.tensors[static_cast<size_t>(f.tensor)].name + ": " +
                        b.ToString() + " and " + f.box.ToString() + " partly overlap on node " +
                        std::to_string(node));
      }
    }
    if (!known) seen.push_back(f.box);
  }
  int64_t bytes = 0;
  for (const auto& [tensor, list] : boxes) {
    for (const Box& b : list) {
      bytes += b.Volume() * DTypeSize(destination.tensors[static_cast<size_t>(tensor)].dtype);
    }
  }
  return bytes;
}

}  // namespace ferry::testing
