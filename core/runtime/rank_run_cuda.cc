// RankRun on CUDA memory: the device and stream, ops as batched kernel launches (copies, and
// conversions where a pair changes dtype or applies an element function) tracked by CUDA events, and the bounce slots that carry
// sends and receives of CUDA regions through pinned host memory. See rank_run.h.
#include <optional>
#include <thread>

#include "core/cuda/batched_copy.h"
#include "core/runtime/rank_run.h"

namespace ferry {
namespace {

// Appends one CopyGeometry between `ends` as the kernels' work: a strided copy to `copies`, or a
// strided conversion to `converts` when the dtypes differ or an element function applies; the
// outer dims, then the row.
Status AppendGpuWork(const CopyGeometry& g, const CopyEnds& ends,
                     std::vector<cuda::StridedCopy>& copies,
                     std::vector<cuda::StridedConvert>& converts) {
  if (ends.pid != 0) return Internal("a CUDA copy cannot read another process's address space");
  if (g.outer_dims + 1 > cuda::kMaxCopyDims) {
    return Unimplemented("a CUDA copy of " + std::to_string(g.outer_dims + 1) + " dims (at most " +
                         std::to_string(cuda::kMaxCopyDims) + ")");
  }
  auto fill = [&g](auto& c) {
    c.ndim = g.outer_dims + 1;
    for (int d = 0; d < g.outer_dims; ++d) {
      c.shape[d] = g.extent[d];
      c.src_strides[d] = g.from_stride[d];
      c.dst_strides[d] = g.to_stride[d];
    }
    c.shape[g.outer_dims] = g.run;
    c.src_strides[g.outer_dims] = g.from_inner;
    c.dst_strides[g.outer_dims] = g.to_inner;
  };
  if (g.from_dtype != g.to_dtype || g.fn != ElementFn::kNone) {
    cuda::StridedConvert c;
    c.src = ends.from;
    c.dst = ends.to;
    c.src_dtype = g.from_dtype;
    c.dst_dtype = g.to_dtype;
    c.fn = g.fn;
    fill(c);
    converts.push_back(c);
    return Status::Ok();
  }
  cuda::StridedCopy c;
  c.src = ends.from;
  c.dst = ends.to;
  c.elem_size = DTypeSize(g.from_dtype);
  fill(c);
  copies.push_back(c);
  return Status::Ok();
}

// A contiguous copy of `bytes` bytes.
cuda::StridedCopy Contiguous(const char* from, char* to, int64_t bytes) {
  cuda::StridedCopy c;
  c.src = from;
  c.dst = to;
  c.ndim = 1;
  c.elem_size = 1;
  c.shape[0] = bytes;
  c.src_strides[0] = 1;
  c.dst_strides[0] = 1;
  return c;
}

}  // namespace

// Finds whether this rank's memory includes CUDA buffers (all on one device) and, the first time,
// creates the executor's stream on that device.
Status RankRun::PrepareGpu() {
  int device = -1;
  for (const auto* table : {&memory_.source, &memory_.destination}) {
    for (const MemoryDesc& m : *table) {
      if (m.base == nullptr || m.kind != MemoryKind::kCuda) continue;
      if (device >= 0 && m.device != device) {
        return Unimplemented("rank " + std::to_string(rank_) + " has CUDA buffers on devices " +
                             std::to_string(device) + " and " + std::to_string(m.device) +
                             "; one executor drives one device");
      }
      device = m.device;
    }
  }
  on_gpu_ = device >= 0;
  if (!on_gpu_) return Status::Ok();
  if (res_.gpu != nullptr && res_.gpu->device() != device) {
    res_.gpu_tables.Clear();  // their memory is freed on the old stream
    res_.gpu_op_tables.Clear();
    res_.gpu.reset();
  }
  if (res_.gpu == nullptr) {
    FERRY_ASSIGN_OR_RETURN(res_.gpu, cuda::CopyStream::Create(device));
  }
  return Status::Ok();
}

bool RankRun::OnGpu(const Region& r) const { return OnGpu(r.space, r.buffer); }

bool RankRun::OnGpu(Space space, int buffer) const {
  if (!on_gpu_ || space == Space::kStaging) return false;
  const auto& table = space == Space::kSource ? memory_.source : memory_.destination;
  return buffer >= 0 && buffer < static_cast<int>(table.size()) && table[buffer].kind == MemoryKind::kCuda;
}

int64_t RankRun::SlotBytes(int slot) const {
  const int plan_slots = static_cast<int>(plan_.slots.size());
  return slot < plan_slots ? plan_.slots[slot].bytes : bounce_bytes_[slot - plan_slots];
}

// Op i sends or receives a CUDA region and no transport has GPU-direct: it gets a slot of its own
// in the (pinned) staging arena, its bounce buffer.
void RankRun::AddBounce(int i) {
  const int slot = static_cast<int>(plan_.slots.size() + bounce_bytes_.size());
  bounce_bytes_.push_back(OpAt(i).bytes);
  bounce_of_[i] = slot;
  slots_of_[i].push_back(slot);
  ++slot_uses_[slot];
}

// The uploaded kernel work of op or direct read `index` (keyed with plan_generation_ in `cache`):
// an earlier run's when its regions lie at the same addresses (gpu_read_tables.h), else described
// from `geometries` and `ends` and uploaded now.
Result<const cuda::WorkTables*> RankRun::FindGpuWork(GpuReadTables& cache, int index,
                                                     std::span<const CopyGeometry> geometries,
                                                     std::span<const CopyEnds> ends) {
  auto describe = [&](std::vector<cuda::StridedCopy>& copies,
                      std::vector<cuda::StridedConvert>& converts) {
    for (size_t c = 0; c < geometries.size(); ++c) {
      FERRY_RETURN_IF_ERROR(AppendGpuWork(geometries[c], ends[c], copies, converts));
    }
    return Status::Ok();
  };
  const int64_t built = cache.uploads();
  Result<const cuda::WorkTables*> tables =
      cache.Find(plan_generation_, index, ends, describe, *res_.gpu);
  stats_.gpu_tables_built += static_cast<int>(cache.uploads() - built);
  return tables;
}

// Enqueues op i's copies as one kernel on the executor's stream; `next` runs when it finished.
Status RankRun::LaunchGpu(int i, std::span<const CopyGeometry> geometries,
                          std::span<const CopyEnds> ends, GpuNext next) {
  FERRY_ASSIGN_OR_RETURN(const cuda::WorkTables* tables,
                         FindGpuWork(res_.gpu_op_tables, i, geometries, ends));
  FERRY_ASSIGN_OR_RETURN(int64_t ticket, res_.gpu->Launch(std::span(&tables, 1), {}, {}));
  TrackGpu(ticket, {i});
  gpu_next_[i] = next;
  return Status::Ok();
}

// Queues Quantize op i's job for FlushGpuWork; the op completes when its kernel is done.
Status RankRun::QueueQuantize(int i, const cuda::BlockQuantizeJob& job) {
  quantize_jobs_queued_.push_back(job);
  gpu_queued_.push_back(i);
  gpu_next_[i] = GpuNext::kComplete;
  return Status::Ok();
}

// A direct read's work (FindGpuWork) waits for FlushGpuWork, so that the reads whose offers
// arrive together are launched together, under one event.
Status RankRun::QueueGpuRead(int i, int tables_key, std::span<const CopyGeometry> geometries,
                             std::span<const CopyEnds> ends) {
  FERRY_ASSIGN_OR_RETURN(const cuda::WorkTables* tables,
                         FindGpuWork(res_.gpu_tables, tables_key, geometries, ends));
  read_tables_.push_back(tables);
  gpu_queued_.push_back(i);
  gpu_next_[i] = GpuNext::kFinishRead;
  return Status::Ok();
}

// A direct read into twins of block-scaled matrices whose values and scales lie in CUDA memory,
// as its split (quantizing_read.h): the pieces queued as QueueGpuRead's work, the rectangles for
// FlushGpuWork to quantize after it, and the blocks they cover noted for each Quantize op.
// False, with nothing queued, when a Quantize op's values or scales are not on the GPU.
Result<bool> RankRun::QueueQuantizingRead(int i, const DirectRead& d, std::span<const CopyEnds> ends) {
  const QuantizingSplit& split = d.quantizing;
  std::vector<cuda::BlockQuantizeRect> rects;
  rects.reserve(split.rects.size());
  for (const QuantizingSplit::Rect& rect : split.rects) {
    FERRY_ASSIGN_OR_RETURN(const QuantizeTargets t, QuantizeTargetsOf(rect.quantize));
    if (!t.values_on_gpu || !t.scales_on_gpu) return false;
    rects.push_back(t.RectOf(rect.blocks, ends[static_cast<size_t>(rect.copy)].from + rect.from_delta, rect.pitch));
  }
  if (!split.pieces.empty()) {
    std::vector<CopyEnds> piece_ends;
    piece_ends.reserve(split.pieces.size());
    for (const QuantizingSplit::Piece& p : split.pieces) {
      const CopyEnds& e = ends[static_cast<size_t>(p.copy)];
      piece_ends.push_back({e.from + p.from_delta, e.to + p.to_delta, e.pid});
    }
    FERRY_ASSIGN_OR_RETURN(const cuda::WorkTables* tables,
                           FindGpuWork(res_.gpu_tables, HistoryIndex(roles_.direct_of[i], false), split.geometries,
                                                     piece_ends));
    read_tables_.push_back(tables);
  }
  for (const QuantizingSplit::Rect& rect : split.rects) quantized_blocks_[rect.quantize].push_back(rect.blocks);
  rects_queued_.insert(rects_queued_.end(), rects.begin(), rects.end());
  gpu_queued_.push_back(i);
  gpu_next_[i] = GpuNext::kFinishRead;
  stats_.bytes_quantized_direct += split.rect_bytes;
  stats_.bytes_copied += (*directs_)[roles_.direct_of[i]].bytes;
  return true;
}

// Launches the GPU work queued since the last flush, under one event: the direct reads' copies and
// conversions (QueueGpuRead, QueueQuantizingRead), the Quantize ops' whole twins (QueueQuantize),
// then every block rectangle, the quantizing reads' and the Quantize ops' rests
// (StartQuantizeRest). Work queued together became ready together (the reads whose offers came in
// one sweep, the Quantize ops those reads' completions readied), and a launch costs the executor
// thread and the GPU more than a small piece of work. Each op finishes as gpu_next_ says once the
// event has passed: a read sends its "done".
Status RankRun::FlushGpuWork() {
  if (gpu_queued_.empty()) return Status::Ok();
  std::vector<int> ops;
  ops.swap(gpu_queued_);
  std::vector<const cuda::WorkTables*> tables;
  tables.swap(read_tables_);
  std::vector<cuda::BlockQuantizeJob> jobs;
  jobs.swap(quantize_jobs_queued_);
  std::vector<cuda::BlockQuantizeRect> rects;
  rects.swap(rects_queued_);
  std::optional<int64_t> ticket;  // the launch enqueued last
  auto launched = [&](Result<int64_t> next) -> Status {
    FERRY_RETURN_IF_ERROR(next.status());
    if (ticket) TrackGpu(*ticket, {});
    ticket = *next;
    return Status::Ok();
  };
  Status s;
  if (!tables.empty()) s = launched(res_.gpu->Launch(tables, {}, {}));
  if (s.ok() && !jobs.empty()) s = launched(res_.gpu->Quantize(jobs));
  if (s.ok() && !rects.empty()) s = launched(res_.gpu->QuantizeRects(rects));
  if (s.ok() && !ticket) s = launched(res_.gpu->Launch(tables, {}, {}));  // no work: the event alone
  if (!s.ok()) return s.WithContext(Describe(ops.front()));
  TrackGpu(*ticket, std::move(ops));
  return Status::Ok();
}

// Kernels of `ticket` run for `ops`; they complete together when PollGpu sees the ticket done.
void RankRun::TrackGpu(int64_t ticket, std::vector<int> ops) {
  if (res_.trace != nullptr) gpu_launched_[ticket] = RunTrace::Now();
  if (!ops.empty()) ++stats_.gpu_batches;
  gpu_ops_[ticket] = std::move(ops);
}

void RankRun::TraceGpuDone(int64_t ticket, size_t ops) {
  if (res_.trace == nullptr) return;
  res_.trace->Span(RunTrace::Lane::kGpu, "kernels of " + std::to_string(ops) + (ops == 1 ? " op" : " ops"),
                   gpu_launched_[ticket], RunTrace::Now());
  gpu_launched_.erase(ticket);
}

// A Send whose data lies in CUDA memory copies it to its bounce slot first (then PostData, from
// OnGpuDone); a Recv receives into its bounce slot (then BounceIn, from OnRequestDone).
Status RankRun::StartBounced(int i) {
  const Op& op = OpAt(i);
  char* bounce = res_.arena.data() + placement_.OffsetOf(bounce_of_[i]);
  if (op.kind == OpKind::kRecv) return PostData(i, bounce, res_.arena.data());
  FERRY_ASSIGN_OR_RETURN(char* at, BaseOf(op.Data()));
  FERRY_ASSIGN_OR_RETURN(int64_t ticket, res_.gpu->Launch({Contiguous(at, bounce, op.bytes)}));
  TrackGpu(ticket, {i});
  gpu_next_[i] = GpuNext::kPostSend;
  return Status::Ok();
}

// A bounced Recv's bytes arrived: copy them up into the CUDA region, then the op completes.
Status RankRun::BounceIn(int i) {
  const Op& op = OpAt(i);
  const char* bounce = res_.arena.data() + placement_.OffsetOf(bounce_of_[i]);
  FERRY_ASSIGN_OR_RETURN(char* at, BaseOf(op.Data()));
  FERRY_ASSIGN_OR_RETURN(int64_t ticket, res_.gpu->Launch({Contiguous(bounce, at, op.bytes)}));
  TrackGpu(ticket, {i});
  gpu_next_[i] = GpuNext::kComplete;
  return Status::Ok();
}

// Collects the kernels that finished, in launch order (one stream: a later one cannot finish
// first). Yields the processor when none did and nothing else is pending, so that ranks sharing
// a machine are not starved by spinning ones.
void RankRun::PollGpu() {
  if (gpu_ops_.empty()) return;
  bool any = false;
  while (!gpu_ops_.empty() && failure_.ok()) {
    auto it = gpu_ops_.begin();
    Result<bool> finished = res_.gpu->Finished(it->first);
    if (!finished.ok()) {
      failure_ = finished.status().WithContext(Describe(it->second.front()));
      return;
    }
    if (!*finished) break;
    const std::vector<int> ops = std::move(it->second);
    TraceGpuDone(it->first, ops.size());
    gpu_ops_.erase(it);
    any = true;
    for (int i : ops) OnGpuDone(i);
  }
  if (!any && in_flight_ == 0 && copies_running_ == 0) std::this_thread::yield();
}

void RankRun::OnGpuDone(int i) {
  Status next;
  switch (gpu_next_[i]) {
    case GpuNext::kComplete:
      Complete(i);
      return;
    case GpuNext::kFinishRead:
      next = FinishRead(i);
      break;
    case GpuNext::kPostSend:
      next = PostData(i, res_.arena.data() + placement_.OffsetOf(bounce_of_[i]), res_.arena.data());
      break;
  }
  if (!next.ok() && failure_.ok()) failure_ = next.WithContext(Describe(i));
}

// After a failure: waits for this run's kernels, so none still reads a peer's memory or writes
// staging once the run has returned.
void RankRun::DrainGpu() {
  for (auto& [ticket, ops] : gpu_ops_) {
    while (true) {
      Result<bool> finished = res_.gpu->Finished(ticket);
      if (!finished.ok() || *finished) break;
      std::this_thread::yield();
    }
  }
  gpu_ops_.clear();
  gpu_queued_.clear();
  read_tables_.clear();
  quantize_jobs_queued_.clear();
  rects_queued_.clear();
}

}  // namespace ferry
