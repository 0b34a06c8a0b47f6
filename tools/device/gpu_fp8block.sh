#!/usr/bin/env bash
# Block-scaled fp8 (128x128 blocks, vLLM's quant=fp8_block) on a machine with an NVIDIA GPU and no
# Bazel: the GPU block-quantize kernel test against the CPU reference, then the CPU reference test.
#
# Usage: tools/device/gpu_fp8block.sh BIN_DIR
#   BIN_DIR holds block_quantize_test and fp8_block_test (bazel build
#   //tests/core/cuda:block_quantize_test //tests/core/base:fp8_block_test), and optionally lib/
#   with shared libraries the machine lacks. Logs under $OUT (or /tmp/gpu_fp8block); exits
#   non-zero when a test failed or was skipped.
set -u
BIN=$(cd "${1:?usage: gpu_fp8block.sh BIN_DIR}" && pwd)
LOG=${OUT:-/tmp/gpu_fp8block}
mkdir -p "$LOG"
if ldd "$BIN/block_quantize_test" | grep -q 'not found'; then
  export LD_LIBRARY_PATH="$BIN/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "date: $(date -u +%Y-%m-%dT%H:%MZ)"
FAILED=0
for t in block_quantize_test fp8_block_test; do
  timeout 120 "$BIN/$t" 2>&1 | tee "$LOG/$t.log" | grep -E '^\[ +(OK|SKIPPED|FAILED|PASSED) '
  [ "${PIPESTATUS[0]}" = 0 ] || FAILED=1
  if grep -q '^\[  SKIPPED \]' "$LOG/$t.log"; then FAILED=1; fi
done
exit $FAILED
