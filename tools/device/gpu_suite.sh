#!/usr/bin/env bash
# The GPU suite of issue 25, for a machine with an NVIDIA GPU and no Bazel: the GPU tests, the
# batched-copy, checksum, convert and block-quantize benchmarks, the multi-process copy ceilings
# and `ferry run --memory cuda` refits verified by fragment checksums on the GPU (Qwen3-30B-A3B
# scaled, Megatron TP2xEP2 -> vLLM TP2xDP2, 8 processes on GPU 0), printed as one table at the end.
#
# Usage: tools/device/gpu_suite.sh BIN_DIR [SCALE...]
#   BIN_DIR holds ferry, batched_copy_test, batched_convert_test, block_quantize_test,
#   box_checksum_test, pattern_checksum_test, batched_copy_bench, box_checksum_bench,
#   batched_convert_bench, block_quantize_bench, ipc_copy_ceiling, executor_cuda_test,
#   executor_quantize_cuda_test and staging_arena_test (built elsewhere: bazel build -c opt
#   //tools/cli:ferry //tests/core/cuda:all //tests/core/runtime:executor_cuda_test
#   //tests/core/runtime:executor_quantize_cuda_test //tests/core/runtime:staging_arena_test
#   //tests/tools/cli:pattern_checksum_test), and optionally lib/ with shared libraries the machine
#   lacks (used only when ldd finds something missing). SCALEs default to 1/16.
# Writes its logs under $OUT (or /tmp/gpu_suite) and exits non-zero when a test or refit failed.
set -u
BIN=$(cd "${1:?usage: gpu_suite.sh BIN_DIR [SCALE...]}" && pwd)
shift
SCALES=("${@:-1/16}")
. "$(dirname "$0")/prelude.sh"
ROW_FORMAT='%-58s %s'
device_setup gpu_suite || exit 1

# GPU tests (gtest binaries; each skips visibly without a GPU).
for t in batched_copy_test batched_convert_test block_quantize_test box_checksum_test \
         pattern_checksum_test staging_arena_test executor_cuda_test executor_quantize_cuda_test; do
  if timeout 180 "$BIN/$t" > "$LOG/$t.log" 2>&1; then
    row "test $t" "passed ($(grep -c '^\[       OK' "$LOG/$t.log") ok, $(grep -c '^\[  SKIPPED' "$LOG/$t.log") skipped)"
  else
    row "test $t" "FAILED (see $t.log)"
    tail -20 "$LOG/$t.log"
    FAILED=1
  fi
done

# The kernel benchmarks, printed as they are.
timeout 120 "$BIN/batched_copy_bench" 2>&1 | tee "$LOG/batched_copy_bench.log"
timeout 120 "$BIN/box_checksum_bench" 2>&1 | tee "$LOG/box_checksum_bench.log"
timeout 120 "$BIN/batched_convert_bench" 2>&1 | tee "$LOG/batched_convert_bench.log"
timeout 120 "$BIN/block_quantize_bench" 2>&1 | tee "$LOG/block_quantize_bench.log"

# Ceilings with 8 processes (and 1 and 2 for reference), bytes per process about what each
# process of the refit delivers.
ceiling() {  # mode procs bytes -> GB/s
  timeout 120 "$BIN/ipc_copy_ceiling" --mode "$1" --procs "$2" --bytes "$3" --iters 20 2>&1 |
    tee -a "$LOG/ceiling.log" | sed -n 's/.*: \([0-9.]*\) GB\/s written.*/\1/p'
}

# The baseline gathers the whole model into one staging slot on rank 0 (3.6 GiB at scale 1/4):
# the staging budget is raised above the default 1 GiB for every variant alike.
refit() {  # scale transport strategy csv [ferry run args...] -> appends CSV rows to csv
  local scale=$1 transport=$2 strategy=$3 csv=$4
  shift 4
  timeout 300 "$BIN/ferry" run --model qwen3-30b-a3b --scale "$scale" --src megatron:tp=2,ep=2 \
    --dst vllm:tp=2,dp=2 --memory cuda --verify --transport "$transport" --strategy "$strategy" \
    --warmup 2 --iterations 5 --timeout 280 --set executor.staging_budget=8GiB --results "$csv" "$@" 2>&1 |
    grep -v '\.\.\. ' | tee -a "$LOG/refit.log"
  return "${PIPESTATUS[0]}"
}

