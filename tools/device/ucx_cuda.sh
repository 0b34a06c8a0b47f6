#!/usr/bin/env bash
# UCX with CUDA memory on one GPU (issue 25), with a CUDA-enabled UCX that the machine need not
# have installed (the PyPI wheel libucx-cu13, unpacked): what that UCX offers for CUDA (ucx_info),
# the ucx transport's GPU test, verified `ferry run --memory cuda --transport ucx` refits of
# Qwen3-30B-A3B scaled (Megatron TP2xEP2 -> vLLM TP2xDP2, 8 processes on GPU 0, direct reads off so
# every byte goes through UCX) with UCX moving CUDA memory (ucx.cuda=on) and, for reference,
# staging it through pinned host memory (ucx.cuda=off), and UCX's own `ucx_perftest -m cuda` (tag
# bandwidth, 2 processes on GPU 0 over loopback) beside them; one table at the end.
#
# Usage: tools/device/ucx_cuda.sh BIN_DIR UCX_DIR [SCALE]
#   BIN_DIR holds ferry and ucx_cuda_gpu_test (bazel build -c opt //tools/cli:ferry
#   //tests/transports/ucx:ucx_cuda_gpu_test) and optionally lib/ with shared libraries other
#   than UCX's that the machine lacks.
#   UCX_DIR is a UCX installation: the unpacked wheel (holding libucx/ and libucx_cu13.libs/) or a
#   prefix with lib/ (libucp.so.0 and its ucx/ module directory) and bin/ (ucx_info, ucx_perftest).
#   SCALE defaults to 1/4.
# ferry loads whichever libucp.so.0 comes first in LD_LIBRARY_PATH, and UCX loads its transport
# modules from the ucx/ directory next to the libucs it loaded. Writes logs under $OUT (or
# /tmp/ucx_cuda); exits non-zero when the test, a refit or the perftest failed.
set -u
BIN=$(cd "${1:?usage: ucx_cuda.sh BIN_DIR UCX_DIR [SCALE]}" && pwd)
UCX=$(cd "${2:?usage: ucx_cuda.sh BIN_DIR UCX_DIR [SCALE]}" && pwd)
SCALE=${3:-1/4}
[ -d "$UCX/libucx/lib" ] && UCX=$UCX/libucx
export LD_LIBRARY_PATH="$UCX/lib:$BIN/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export FERRY_REQUIRE_UCX_CUDA=1
. "$(dirname "$0")/prelude.sh"
ROW_FORMAT='%-62s %s'
device_setup ucx_cuda || exit 1
echo "ferry loads: $(ldd "$BIN/ferry" | awk '/libucp/{print $3}')"

# What this UCX offers for CUDA memory.
"$UCX/bin/ucx_info" -v > "$LOG/ucx_info_v.txt" 2>&1
"$UCX/bin/ucx_info" -d > "$LOG/ucx_info_d.txt" 2>&1
grep -i cuda "$LOG/ucx_info_d.txt" | tee "$LOG/ucx_info_cuda.txt"
version=$(sed -n 's/^# Library version: //p' "$LOG/ucx_info_v.txt")
cuda_tls=$(sed -n 's/^#[[:space:]]*Transport: \(cuda[a-z_]*\|gdr_copy\)$/\1/p' "$LOG/ucx_info_d.txt" | sort -u | tr '\n' ' ')
row "ucx_info: UCX $version, CUDA transports" "${cuda_tls:-none}"
[ -n "$cuda_tls" ] || FAILED=1

# The transport's GPU test (fails, rather than skips, when this UCX has no CUDA).
if timeout 150 "$BIN/ucx_cuda_gpu_test" > "$LOG/ucx_cuda_gpu_test.log" 2>&1; then
  row "test ucx_cuda_gpu_test" "passed ($(grep -c '^\[       OK' "$LOG/ucx_cuda_gpu_test.log") ok, $(grep -c '^\[  SKIPPED' "$LOG/ucx_cuda_gpu_test.log") skipped)"
else
  row "test ucx_cuda_gpu_test" "FAILED (see ucx_cuda_gpu_test.log)"
  tail -30 "$LOG/ucx_cuda_gpu_test.log"
  FAILED=1
fi
grep "ucx links of rank 0" "$LOG/ucx_cuda_gpu_test.log" | head -1

# Verified refits; every byte goes through UCX (direct reads off).
refit() {  # name cuda-mode -> row
  local csv="$LOG/refit_$1.csv"
  rm -f "$csv"
  timeout 240 "$BIN/ferry" run --model qwen3-30b-a3b --scale "$SCALE" --src megatron:tp=2,ep=2 \
    --dst vllm:tp=2,dp=2 --memory cuda --verify --transport ucx --strategy reshard \
    --set executor.direct_intra_node=false --set "ucx.cuda=$2" --warmup 2 --iterations 5 \
    --timeout 220 --results "$csv" > "$LOG/refit_$1.log" 2>&1
  local rc=$?
  grep -E "links of rank 0|bit-exact|verified|refit time|GB/s|rror" "$LOG/refit_$1.log" | grep -v '\.\.\. '
  if [ $rc -ne 0 ] || [ ! -s "$csv" ]; then
    row "refit $SCALE ucx.cuda=$2 (8 procs)" "FAILED (rc $rc, see refit_$1.log)"
    FAILED=1
    return
  fi
  IFS=, read -r label variant ranks bytes mean best gbps rest < "$csv"
  row "refit $SCALE ucx.cuda=$2 ($((bytes >> 20)) MiB, $ranks procs, verified)" \
      "$gbps GB/s, mean $(awk -v s="$mean" 'BEGIN { printf "%.2f ms", s * 1000 }')"
}
refit cuda on
refit pinned off

# UCX's own tag bandwidth between two processes on GPU 0 (server, then client over loopback).
perftest() {  # bytes -> row
  local port=$((20000 + RANDOM % 20000)) out="$LOG/perftest_$1.log"
  timeout 120 "$UCX/bin/ucx_perftest" -p "$port" > "$LOG/perftest_server_$1.log" 2>&1 &
  local server=$!
  sleep 2
  timeout 100 "$UCX/bin/ucx_perftest" 127.0.0.1 -p "$port" -t tag_bw -m cuda -s "$1" -n 200 \
    -w 20 > "$out" 2>&1
  local rc=$?
  [ $rc -eq 0 ] || kill "$server" 2>/dev/null
  wait "$server"
  local mibs
  mibs=$(awk '/Final:/ { print $7 }' "$out")
  if [ $rc -ne 0 ] || [ -z "$mibs" ]; then
    row "ucx_perftest -t tag_bw -m cuda -s $1 (2 procs)" "FAILED (rc $rc, see $(basename "$out"))"
    tail -20 "$out"
    FAILED=1
    return
  fi
  row "ucx_perftest -t tag_bw -m cuda -s $(( $1 >> 20 )) MiB (2 procs)" \
      "$(awk -v m="$mibs" 'BEGIN { printf "%.2f GB/s", m * 1048576 / 1e9 }')"
}
perftest $((4 << 20))
perftest $((64 << 20))

echo
echo "== ucx_cuda: $(head -1 "$LOG/gpu.txt") =="
print_rows
exit $FAILED
