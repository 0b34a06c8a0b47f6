#!/usr/bin/env bash
# The NCCL transport on one GPU (issue 26): its GPU tests (one-rank send/recv to self, abort, a
# stopped peer during init), the CUDA executor's tests, and verified one-rank `ferry run --memory
# cuda` refits whose chunks travel through NCCL send/recv to self (planner.same_rank=transport),
# with the NCCL of the machine and, where torch brings one, the nvidia-nccl wheel's.
#
# Usage: tools/device/nccl_suite.sh BIN_DIR [SCALE]
#   BIN_DIR holds ferry, nccl_transport_gpu_test, nccl_abort_gpu_test, executor_cuda_test and
#   staging_arena_test (bazel build -c opt //tools/cli:ferry //tests/transports/nccl:all
#   //tests/core/runtime:executor_cuda_test //tests/core/runtime:staging_arena_test), and
#   optionally lib/ with shared libraries the machine lacks. SCALE defaults to 1/16.
# Writes logs under $OUT (or /tmp/nccl_suite); exits non-zero when a test or refit failed.
set -u
BIN=$(cd "${1:?usage: nccl_suite.sh BIN_DIR [SCALE]}" && pwd)
SCALE=${2:-1/16}
. "$(dirname "$0")/prelude.sh"
device_setup nccl_suite || exit 1

# The libnccl.so.2 files this machine has: the linker's (ldconfig), the toolkit's, a wheel's.
LIBS=$( (ldconfig -p | awk '/libnccl\.so\.2 /{print $NF}';
         ls /usr/local/cuda/lib64/libnccl.so.2 /usr/lib/x86_64-linux-gnu/libnccl.so.2 2>/dev/null;
         python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib", "libnccl.so.2"))' 2>/dev/null
        ) | xargs -r -n1 realpath 2>/dev/null | sort -u)
echo "NCCL libraries found: ${LIBS:-none}"

for t in nccl_transport_gpu_test nccl_abort_gpu_test staging_arena_test executor_cuda_test; do
  if timeout 120 "$BIN/$t" > "$LOG/$t.log" 2>&1; then
    echo "test $t: passed ($(grep -c '^\[       OK' "$LOG/$t.log") ok, $(grep -c '^\[  SKIPPED' "$LOG/$t.log") skipped)"
  else
    echo "test $t: FAILED"
    FAILED=1
  fi
  grep -E "communicator ready|Abort returned|init with a stopped peer|leaked" "$LOG/$t.log"
  tail -5 "$LOG/$t.log"
done

# One rank, one GPU: Megatron TP1 -> vLLM TP1 of a scaled Llama, every chunk packed into device
# staging, sent to itself through NCCL and unpacked; then the default local copies for reference.
refit() {  # name library extra-settings...
  local name=$1 lib=$2
  shift 2
  timeout 180 "$BIN/ferry" run --model llama-3.1-8b --scale "$SCALE" --src megatron:tp=1 \
    --dst vllm:tp=1 --colocated --memory cuda --transport tcp --verify --iterations 5 \
    --set "nccl.library=$lib" "$@" > "$LOG/refit_$name.log" 2>&1 || FAILED=1
  echo "refit $name ($lib):"
  grep -E "planned reshard|transports in use|bit-exact|refit time \(mean\)|sent by transports|Error|error|FAILED" "$LOG/refit_$name.log"
}
n=0
for lib in $LIBS; do
  n=$((n + 1))
  refit "nccl$n" "$lib" --set transport.same_rank=nccl --set planner.same_rank=transport
done
refit copy "$(echo "$LIBS" | head -1)"
exit $FAILED
