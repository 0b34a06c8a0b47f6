#!/usr/bin/env bash
# The simulator checked against ferry's own GPU refits on the lent one-H200 machine (issue 28):
# per case, `ferry run --memory cuda` measures the verified reshard (8 processes on GPU 0, direct
# reads, cudaMalloc and VMM buffers), ipc_copy_ceiling measures the link the simulator needs (as
# many processes as the refit has receivers, the ranks that copy in a direct read, copying from
# each other's memory through CUDA IPC at once, each the bytes a receiver reads in the refit; for
# a refit into fp8 also converting or block-quantizing as they copy), and `ferry simulate` predicts
# the same case on a cluster file written from those measurements
# (tools/sim/clusters/h200-single.yaml with copy_bandwidth, and fp8_convert_bandwidth or
# quantize_bandwidth, measured). Nothing is fitted to the refits. Prints one table at the end.
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


# model scale src dst receivers (the destination's ranks: tp x dp) [dst dtype]
CASES=(
  "qwen3-30b-a3b 1/4 megatron:tp=2,ep=2 vllm:tp=2,dp=2 4"
  "llama-3.1-8b 1/4 megatron:tp=4 vllm:tp=1,dp=4 4"
  "llama-3.1-8b 1/4 megatron:tp=2,pp=2 vllm:tp=4 4"
  "llama-3.1-8b 1/4 megatron:tp=2 vllm:tp=2 2 fp8_e4m3"
  "llama-3.1-8b 1/4 megatron:tp=2 vllm:tp=2,quant=fp8_block 2"
)
COMMON=(--set executor.staging_budget=8GiB)

# "2.6 ms" / "812.0 us" / "1.771 s" -> milliseconds
to_ms() { awk -v v="$1" -v u="$2" 'BEGIN { f = u == "s" ? 1000 : u == "ms" ? 1 : 0.001; printf "%.3f", v * f }'; }

measure() {  # alloc csv, with the case's model scale src dst and dtype args
  timeout 300 "$BIN/ferry" run --model "$model" --scale "$scale" --src "$src" --dst "$dst" \
    "${DTYPE[@]}" --memory cuda --cuda-alloc "$1" --verify --transport tcp --strategy reshard \
    --warmup 2 --iterations 5 --timeout 280 --results "$2" "${COMMON[@]}" >> "$LOG/refit.log" 2>&1
}

# ceiling MODE PROCS BYTES -> "WRITTEN READ" (GB/s of all processes together)
ceiling() {
  timeout 120 "$BIN/ipc_copy_ceiling" --mode "$1" --procs "$2" --bytes "$3" --iters 20 2>&1 |
    tee -a "$LOG/ceiling.log" | sed -n 's/.*: \([0-9.]*\) GB\/s written, \([0-9.]*\) GB\/s read/\1 \2/p'
}

# cluster_file FILE: h200-single.yaml with the rates measured for this case.
cluster_file() {
  { grep -v '^copy_bandwidth:\|^fp8_convert_bandwidth:\|^quantize_bandwidth:' "$BIN/h200-single.yaml"
    echo "copy_bandwidth: ${copy_w}GB/s  # measured: ipc_copy_ceiling --mode ipc --procs $receivers --bytes $per_proc"
    case "$dst,${DTYPE[*]}" in
      *quant=fp8_block*)
        echo "quantize_bandwidth: ${quant_w}GB/s  # measured: ipc_copy_ceiling --mode ipc-quantize --procs $receivers --bytes $bf16_per_proc" ;;
      *fp8_e4m3*)
        echo "fp8_convert_bandwidth: $(awk -v w="$fp8_w" -v r="$fp8_r" 'BEGIN { printf "%.1f", (w + r) / 2 }')GB/s  # measured: ipc_copy_ceiling --mode ipc-fp8 --procs $receivers --bytes $bf16_per_proc, (written + read) / 2" ;;
    esac
  } > "$1"
}

for c in "${CASES[@]}"; do
  read -r model scale src dst receivers dtype <<< "$c"
  DTYPE=()
  [ -n "${dtype:-}" ] && DTYPE=(--dst-dtype "$dtype")
  name="$model@$scale ${src#megatron:} -> ${dst#vllm:}${dtype:+ $dtype}"
  tag=$(echo "$model-$scale-$src-$dst-${dtype:-}" | tr -c 'A-Za-z0-9-' '_')
  rm -f "$LOG/$tag.csv"
  if ! measure cudamalloc "$LOG/$tag.csv" || ! measure vmm "$LOG/$tag.csv"; then
    row "$name" FAILED "" "" "" "see refit.log"
    FAILED=1
    continue
  fi
  bytes=$(head -1 "$LOG/$tag.csv" | cut -d, -f4)
  per_proc=$(( (bytes / receivers + 255) / 256 * 256 ))
  # A refit into fp8 delivers about half the bf16 its receivers read.
  bf16_per_proc=$(( per_proc * 2 ))
  fp8_w=- fp8_r=- quant_w=-
  read -r copy_w _ <<< "$(ceiling ipc "$receivers" "$per_proc")"
  [ -n "${dtype:-}" ] && read -r fp8_w fp8_r <<< "$(ceiling ipc-fp8 "$receivers" "$bf16_per_proc")"
  case "$dst" in
    *quant=fp8_block*) read -r quant_w _ <<< "$(ceiling ipc-quantize "$receivers" "$bf16_per_proc")" ;;
  esac
  cluster_file "$LOG/h200-$tag.yaml"
  if ! timeout 300 "$BIN/ferry" simulate --model "$model" --scale "$scale" --src "$src" --dst "$dst" \
       "${DTYPE[@]}" --cluster "$LOG/h200-$tag.yaml" --no-baseline "${COMMON[@]}" > "$LOG/sim-$tag.txt" 2>&1; then
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
        "$((b >> 20)) MiB, IPC ceilings: copy $copy_w, fp8 $fp8_w written + $fp8_r read, quantize $quant_w written GB/s"
    alloc=VMM
  done < "$LOG/$tag.csv"
done

echo
echo "== sim_h200: $(head -1 "$LOG/gpu.txt") =="
printf '%-52s %10s %10s %10s %6s  %s\n' "case (reshard, direct reads)" "measured" "spread" "predicted" \
  "ratio" "(ms; spread: how far apart the ranks started, part of measured)"
print_rows
exit $FAILED
