// ExecutorOptions: how one rank's executor runs its part of a plan (staging budget, copy threads,
// messages in flight, registration caching, direct reads between ranks of one node, a timeline
// per run), read once
// from a Config through its option table.
#pragma once

#include <cstdint>
#include <string>

#include "core/base/config.h"
#include "core/base/option_table.h"
#include "core/base/status.h"

namespace ferry {

// Where a direct read whose Pack narrows (bf16 into fp8) converts (core/runtime/direct_read.h).
enum class ConvertOnSender {
  kAuto,    // on the receiver while it reads, until the receiver reports the sender on another
            // GPU; then the sender packs that message from its next run on
  kAlways,  // the sender packs every such message (where its staging can be offered)
  kNever,   // the receiver always reads the wider elements and converts
};

struct ExecutorOptions {
  // Most bytes of staging slots one rank holds at once; ops wait for space beyond it.
  int64_t staging_budget = int64_t{1} << 30;
  // Threads for pack/unpack/copy on one rank, the executor thread included; 0 = one per hardware
  // thread, at most 8.
  int copy_threads = 0;
  int max_in_flight = 256;  // posted sends and forwards per rank at once (receives: not bounded)
  // Keep user buffers registered with transports across runs (Executor::ForgetRegistrations).
  bool cache_registrations = true;
  // Between ranks of one node the receiver copies straight from the sender's source buffers.
  bool direct_intra_node = true;
  // A direct read into the twin of a block-scaled matrix quantizes whole blocks from the peer.
  bool quantizing_reads = true;
  // Where a narrowing direct read converts; the sender's choice, which its receiver follows.
  ConvertOnSender convert_on_sender = ConvertOnSender::kAuto;
  // When not empty, each run writes its timeline there (core/runtime/run_trace.h).
  std::string trace_dir;

  // executor.* options: name, default (the values above), help.
  static const OptionTable<ExecutorOptions>& Table();
  static Result<ExecutorOptions> FromConfig(const Config& config) { return Table().Read(config); }
};

}  // namespace ferry
