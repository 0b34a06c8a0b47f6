#!/usr/bin/env bash
# Refits that convert dtypes, over CUDA-enabled UCX on one GPU (issue 25): fp8 e4m3 destinations
# (per-tensor conversion) and block-scaled fp8 destinations (vLLM quant=fp8_block: bf16 twins
# delivered into device staging, then quantized), every byte through UCX moving CUDA memory
# (direct reads off, ucx.cuda=on), beside the same refits through GPU direct reads; each verified
# by GPU checksums against the CPU conversion reference. One line per refit.
#
# Usage: tools/device/ucx_cuda_convert.sh BIN_DIR UCX_DIR
#   BIN_DIR holds ferry (bazel build -c opt //tools/cli:ferry) and optionally lib/ with shared
#   libraries other than UCX's that the machine lacks; UCX_DIR is a UCX with CUDA support, as for
#   tools/device/ucx_cuda.sh (the unpacked libucx-cu13 wheel, or a prefix with lib/).
# Exits non-zero when a refit failed or did not verify.
set -u
BIN=$(cd "${1:?usage: ucx_cuda_convert.sh BIN_DIR UCX_DIR}" && pwd)
UCX=$(cd "${2:?usage: ucx_cuda_convert.sh BIN_DIR UCX_DIR}" && pwd)
[ -d "$UCX/libucx/lib" ] && UCX=$UCX/libucx
export LD_LIBRARY_PATH="$UCX/lib:$BIN/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export FERRY_REQUIRE_UCX_CUDA=1
. "$(dirname "$0")/prelude.sh"
device_setup ucx_cuda_convert || exit 1

run() {  # label ferry-run-args...
  local label=$1 out rc
  shift
  out=$(timeout 200 "$BIN/ferry" run "$@" --memory cuda --verify --strategy reshard --warmup 2 \
    --iterations 5 --timeout 180 2>&1)
  rc=$?
  local verified
  verified=$(echo "$out" | grep -E 'verified .* on [0-9]+ ranks' | head -1 | sed 's/  */ /g')
  [ $rc -eq 0 ] && [ -n "$verified" ] || FAILED=1
  printf '%-40s %s | %s |%s rc=%d\n' "$label" \
    "$(echo "$out" | grep -E 'refit time \(mean|bandwidth \(mean' | awk '{print $(NF-1), $NF}' | tr '\n' ' ')" \
    "$(echo "$out" | grep -E 'received over (ucx|direct)' | sed 's/  */ /g' | tr '\n' ' ')" \
    "$verified" "$rc"
}

Q="--model qwen3-30b-a3b --scale 1/16 --src megatron:tp=2,ep=2 --dst vllm:tp=2"
L="--model llama-3.1-8b --scale 1/4 --src megatron:tp=2 --dst vllm:tp=2,quant=fp8_block"
UCX_ONLY="--transport ucx --set executor.direct_intra_node=false --set ucx.cuda=on"
run "qwen3 1/16 bf16, ucx cuda" $Q $UCX_ONLY
run "qwen3 1/16 fp8_e4m3, ucx cuda" $Q $UCX_ONLY --dst-dtype fp8_e4m3
run "qwen3 1/16 fp8_e4m3, direct reads" $Q --dst-dtype fp8_e4m3
run "llama 1/4 fp8_block, ucx cuda" $L $UCX_ONLY --set executor.staging_budget=4GiB
run "llama 1/4 fp8_block, tcp + direct reads" $L --set executor.staging_budget=4GiB
exit $FAILED
