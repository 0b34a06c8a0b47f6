#!/usr/bin/env bash
# Refits at sizes a trainer really holds, on one GPU: Llama-3.1-70B at half width (33 GiB each
# side), Megatron TP2 with the distributed optimizer's contiguous parameter buffer (one 16.4 GiB
# buffer a source rank, so every offset past the first 4 GiB is exercised) -> vLLM TP2, 4 processes
# on GPU 0, each refit verified by GPU checksums: GPU direct reads from cudaMalloc memory and from
# 20 MiB VMM mappings (PyTorch's expandable segments), the same through tcp (pinned staging), into
# fp8 e4m3 weights (a saturating cast, `--dst-dtype fp8_e4m3`: the direct reads convert, and
# again with the senders packing the fp8 bytes, executor.convert_on_sender=always), into
# vLLM's block-scaled fp8 weights (the direct reads quantizing the whole 128x128 blocks they hold
# as they read, and again with executor.quantizing_reads=false, every block staged in a twin), and
# the gather-and-broadcast baseline through tcp; one table at the end.
#
# Usage: tools/device/large_refit.sh BIN_DIR [SCALE] [--only LIST]
#   BIN_DIR holds ferry (bazel build -c opt //tools/cli:ferry) and optionally lib/ with shared
#     libraries the machine lacks (used only when ldd finds one missing).
#   SCALE   the model's width factor (default 1/2: 33 GiB delivered; 1/4 fits a GPU of 40 GiB).
#   --only LIST  only these cases, comma-separated: direct, vmm, tcp, e4m3, e4m3-packed, fp8,
#                fp8-staged, baseline.
#   MEMORY=host in the environment runs the same refits on host memory (a check of the script on a
#   machine without a GPU, at a small SCALE).
# Writes its logs under $OUT (or /tmp/large_refit); exits non-zero when a refit failed.
set -u
BIN=$(cd "${1:?usage: large_refit.sh BIN_DIR [SCALE] [--only LIST]}" && pwd)
shift
SCALE=1/2
if [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; then SCALE=$1; shift; fi
ONLY=direct,vmm,tcp,e4m3,e4m3-packed,fp8,fp8-staged,baseline
if [ "${1:-}" = "--only" ]; then ONLY=${2:?--only needs a list}; fi
MEMORY=${MEMORY:-cuda}
. "$(dirname "$0")/prelude.sh"
ROW_FORMAT='%-62s %s'
device_setup large_refit || exit 1

wanted() { case ",$ONLY," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }

# refit CASE DST STRATEGY ITERATIONS [ferry run args...]: one verified refit variant, its row.
refit() {
  local name=$1 dst=$2 strategy=$3 iterations=$4
  shift 4
  wanted "$name" || return 0
  local csv="$LOG/$name.csv"
  rm -f "$csv"
  local start=$SECONDS
  if timeout 540 "$BIN/ferry" run --model llama-3.1-70b --scale "$SCALE" \
      --src megatron:tp=2,buffers=distopt --dst "$dst" --memory "$MEMORY" --verify \
      --transport tcp --strategy "$strategy" --warmup 1 --iterations "$iterations" --timeout 530 \
      --results "$csv" "$@" > "$LOG/$name.log" 2>&1; then
    local label variant ranks bytes mean best gbps rest
    IFS=, read -r label variant ranks bytes mean best gbps rest < "$csv"
    # The last field: bytes received per path (transport or direct_read) in the last refit.
    row "$name: $variant, $(awk -v b="$bytes" 'BEGIN { printf "%.1f GiB", b / 2^30 }') verified" \
        "mean $(awk -v s="$mean" 'BEGIN { printf "%.1f ms", s * 1000 }'), best $(awk -v s="$best" 'BEGIN { printf "%.1f ms", s * 1000 }'), $gbps GB/s ($((SECONDS - start)) s in all; bytes by path: ${rest##*,})"
  else
    row "$name" "FAILED after $((SECONDS - start)) s (see $name.log)"
    tail -15 "$LOG/$name.log"
    FAILED=1
  fi
  grep -h "plain .*memcpy\|verified\|quantized as read\|packed by senders" "$LOG/$name.log" | head -5
}

refit direct vllm:tp=2 reshard 3
refit vmm vllm:tp=2 reshard 3 --cuda-alloc vmm
refit tcp vllm:tp=2 reshard 2 --set executor.direct_intra_node=false --set executor.staging_budget=4GiB
refit e4m3 vllm:tp=2 reshard 3 --dst-dtype fp8_e4m3
# The same with the sender packing the fp8 bytes for the receiver to read (executor.convert_on_sender):
# what packing costs where both ranks share a GPU.
refit e4m3-packed vllm:tp=2 reshard 3 --dst-dtype fp8_e4m3 --set executor.convert_on_sender=always
refit fp8 vllm:tp=2,quant=fp8_block reshard 2
refit fp8-staged vllm:tp=2,quant=fp8_block reshard 2 --set executor.quantizing_reads=false
# The baseline gathers each 1.6 GiB bucket into two bucket buffers a rank.
refit baseline vllm:tp=2 gather-broadcast 1 --set executor.staging_budget=8GiB

echo
echo "== large_refit: $(head -1 "$LOG/gpu.txt"), llama-3.1-70b at $SCALE, $MEMORY memory =="
print_rows
exit $FAILED
