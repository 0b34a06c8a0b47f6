// `ferry run` and `ferry demo`: a real refit on host memory across processes.
//
// Without a launcher, `ferry run` starts one process per rank on this machine (local_launch.h) and
// supervises them; under torchrun / mpirun / srun it is one of the launcher's ranks. Each rank
// (run_rank.h) builds the layouts and plans locally through the library facade (planning is
// deterministic), joins a Session, allocates its source and destination buffers, fills the sources
// with the refit pattern (refit_pattern.h), runs the plan(s) through core/refit's Refit, verifies
// every destination byte, and rank 0 prints progress and the report. `ferry demo` is `ferry run`
// with the README's configuration and both strategies.
//
// Functions here are for the CLI and its tests; RunRank and RunCommand block and are meant for
// the main thread.
#pragma once

#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/layout/layout.h"
#include "core/layout/topology.h"
#include "planner/planner.h"
#include "tools/cli/refit_inputs.h"

namespace ferry::cli {

struct RunArgs {
  // Preset mode (a model preset and two framework specs) or file mode (two layout files).
  std::string model;
  std::string scale = "1";
  std::string source_spec, destination_spec;
  std::string source_layout_file, destination_layout_file;
  bool colocated = false;
  int gpus_per_node = 8;
  // The destination's weights in this dtype (RefitSourceArgs::destination_dtype); empty: as laid out.
  std::string destination_dtype;

  std::string transport = "tcp";  // for both link classes between ranks (same node, network)
  std::vector<Strategy> strategies = {Strategy::kReshard};
  int iterations = 1;  // measured refits per strategy
  int warmup = 0;      // unmeasured refits per strategy before them
  bool verify = false;
  double timeout_seconds = 300;       // the whole run; the launcher kills ranks after it
  std::string config_file;            // YAML options (ferry config lists them)
  std::vector<std::string> settings;  // "name=value" options, applied last
  std::string results_file;           // rank 0 appends one CSV row per strategy here
  std::string label;                  // shown in the report header (the demo sets it)
  // Each rank compares its open file descriptors and resident memory after the warm-up refits
  // with after the measured ones, and fails when fds grew or RSS grew by more than 2 MiB.
  bool leak_check = false;
  std::string save_plan_file;  // rank 0 writes the plan it executes (the first strategy's) as JSON
  // Ranks take their nodes from the topology instead of host names: the local launcher sets it,
  // so that a refit planned for several nodes runs on this one machine as planned.
  bool pretend_nodes = false;
  // Where the buffers live: "host" (shareable host memory) or "cuda" (one cudaMalloc per side per
  // rank, on device rank % visible devices).
  std::string memory = "host";
  // With memory "cuda": how the buffers are allocated, "cudamalloc" (one cudaMalloc per side per
  // rank) or "vmm" (20 MiB cuMem* mappings side by side, as PyTorch's expandable_segments).
  std::string cuda_alloc = "cudamalloc";
  // A fault for one rank to inject (fault_injection.h: "2:kill:after=2"); empty: FERRY_INJECT_FAULT.
  std::string inject_fault;
  // Recover from a failed refit: the local launcher replaces a rank whose process died (any rank,
  // rank 0 included, as often as it fails, up to max_replacements in all), every rank moves to the
  // next epoch (Communicator::Recreate) and the run goes on from the earliest refit a survivor did
  // not finish; with --verify every refit is verified.
  bool recover = false;
  int max_replacements = 4;  // with --recover; 1 to kMaxReplacements (local_launch.h)
  // Who serves the rendezvous store of a local launch: "launcher" (the launcher process; rank 0 is
  // an ordinary rank) or "rank0" (rank 0 hosts it, as under a plain torchrun; it cannot then be
  // replaced).
  std::string store_host = "launcher";
};

// The layouts and topology one refit needs, built the same way on every rank (ranks = the
// processes the refit needs).
Result<RefitInputs> BuildRefitInputs(const RunArgs& args);

// The command line that makes a rank process do what `args` says ("run" and its flags).
std::vector<std::string> RunArgv(const RunArgs& args);

// The work of one rank (launcher variables must be set). Returns the process exit code.
int RunRank(const RunArgs& args);

// `ferry run`: launches ranks locally, or is one rank under a launcher. Returns the exit code.
int RunCommand(const RunArgs& args);

}  // namespace ferry::cli
