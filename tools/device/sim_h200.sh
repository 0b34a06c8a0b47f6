#!/usr/bin/env bash
# The simulator checked against ferry's own GPU refits on the lent one-H200 machine (issue 28):
# per case, `ferry run --memory cuda` measures the verified reshard (8 processes on GPU 0, direct
# reads, cudaMalloc and VMM buffers), ipc_copy_ceiling measures the link the simulator needs (as
# many processes as the refit has receivers, the ranks that copy in a direct read, copying from
# each other's memory through CUDA IPC at once, each the bytes a receiver reads in the refit), and
# `ferry simulate` predicts the same case on a cluster file written from that
# measurement (tools/sim/clusters/h200-single.yaml with copy_bandwidth measured). Nothing is
# fitted to the refits. Prints one table at the end.
#
# Usage: tools/device/sim_h200.sh BIN_DIR
#   BIN_DIR holds ferry and ipc_copy_ceiling (bazel build -c opt //tools/cli:ferry
#   //tests/core/cuda:ipc_copy_ceiling), the cluster file as h200-single.yaml, and optionally
#   lib/ with shared libraries the machine lacks.
# Writes its logs and the measured cluster files under $OUT (or /tmp/sim_h200); exits non-zero
# when a refit or a simulation failed.
set -u
BIN=$(cd "${1:?usage: sim_h200.sh BIN_DIR}" && pwd)
. "$(dirname "$0")/prelude.sh"
ROW_FORMAT='%-52s %10s %10s %10s %6s  %s'
device_setup sim_h200 || exit 1


# model scale src dst receivers (the destination's ranks: tp x dp)
CASES=(
  "qwen3-30b-a3b 1/4 megatron:tp=2,ep=2 vllm:tp=2,dp=2 4"
  "llama-3.1-8b 1/4 megatron:tp=4 vllm:tp=1,dp=4 4"
  "llama-3.1-8b 1/4 megatron:tp=2,pp=2 vllm:tp=4 4"
)
COMMON=(--set executor.staging_budget=8GiB)

# "2.6 ms" / "812.0 us" / "1.771 s" -> milliseconds
to_ms() { awk -v v="$1" -v u="$2" 'BEGIN { f = u == "s" ? 1000 : u == "ms" ? 1 : 0.001; printf "%.3f", v * f }'; }

measure() {  # model scale src dst alloc csv
  timeout 300 "$BIN/ferry" run --model "$1" --scale "$2" --src "$3" --dst "$4" --memory cuda \
    --cuda-alloc "$5" --verify --transport tcp --strategy reshard --warmup 2 --iterations 5 \
    --timeout 280 --results "$6" "${COMMON[@]}" >> "$LOG/refit.log" 2>&1
}

for c in "${CASES[@]}"; do
  read -r model scale src dst receivers <<< "$c"
  name="$model@$scale ${src#megatron:} -> ${dst#vllm:}"
  tag=$(echo "$model-$scale-$src-$dst" | tr -c 'A-Za-z0-9-' '_')
  rm -f "$LOG/$tag.csv"
  if ! measure "$model" "$scale" "$src" "$dst" cudamalloc "$LOG/$tag.csv" ||
     ! measure "$model" "$scale" "$src" "$dst" vmm "$LOG/$tag.csv"; then
    row "$name" FAILED "" "" "" "see refit.log"
    FAILED=1
    continue
  fi
  bytes=$(head -1 "$LOG/$tag.csv" | cut -d, -f4)
  per_proc=$(( (bytes / receivers + 255) / 256 * 256 ))
  gbps=$(timeout 120 "$BIN/ipc_copy_ceiling" --mode ipc --procs "$receivers" --bytes "$per_proc" --iters 20 2>&1 |
         tee -a "$LOG/ceiling.log" | sed -n 's/.*: \([0-9.]*\) GB\/s written/\1/p')
  { grep -v '^copy_bandwidth:' "$BIN/h200-single.yaml"
    echo "copy_bandwidth: ${gbps}GB/s  # measured: ipc_copy_ceiling --mode ipc --procs $receivers --bytes $per_proc"
  } > "$LOG/h200-$tag.yaml"
  if ! timeout 300 "$BIN/ferry" simulate --model "$model" --scale "$scale" --src "$src" --dst "$dst" \
       --cluster "$LOG/h200-$tag.yaml" --no-baseline "${COMMON[@]}" > "$LOG/sim-$tag.txt" 2>&1; then
    row "$name" "" "" FAILED "" "see sim-$tag.txt"
    FAILED=1
    continue
  fi
  read -r value unit <<< "$(sed -n 's/^predicted time *\([0-9.]*\) \([a-z]*\).*/\1 \2/p' "$LOG/sim-$tag.txt")"
  predicted=$(to_ms "$value" "$unit")
  alloc=cudaMalloc  # the csv's first row; the second is VMM (measured in that order)
  while IFS=, read -r label variant ranks b mean best gbps_run memcpy sent staging spread rest; do
    measured=$(awk -v s="$mean" 'BEGIN { printf "%.3f", s * 1000 }')
    spread_ms=$(awk -v s="$spread" 'BEGIN { printf "%.3f", s * 1000 }')
    ratio=$(awk -v p="$predicted" -v m="$measured" 'BEGIN { printf "%.2f", p / m }')
    row "$name, $alloc" "$measured" "$spread_ms" "$predicted" "$ratio" \
        "$((b >> 20)) MiB, IPC ceiling $gbps GB/s"
    alloc=VMM
  done < "$LOG/$tag.csv"
done

echo
echo "== sim_h200: $(head -1 "$LOG/gpu.txt") =="
printf '%-52s %10s %10s %10s %6s  %s\n' "case (reshard, direct reads)" "measured" "spread" "predicted" \
  "ratio" "(ms; spread: how far apart the ranks started, part of measured)"
print_rows
exit $FAILED
