// PlannerOptions: the planner's knobs (chunk sizes, hierarchical routing, relays, the baseline's
// buckets), with their option table so that every tool and the library facade read them from one
// Config (planner.* options) with one set of defaults.
#pragma once

#include <cstdint>

#include "core/base/config.h"
#include "core/base/option_table.h"
#include "core/base/status.h"

namespace ferry {

enum class RelayMode { kAuto, kOff, kOn };

// How bytes a destination rank already holds as a source reach its destination fragment: one
// local Copy op (kCopy), or a message to itself, Pack/Send/Recv/Unpack over the communicator's
// transport.same_rank (kTransport), which exercises a transport (NCCL send/recv to self) on one
// rank.
enum class SameRankMode { kCopy, kTransport };

struct PlannerOptions {
  int64_t network_chunk_bytes = int64_t{32} << 20;  // largest message over the network
  // Largest message from a source rank straight to a destination rank of its node. With direct
  // reads (executor.direct_intra_node) such a message is one kernel or copy by the receiver and
  // needs no staging, so larger is cheaper (fewer offers, fewer and fuller kernels); staged, each
  // message takes a staging slot of its size.
  int64_t same_node_chunk_bytes = int64_t{32} << 20;
  // Largest message of a chain inside one destination node (fan-out). Each hop waits for a whole
  // chunk, so the chain's tail after the network's last byte is (members - 1) chunks over NVLink;
  // for 8-GPU nodes the simulator predicts the same refit time for 8 and 16 MiB, with fewer ops
  // for 16.
  int64_t fanout_chunk_bytes = int64_t{16} << 20;
  // Largest message of a chain relayed between destination nodes' leaders: its hops cross the
  // network, so each costs a chunk at NIC speed; the simulator favours 4-8 MiB on GB200 NVL72.
  int64_t relay_chunk_bytes = int64_t{8} << 20;
  bool hierarchical = true;  // cross the network once per destination node, then fan out
  RelayMode relay = RelayMode::kAuto;  // relay between destination nodes (auto: if sources bound)
  SameRankMode same_rank = SameRankMode::kCopy;
  // Gather-and-broadcast bucket size: NeMo RL's packed broadcast fills buckets of
  // NRL_REFIT_BUFFER_MEMORY_RATIO (0.02) x GPU memory, at most 5 GiB
  // (NVIDIA-NeMo/RL nemo_rl/utils/packed_tensor.py, get_target_packed_tensor_size): 1.6 GiB on an
  // 80 GB H100 (2.8 GiB on a 141 GB H200, --set planner.bucket_bytes to match).
  int64_t bucket_bytes = (int64_t{80} << 30) / 50;
  // Gather-and-broadcast: largest message of the pipelined broadcast; large enough to keep the
  // message count of a 256-rank refit near a million, small enough that the pipeline fill (one
  // chunk per hop) stays a few percent of the refit.
  int64_t broadcast_chunk_bytes = int64_t{256} << 20;
  // Gather-and-broadcast: bucket buffers each rank cycles through, as NeMo RL's producer and
  // consumer do (NRL_REFIT_NUM_BUFFERS, 2: NVIDIA-NeMo/RL nemo_rl/utils/packed_tensor.py, which
  // synchronises a buffer's previous broadcast before filling it again): a rank fills bucket b
  // only once it has finished with bucket b - broadcast_buffers.
  int broadcast_buffers = 2;
  // Rows a chunk of a matrix is cut at a multiple of, counted from its piece's first row, where a
  // chunk holds at least twice that many (ChunkBox). Not a planner.* option: PlanReshard sets 128
  // for a plan into block-scaled fp8, so that its messages hold whole 128x128 blocks which the
  // receiver's direct reads can quantize (core/runtime/quantizing_read.h); other plans cut at any
  // row.
  int64_t chunk_row_align = 1;

  // planner.* options: name, default (the values above), help.
  static const OptionTable<PlannerOptions>& Table();
  static Result<PlannerOptions> FromConfig(const Config& config) { return Table().Read(config); }
};

}  // namespace ferry
