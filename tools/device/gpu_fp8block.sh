#!/usr/bin/env bash
# Block-scaled fp8 (128x128 blocks, vLLM's quant=fp8_block) on a machine with an NVIDIA GPU and no
# Bazel: the GPU block-quantize kernel test and the CPU reference test, then verified
# `ferry run --memory cuda` refits of Llama-3.1-8B at scale 1/4, Megatron TP2 (and TP4) -> vLLM TP2
# with the projections block-quantized (4 processes on GPU 0; Quantize ops as CUDA kernels, fp8 values
# and scales copied down and checked against the CPU reference), and the same refit in host
# memory (Quantize ops on the CPU's copy pool) for comparison; each with float32 scales, UE8M0
# scales (scale_fmt=ue8m0) and UE8M0 scales packed as DeepGEMM keeps them on SM100
# (scale_fmt=ue8m0_packed). On CUDA memory the direct reads quantize the whole 128x128 blocks they
# hold as they read (core/runtime/quantizing_read.h): the script fails unless they did, and runs
# each CUDA refit a second time with executor.quantizing_reads=false (every block through the
# twin) beside, which must hold more staging (twins the reads quantize whole take none).
#
# Usage: tools/device/gpu_fp8block.sh BIN_DIR [LIB_DIR]
#   BIN_DIR holds ferry, block_quantize_test, fp8_block_test and fp8_packed_scales_test (bazel build
#   //tools/cli:ferry //tests/core/cuda:block_quantize_test //tests/core/base:fp8_block_test
#   //tests/core/base:fp8_packed_scales_test); LIB_DIR (default
#   BIN_DIR/lib) shared libraries the machine lacks. Logs under $OUT (or /tmp/gpu_fp8block); exits
#   non-zero when a test failed or was skipped, or a refit failed.
set -u
BIN=$(cd "${1:?usage: gpu_fp8block.sh BIN_DIR [LIB_DIR]}" && pwd)
LIB=${2:-$BIN/lib}
. "$(dirname "$0")/prelude.sh"
device_setup gpu_fp8block "$LIB" || exit 1
for t in block_quantize_test fp8_block_test fp8_packed_scales_test; do
  timeout 120 "$BIN/$t" 2>&1 | tee "$LOG/$t.log" | grep -E '^\[ +(OK|SKIPPED|FAILED|PASSED) '
  [ "${PIPESTATUS[0]}" = 0 ] || FAILED=1
  if grep -q '^\[  SKIPPED \]' "$LOG/$t.log"; then FAILED=1; fi
done
# Source and destination: TP2 -> TP2 with each scale format, and TP4 -> TP2, whose row-parallel
# weights arrive as column slices of the destination's matrices.
for case in tp=2:vllm:tp=2,quant=fp8_block tp=2:vllm:tp=2,quant=fp8_block,scale_fmt=ue8m0 \
    tp=2:vllm:tp=2,quant=fp8_block,scale_fmt=ue8m0_packed tp=4:vllm:tp=2,quant=fp8_block; do
  src=megatron:${case%%:*}
  dst=${case#*:}
  for variant in cuda cuda-staged host; do
    memory=${variant%-staged}
    reads=true
    [ "$variant" = cuda-staged ] && reads=false
    echo "== refit --memory $memory, $src -> $dst, executor.quantizing_reads=$reads =="
    timeout 280 "$BIN/ferry" run --model llama-3.1-8b --scale 1/4 --src "$src" \
      --dst "$dst" --strategy reshard --memory $memory --verify --warmup 1 \
      --iterations 3 --timeout 260 --results "$LOG/refit.csv" \
      --set executor.quantizing_reads=$reads 2>&1 | grep -v '\.\.\. ' > "$LOG/one.log"
    [ "${PIPESTATUS[0]}" = 0 ] || FAILED=1
    cat "$LOG/one.log" | tee -a "$LOG/refit.log"
    quantized=$(grep 'of which quantized as read' "$LOG/one.log")
    peak=$(tail -1 "$LOG/refit.csv" | cut -d, -f10)  # peak staging a rank, bytes
    if [ "$variant" = cuda ] && ! echo "$quantized" | grep -qv ' 0 B *$'; then
      echo "FAILED: no direct read quantized as it read ($quantized)"
      FAILED=1
    fi
    # Twins whose every block the reads quantize take no staging: less than through the twins.
    if [ "$variant" = cuda ]; then quantizing_peak=$peak; fi
    if [ "$variant" = cuda-staged ] && [ "${quantizing_peak:-0}" -ge "${peak:-0}" ]; then
      echo "FAILED: peak staging ${quantizing_peak:-?} B with quantizing reads, not below ${peak:-?} B through the twins"
      FAILED=1
    fi
  done
done
cat "$LOG/refit.csv"
exit $FAILED
