#!/usr/bin/env bash
# The simulator's fixed costs of an op measured on the lent GPU machine (issue 28: "values
# measured on our own machines, the H200 for kernels and launches"):
#   kernel_overhead  the GPU's time a small op beyond its bytes: launch_overhead_bench's executor
#                    copies (CopyStream::Launch of one small batched copy) queued back to back;
#   op_post_overhead the executor thread's time an op: a one-rank `ferry run --colocated` of
#                    Qwen3-30B-A3B at 1/256, gather-and-broadcast with a bucket a tensor, so that
#                    each of its ~19 k tensors of a few hundred bytes takes a Copy and an Unpack:
#                    best refit / ops, on CUDA buffers and on host buffers (as
#                    tools/sim/calibrate_host.py measures this host's value);
# then a CUDA refit killed before a destination rank's verdict and resumed by `ferry run
# --recover`, which moves only that rank's bytes (docs/faults.md).
#
# Usage: tools/device/sim_overheads.sh BIN_DIR
#   BIN_DIR holds ferry and launch_overhead_bench (bazel build -c opt //tools/cli:ferry
#   //tests/core/cuda:launch_overhead_bench), and optionally lib/ with shared libraries the machine
#   lacks. Logs under $OUT (or /tmp/sim_overheads); exits non-zero when a measurement failed.
set -u
BIN=$(cd "${1:?usage: sim_overheads.sh BIN_DIR}" && pwd)
. "$(dirname "$0")/prelude.sh"
ROW_FORMAT='%-58s %s'
device_setup sim_overheads || exit 1

for bytes in 256 4096; do
  if timeout 120 "$BIN/launch_overhead_bench" "$bytes" > "$LOG/launch_$bytes.txt" 2>&1; then
    cat "$LOG/launch_$bytes.txt"
    while IFS= read -r line; do
      row "${line%%cpu*} ($bytes B)" "cpu${line#*cpu}"
    done < <(sed -n 's/^launch_overhead: //p' "$LOG/launch_$bytes.txt")
  else
    cat "$LOG/launch_$bytes.txt"
    row "launch_overhead_bench $bytes B" FAILED
    FAILED=1
  fi
done

# The posting-cost refit, as tools/sim/calibrate_host.py's POST_CASE and POST_SETTINGS.
post() {  # memory
  local csv="$LOG/post-$1.csv" log="$LOG/post-$1.log"
  rm -f "$csv"
  if ! timeout 300 "$BIN/ferry" run --model qwen3-30b-a3b --scale 1/256 --src megatron:tp=1 --dst vllm:tp=1 \
       --colocated --strategy gather-broadcast --set planner.bucket_bytes=1 --memory "$1" --verify \
       --iterations 5 --warmup 1 --timeout 280 --results "$csv" > "$log" 2>&1; then
    tail -5 "$log"
    row "executor per op, $1 buffers" FAILED
    FAILED=1
    return
  fi
  local ops best
  ops=$(sed -n 's/.*planned gather-broadcast *\([0-9]*\) ops, 0 messages.*/\1/p' "$log")
  best=$(cut -d, -f6 "$csv" | head -1)
  if [ -z "$ops" ] || [ -z "$best" ]; then
    row "executor per op, $1 buffers" "FAILED: no op count or no time (see $log)"
    FAILED=1
    return
  fi
  row "executor per op, $1 buffers" "$(awk -v b="$best" -v n="$ops" \
    'BEGIN { printf "%.2f us (best refit %.2f ms / %d local ops)", b / n * 1e6, b * 1e3, n }')"
}
post cuda
post host

# A CUDA refit whose destination rank 5 dies before its verdict on refit 2: resumed, it moves
# only rank 5's bytes (Megatron TP2 x EP2 on ranks 0-3, vLLM TP2 on ranks 4-5).
if timeout 300 "$BIN/ferry" run --model qwen3-30b-a3b --scale 1/16 --src megatron:tp=2,ep=2 --dst vllm:tp=2 \
     --memory cuda --verify --iterations 3 --inject-fault 5:kill:verify=2 --recover --timeout 280 \
     > "$LOG/resume.log" 2>&1; then
  row "CUDA refit resumed after rank 5 died" "$(sed -n 's/.*resumed: \(delivered .*\), the rest.*/\1/p' "$LOG/resume.log")"
else
  tail -20 "$LOG/resume.log"
  row "CUDA refit resumed after rank 5 died" "FAILED (see resume.log)"
  FAILED=1
fi
grep -E "resuming at|resumed:|verified" "$LOG/resume.log"
print_rows
exit $FAILED
