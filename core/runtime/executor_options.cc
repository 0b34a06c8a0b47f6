// The executor's option table.
#include "core/runtime/executor_options.h"

namespace ferry {

// Threads one rank's copy pool may start: far above any useful count, far below what a host
// survives.
constexpr int kMaxCopyThreads = 256;

const OptionTable<ExecutorOptions>& ExecutorOptions::Table() {
  static const OptionTable<ExecutorOptions>* table = [] {
    auto* t = new OptionTable<ExecutorOptions>();
    t->Bytes("executor.staging_budget", &ExecutorOptions::staging_budget,
             "most bytes of staging slots one rank holds at once; ops wait for space beyond it")
        .Int("executor.copy_threads", &ExecutorOptions::copy_threads,
             "threads for pack/unpack/copy on one rank, the executor thread included (0 = one per "
             "hardware thread, at most 8)",
             0, kMaxCopyThreads)
        .Int("executor.max_in_flight", &ExecutorOptions::max_in_flight,
             "most sends and forwards one rank has posted at once (receives are posted when ready, "
             "outside this window)",
             1, 1 << 16)
        .Bool("executor.cache_registrations", &ExecutorOptions::cache_registrations,
              "keep user buffers registered with transports across refits (buffers must stay "
              "allocated; Executor::ForgetRegistrations releases them)")
        .Bool("executor.direct_intra_node", &ExecutorOptions::direct_intra_node,
              "between ranks of one node, the receiver copies straight from the sender's source "
              "buffers (one copy instead of pack, transport, unpack); every rank must use the "
              "same value")
        .Bool("executor.quantizing_reads", &ExecutorOptions::quantizing_reads,
              "a GPU direct read into a block-scaled fp8 destination quantizes the whole 128x128 "
              "blocks it holds straight from the sender's memory instead of staging them for the "
              "Quantize op (the receiver's choice alone)")
        .Choice("executor.convert_on_sender", &ExecutorOptions::convert_on_sender,
                {{"auto", ConvertOnSender::kAuto}, {"always", ConvertOnSender::kAlways},
                 {"never", ConvertOnSender::kNever}},
                "where a direct read into a narrower dtype (fp8) converts: auto packs the narrower "
                "bytes on the sender once the receiver reports another GPU (half the bytes over "
                "NVLink) and converts while reading on one GPU; always packs on the sender; never "
                "converts while reading (the sender's choice; its receiver follows the offer)")
        .Path("executor.trace_dir", &ExecutorOptions::trace_dir,
              "a directory (which must exist) where each run writes this rank's timeline, "
              "rank<R>.run<N>.json, for Perfetto or chrome://tracing (empty: none)");
    return t;
  }();
  return *table;
}

}  // namespace ferry