for scale in "${SCALES[@]}"; do
  tag=${scale//\//_}
  rm -f "$LOG/refit_$tag.csv"
  if ! refit "$scale" tcp both "$LOG/refit_$tag.csv"; then
    row "refit $scale" "FAILED (see refit.log)"
    FAILED=1
    continue
  fi
  delivered=$(head -1 "$LOG/refit_$tag.csv" | cut -d, -f4)
  per_proc=$(( (delivered / 8 + 255) / 256 * 256 ))
  d2d1=$(ceiling d2d 1 $((per_proc * 8)))
  d2d8=$(ceiling d2d 8 "$per_proc")
  ipc2=$(ceiling ipc 2 $((per_proc * 4)))
  ipc4=$(ceiling ipc 4 $((per_proc * 2)))
  ipc8=$(ceiling ipc 8 "$per_proc")
  plain2=$(ceiling ipc-plain 2 $((per_proc * 4)))
  plain4=$(ceiling ipc-plain 4 $((per_proc * 2)))
  plain8=$(ceiling ipc-plain 8 "$per_proc")
  row "ceiling $scale: cudaMemcpy D2D, 1 process, $((per_proc * 8 >> 20)) MiB" "$d2d1 GB/s"
  row "ceiling $scale: cudaMemcpy D2D, 8 processes" "$d2d8 GB/s"
  row "ceiling $scale: CUDA-IPC, ferry's copy kernel, 2 / 4 / 8 processes" "$ipc2 / $ipc4 / $ipc8 GB/s"
  row "ceiling $scale: CUDA-IPC, plain copy kernel, 2 / 4 / 8 processes" "$plain2 / $plain4 / $plain8 GB/s"
  # The refit is compared with the higher of the two 8-process CUDA-IPC ceilings.
  ceil8=$(awk -v a="$ipc8" -v b="$plain8" 'BEGIN { print (a > b ? a : b) }')
  gb=""
  while IFS=, read -r label variant ranks bytes mean best gbps memcpy sent peak; do
    [ "$variant" = "gather-broadcast" ] && gb=$gbps
  done < "$LOG/refit_$tag.csv"
  while IFS=, read -r label variant ranks bytes mean best gbps memcpy sent peak; do
    ratio=$(awk -v a="$gbps" -v b="$ceil8" 'BEGIN { printf "%.0f%%", 100 * a / b }')
    vs_gb=$(awk -v a="$gbps" -v b="$gb" 'BEGIN { if (b > 0) printf "%.2fx", a / b }')
    row "refit $scale $variant ($((bytes >> 20)) MiB, 8 procs, verified)" \
        "$gbps GB/s, mean $(awk -v s="$mean" 'BEGIN { printf "%.2f ms", s * 1000 }'); $ratio of IPC ceiling; $vs_gb of gather-broadcast"
  done < "$LOG/refit_$tag.csv"
  # The same reshard with every buffer in 20 MiB cuMem (VMM) mappings, as PyTorch's
  # expandable_segments holds tensors: direct reads export and map the peers' mappings.
  rm -f "$LOG/refit_vmm_$tag.csv"
  if refit "$scale" tcp reshard "$LOG/refit_vmm_$tag.csv" --cuda-alloc vmm; then
    IFS=, read -r label variant ranks bytes mean best gbps rest < "$LOG/refit_vmm_$tag.csv"
    row "refit $scale reshard, VMM buffers ($((bytes >> 20)) MiB, 8 procs, verified)" \
        "$gbps GB/s, mean $(awk -v s="$mean" 'BEGIN { printf "%.2f ms", s * 1000 }'); $(awk -v a="$gbps" -v b="$ceil8" 'BEGIN { printf "%.0f%%", 100 * a / b }') of IPC ceiling"
  else
    row "refit $scale reshard, VMM buffers" "FAILED (see refit.log)"
    FAILED=1
  fi
done

echo
echo "== gpu_suite: $(head -1 "$LOG/gpu.txt") =="
print_rows
exit $FAILED
