#!/usr/bin/env bash
# The dtype-conversion runs of issue 25 on a machine with an NVIDIA GPU and no Bazel: the GPU
# convert kernel test, then verified `ferry run --memory cuda` refits of Qwen3-30B-A3B scaled,
# Megatron TP2xEP2 -> vLLM TP2 (4 -> 2 ranks, 6 processes on GPU 0, GPU direct reads through CUDA
# IPC) with the destination's weights as fp8 e4m3, as fp32, and unconverted for comparison; then
# nemotron-h-8b scaled, Megatron TP2 -> vLLM TP1, whose Mamba A the GPU writes as fp32
# -exp(A_log) (checked against the GPU's own expf by fragment checksums).
#
# Usage: tools/device/gpu_convert.sh BIN_DIR [SCALE]
#   BIN_DIR holds ferry and batched_convert_test (bazel build //tools/cli:ferry
#   //tests/core/cuda:batched_convert_test), and optionally lib/ with shared libraries the machine
#   lacks. SCALE defaults to 1/16. Logs under $OUT (or /tmp/gpu_convert); exits non-zero when the
#   test or a refit failed.
set -u
BIN=$(cd "${1:?usage: gpu_convert.sh BIN_DIR [SCALE]}" && pwd)
SCALE=${2:-1/16}
. "$(dirname "$0")/prelude.sh"
device_setup gpu_convert || exit 1
timeout 120 "$BIN/batched_convert_test" 2>&1 | tee "$LOG/batched_convert_test.log" | grep -E '^\[ +(OK|SKIPPED|FAILED|PASSED) '
[ "${PIPESTATUS[0]}" = 0 ] || FAILED=1
for dtype in fp8_e4m3 fp32 ""; do
  echo "== refit --dst-dtype ${dtype:-(none)} =="
  timeout 200 "$BIN/ferry" run --model qwen3-30b-a3b --scale "$SCALE" --src megatron:tp=2,ep=2 \
    --dst vllm:tp=2 ${dtype:+--dst-dtype $dtype} --memory cuda --verify --warmup 2 --iterations 5 \
    --timeout 180 --results "$LOG/refit.csv" 2>&1 | grep -v '\.\.\. ' | tee -a "$LOG/refit.log"
  [ "${PIPESTATUS[0]}" = 0 ] || FAILED=1
done
echo "== refit nemotron-h-8b: Mamba A = -exp(A_log) =="
timeout 200 "$BIN/ferry" run --model nemotron-h-8b --scale "$SCALE" --src megatron:tp=2 --dst vllm:tp=1 \
  --memory cuda --verify --warmup 1 --iterations 2 --timeout 180 --results "$LOG/refit.csv" 2>&1 |
  grep -v '\.\.\. ' | tee -a "$LOG/refit.log"
[ "${PIPESTATUS[0]}" = 0 ] || FAILED=1
cat "$LOG/refit.csv"
exit $FAILED
