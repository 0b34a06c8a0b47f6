#!/usr/bin/env bash
# ferry between GPU groups of one host (issue 29), side by side in one run: the NVLink ceiling
# (cudaMemcpyPeer), ferry's verified refits over GPU direct reads (CUDA IPC), NCCL and CUDA-enabled
# UCX (cases into fp8 also with every receiver converting as it reads, executor.convert_on_sender=
# never, beside the senders packing), the gather-and-broadcast baseline over NCCL, NVIDIA's NCCL
# M2N Reshard on the tensors it can express (with ferry on exactly those tensors beside it), and a
# GPU rank killed mid-refit over NCCL and over direct reads; one table at the end.
#
# Usage: tools/device/multi_gpu.sh BIN_DIR [--scale S] [--ucx UCX] [--m2n SITE] [--nccl-library LIB]
#                                  [--nccl-src TAR] [--iterations N] [--only LIST]
#   BIN_DIR holds ferry and peer_copy_ceiling (bazel build -c opt //tools/cli:ferry
#     //tests/core/cuda:peer_copy_ceiling), optionally lib/ with shared libraries the machine lacks;
#     tools/device/pack_multi_gpu.sh makes it, with the archives below.
#   --scale S      shrink the models (default 1: full size; a one-GPU machine gets 1/8).
#   --ucx UCX      a CUDA-enabled UCX: the libucx-cu13 wheel unpacked (as tools/device/ucx_cuda.sh
#                  takes it) or its .tar.xz; without it the UCX rows are skipped, saying so.
#   --m2n SITE     a Python site directory, or its .tar.xz, holding nccl-extensions 0.1.0, nccl4py,
#                  cuda-core and cuda-pathfinder; without it the M2N rows are skipped, saying so.
#   --nccl-library LIB  libnccl.so.2 >= 2.30.5 for M2N (and ferry's NCCL rows) where the machine's
#                  NCCL is older; --nccl-src TAR instead builds one from NVIDIA/nccl's source here
#                  for this GPU's architecture, in the background from the start (about 8 minutes
#                  on 16 cores); the M2N rows wait for it.
#   --only LIST    run only these parts, comma-separated: ceiling, kill, and case names (below);
#                  the full run exceeds one 10-minute device command at full scale.
# Cases, by the number of GPUs N (rank r runs on GPU r mod N; NCCL and M2N need a GPU a rank, so on
# fewer GPUs than ranks they are skipped and the refits share GPUs over direct reads and UCX):
#   N >= 8: Qwen3-30B-A3B Megatron TP2xPP2 -> vLLM TP2xDP2 (4 -> 4 GPUs), Megatron TP2 -> vLLM
#           TP2xDP3 (2 -> 6), Llama-3.1-8B Megatron TP2xPP2 -> vLLM TP4 into fp8 e4m3 (fused
#           qkv_proj/gate_up_proj, 4 -> 4), Qwen3-30B-A3B Megatron TP4xEP2 (DP2) -> vLLM TP4xDP2 on the
#           same 8 GPUs (colocated);
#   N = 4..7: the same shapes halved (2 -> 2, 1 -> 3, 2 -> 2 fp8, 4 colocated);
#   N = 2..3: 1 -> 1 and 2 colocated; N = 1: the N >= 8 cases, every rank on GPU 0, and one rank
#           refitting itself (Megatron TP1 -> vLLM TP1 colocated), where NCCL and M2N can run.
# The ceiling a case is compared with: disjoint groups, min(sources, destinations) x one pair's
# cudaMemcpyPeer rate; colocated, N x what a GPU sends with every pair copying at once; one GPU,
# its device-to-device copy.
# Writes logs under $OUT (or /tmp/multi_gpu); exits non-zero when anything ran and failed.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
BIN=$(cd "${1:?usage: multi_gpu.sh BIN_DIR [options]}" && pwd)
shift
SCALE="" UCX="" M2N="" NCCL_LIB="" NCCL_SRC="" ITER=5 ONLY=""
while [ $# -gt 0 ]; do
  case $1 in
    --scale) SCALE=$2 ;;
    --ucx) UCX=$(realpath "$2") ;;
    --m2n) M2N=$(realpath "$2") ;;
    --nccl-library) NCCL_LIB=$(realpath "$2") ;;
    --nccl-src) NCCL_SRC=$(realpath "$2") ;;
    --iterations) ITER=$2 ;;
    --only) ONLY=",$2," ;;
    *) echo "multi_gpu: unknown option $1" >&2; exit 2 ;;
  esac
  shift 2
done
wanted() { [ -z "$ONLY" ] || [[ "$ONLY" == *",$1,"* ]]; }
unpacked() {  # DIR or DIR.tar.xz -> a directory holding it
  if [[ "$1" == *.tar.xz ]]; then
    local dir=/tmp/multi_gpu_unpacked/$(basename "$1" .tar.xz)
    [ -d "$dir" ] || { mkdir -p "$dir" && tar -C "$dir" -xJf "$1"; } || return 1
    echo "$dir"
  else
    echo "$1"
  fi
}
[ -n "$UCX" ] && { UCX=$(unpacked "$UCX") || exit 2; }
[ -n "$M2N" ] && { M2N=$(unpacked "$M2N") || exit 2; }
. "$(dirname "$0")/prelude.sh"
ROW_FORMAT='%-66s %s'
device_setup multi_gpu || exit 1
N=$(nvidia-smi -L | grep -c '^GPU')
nvidia-smi topo -m > "$LOG/topo.txt" 2>&1
echo "GPUs: $N"
[ -n "$SCALE" ] || { [ "$N" -ge 2 ] && SCALE=1 || SCALE=1/8; }
# ferry's NCCL rows use --nccl-library, else the machine's NCCL (not one still being built).
NCCL_SET=()
[ -n "$NCCL_LIB" ] && NCCL_SET=(--set "nccl.library=$NCCL_LIB")
NCCL_BUILD_PID=""
if [ -n "$NCCL_SRC" ] && [ -z "$NCCL_LIB" ]; then
  arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)
  mkdir -p /tmp/multi_gpu_nccl && tar -C /tmp/multi_gpu_nccl -xzf "$NCCL_SRC"
  (cd /tmp/multi_gpu_nccl && make -j"$(( $(nproc) > 4 ? $(nproc) - 4 : 1 ))" src.build \
     NVCC_GENCODE="-gencode=arch=compute_$arch,code=sm_$arch" > "$LOG/nccl_build.log" 2>&1) &
  NCCL_BUILD_PID=$!
  NCCL_LIB=/tmp/multi_gpu_nccl/build/lib/libnccl.so.2
  echo "building NCCL for sm_$arch in the background (nccl_build.log)"
fi

# 1. The ceiling (the cases compare with it, so it runs whenever a case does).
timeout 300 "$BIN/peer_copy_ceiling" --modes pair,ring,all,d2d --bytes 1073741824 --iters 20 \
  2>&1 | tee "$LOG/ceiling.txt"
rate() { awk -v m="$1" -v f="$2" '$1 == m { for (i = 1; i <= NF; ++i) if ($i == "GB/s") { n++; if (n == f) print $(i - 1) } }' "$LOG/ceiling.txt"; }
PAIR=$(rate pair 1) ALL_PER_GPU=$(rate all 2) D2D=$(rate d2d 2)
row "ceiling: cudaMemcpyPeer one pair / all pairs (a GPU) / D2D (a GPU)" \
    "${PAIR:-n/a} / ${ALL_PER_GPU:-n/a} / ${D2D:-n/a} GB/s"

case_list() {
  if [ "$N" -ge 8 ] || [ "$N" -eq 1 ]; then
    echo "qwen-4to4|qwen3-30b-a3b|megatron:tp=2,pp=2|vllm:tp=2,dp=2|"
    echo "qwen-2to6|qwen3-30b-a3b|megatron:tp=2|vllm:tp=2,dp=3|"
    echo "llama-4to4-fp8|llama-3.1-8b|megatron:tp=2,pp=2|vllm:tp=4|--dst-dtype fp8_e4m3"
    echo "qwen-8-colocated|qwen3-30b-a3b|megatron:tp=4,ep=2|vllm:tp=4,dp=2|--colocated"
    [ "$N" -eq 1 ] && echo "qwen-1-colocated|qwen3-30b-a3b|megatron:tp=1|vllm:tp=1|--colocated"
  elif [ "$N" -ge 4 ]; then
    echo "qwen-2to2|qwen3-30b-a3b|megatron:tp=2|vllm:tp=1,dp=2|"
    echo "qwen-1to3|qwen3-30b-a3b|megatron:tp=1|vllm:tp=1,dp=3|"
    echo "llama-2to2-fp8|llama-3.1-8b|megatron:tp=2|vllm:tp=2|--dst-dtype fp8_e4m3"
    echo "qwen-4-colocated|qwen3-30b-a3b|megatron:tp=2,pp=2|vllm:tp=2,dp=2|--colocated"
  else
    echo "qwen-1to1|qwen3-30b-a3b|megatron:tp=1|vllm:tp=1|"
    echo "qwen-2-colocated|qwen3-30b-a3b|megatron:tp=2|vllm:tp=1,dp=2|--colocated"
  fi
}

ranks_of() {  # model spec -> the ranks ferry's layout of it has (Megatron derives dp from ep)
  "$BIN/ferry" layout --model "$1" --scale "$SCALE" --framework "$2" | awk '/^ranks:/ { print $2 }'
}

# ferry run of one variant; appends its CSV rows to $LOG/NAME.csv. Staging is raised for the
# baseline, which gathers buckets of the whole model on one rank.
ferry_run() {  # name label args...
  local name=$1 label=$2
  shift 2
  echo "== $name: $label" >> "$LOG/$name.log"
  timeout 540 "$BIN/ferry" run --memory cuda --verify --warmup 1 --iterations "$ITER" --timeout 520 \
    --set executor.staging_budget=32GiB --results "$LOG/$name.csv" "$@" \
    >> "$LOG/$name.log" 2>&1
}

report() {  # name ceiling -> rows for every CSV row of the case
  local name=$1 ceil=$2 gb="" label variant ranks bytes mean best gbps rest
  while IFS=, read -r label variant ranks bytes mean best gbps rest; do
    [ "$variant" = "gather-broadcast" ] && gb=$mean
  done < "$LOG/$name.csv"
  while IFS=, read -r label variant ranks bytes mean best gbps rest; do
    local vs="" of=""
    [ -n "$gb" ] && [ "$variant" != "gather-broadcast" ] &&
      vs=$(awk -v a="$gb" -v b="$mean" 'BEGIN { printf "; %.2fx faster than gather-broadcast", a / b }')
    [ -n "$ceil" ] && of=$(awk -v a="$gbps" -v b="$ceil" 'BEGIN { printf "; %.0f%% of %.0f GB/s", 100 * a / b, b }')
    local how=${label%% *}
    [ "$how" = tcp ] && how="direct reads"
    [ "$how" = ucx ] && how="ucx cuda"
    row "$name $variant, $how ($((bytes >> 20)) MiB)" \
        "$(awk -v s="$mean" 'BEGIN { printf "%.2f ms", s * 1000 }') mean, $gbps GB/s$of$vs"
  done < "$LOG/$name.csv"
}

# A case into a narrower dtype again with every receiver converting as it reads
# (executor.convert_on_sender=never), beside the direct-read row above, where senders on another
# GPU than their receiver pack the narrower bytes (auto, docs/running.md).
converting_reads() {  # name spec...
  local name=$1 label variant ranks bytes mean rest
  shift
  rm -f "$LOG/$name-never.csv"
  if ferry_run "$name-never" "ipc direct reads, convert_on_sender=never" "$@" --transport tcp \
      --strategy reshard --set executor.convert_on_sender=never; then
    IFS=, read -r label variant ranks bytes mean rest < "$LOG/$name-never.csv"
    row "$name direct reads converting as read (convert_on_sender=never)" \
        "$(awk -v s="$mean" 'BEGIN { printf "%.2f ms", s * 1000 }') mean"
  else
    row "$name direct reads, convert_on_sender=never" "FAILED (see $name-never.log)"
    FAILED=1
  fi
}

run_case() {  # name|model|src|dst|extra
  local name model src dst extra
  IFS='|' read -r name model src dst extra <<< "$1"
  local S D R colocated=0 ceil
  S=$(ranks_of "$model" "$src") D=$(ranks_of "$model" "$dst")
  [[ "$extra" == *--colocated* ]] && colocated=1
  R=$((colocated ? (S > D ? S : D) : S + D))
  if [ "$N" -eq 1 ]; then ceil=$D2D
  elif [ "$colocated" -eq 1 ]; then ceil=$(awk -v a="$ALL_PER_GPU" -v n="$N" 'BEGIN { print a * n }')
  else ceil=$(awk -v a="$PAIR" -v s="$S" -v d="$D" 'BEGIN { print a * (s < d ? s : d) }'); fi
  local spec=(--model "$model" --scale "$SCALE" --src "$src" --dst "$dst" $extra)
  rm -f "$LOG/$name.csv"
  echo "case $name: $model@$SCALE $src -> $dst $extra, $R ranks on $N GPU(s)"
  ferry_run "$name" "ipc direct reads" "${spec[@]}" --transport tcp --strategy reshard ||
    { row "$name direct reads" "FAILED (see $name.log)"; FAILED=1; }
  if [ "$R" -le "$N" ]; then
    ferry_run "$name" "nccl" "${spec[@]}" --transport nccl --strategy both \
      --set executor.direct_intra_node=false "${NCCL_SET[@]}" ||
      { row "$name nccl" "FAILED (see $name.log)"; FAILED=1; }
  else
    row "$name nccl, gather-broadcast" "skipped: $R ranks on $N GPU(s), NCCL needs a GPU a rank"
  fi
  if [ -n "$UCX" ]; then
    LD_LIBRARY_PATH="$UCX/libucx/lib:$UCX/lib:${LD_LIBRARY_PATH:-}" ferry_run "$name" "ucx cuda" "${spec[@]}" \
      --transport ucx --strategy reshard --set ucx.cuda=on --set executor.direct_intra_node=false ||
      { row "$name ucx cuda" "FAILED (see $name.log)"; FAILED=1; }
  else
    row "$name ucx cuda" "skipped: no --ucx"
  fi
  [ -f "$LOG/$name.csv" ] && report "$name" "$ceil"
  [[ "$extra" == *--dst-dtype* ]] && converting_reads "$name" "${spec[@]}"
  m2n_case "$name" "$model" "$src" "$dst" "$extra" "$S" "$R"
}

# NCCL M2N on the tensors it expresses; ferry on the same tensors (cut layouts) beside it.
m2n_case() {  # name model src dst extra sources ranks
  local name=$1 model=$2 src=$3 dst=$4 extra=$5 S=$6 R=$7 dir="$LOG/$1-m2n"
  if [ -z "$M2N" ]; then row "$name m2n" "skipped: no --m2n"; return; fi
  if [ "$R" -gt "$N" ]; then row "$name m2n" "skipped: $R ranks on $N GPU(s), NCCL needs a GPU a rank"; return; fi
  if [[ "$extra" == *--dst-dtype* ]]; then row "$name m2n" "skipped: M2N does not convert dtypes"; return; fi
  if [ -n "$NCCL_BUILD_PID" ]; then
    wait "$NCCL_BUILD_PID" || { row "$name m2n" "FAILED: building NCCL (see nccl_build.log)"; FAILED=1; return; }
    NCCL_BUILD_PID=""
  fi
  local first=$S
  [[ "$extra" == *--colocated* ]] && first=0
  mkdir -p "$dir"
  "$BIN/ferry" layout --model "$model" --scale "$SCALE" --framework "$src" --save "$dir/src.full.yaml" > /dev/null &&
    "$BIN/ferry" layout --model "$model" --scale "$SCALE" --framework "$dst" --first-rank "$first" \
      --save "$dir/dst.full.yaml" > /dev/null &&
    python3 "$HERE/../reference/m2n_layouts.py" --src "$dir/src.full.yaml" --dst "$dir/dst.full.yaml" \
      --out "$dir" | tee "$dir/mapping.txt" ||
    { row "$name m2n" "FAILED: mapping (see $name-m2n/)"; FAILED=1; return; }
  row "$name m2n: expressible" "$(head -1 "$dir/mapping.txt" | sed 's/^m2n_layouts: //')"
  rm -f "$LOG/$name-m2n.csv"
  ferry_run "$name-m2n" "ipc direct reads, M2N's tensors" --src-layout "$dir/src.yaml" \
    --dst-layout "$dir/dst.yaml" --transport tcp --strategy reshard ||
    { row "$name ferry on M2N's tensors" "FAILED (see $name-m2n.log)"; FAILED=1; }
  ferry_run "$name-m2n" "nccl, M2N's tensors" --src-layout "$dir/src.yaml" --dst-layout "$dir/dst.yaml" \
    --transport nccl --strategy reshard --set executor.direct_intra_node=false "${NCCL_SET[@]}" ||
    { row "$name ferry nccl on M2N's tensors" "FAILED (see $name-m2n.log)"; FAILED=1; }
  [ -f "$LOG/$name-m2n.csv" ] && report "$name-m2n" ""
  if PYTHONPATH="$M2N${PYTHONPATH:+:$PYTHONPATH}" timeout 600 python3 "$HERE/../reference/m2n_reference.py" \
      --plan "$dir/m2n_plan.json" --iterations "$ITER" --warmup 1 --timeout 540 \
      ${NCCL_LIB:+--nccl-library "$NCCL_LIB"} --out "$dir/m2n.json" > "$dir/m2n.log" 2>&1; then
    row "$name m2n reshard (nccl-extensions)" "$(grep '^m2n reshard' "$dir/m2n.log" | sed 's/^m2n reshard: //')"
  elif grep -q "requested GIN but not all ranks" "$dir/m2n.log"; then
    row "$name m2n reshard (nccl-extensions)" \
        "FAILED: M2N needs NCCL GIN (an RDMA NIC with GPU-initiated networking); NCCL found none here"
    FAILED=1
  else
    row "$name m2n reshard (nccl-extensions)" "FAILED (see $name-m2n/m2n.log)"
    tail -5 "$dir/m2n.log"
    FAILED=1
  fi
}

while read -r c; do wanted "${c%%|*}" && run_case "$c"; done < <(case_list)

# A GPU rank killed in the middle of a refit: the survivors name it and abort within the deadline,
# a replacement joins, the later refits verify.
kill_case() {  # label transport args...
  local label=$1 transport=$2 log="$LOG/kill_${1// /_}.log"
  shift 2
  if timeout 300 "$BIN/ferry" run --model llama-3.1-8b --scale 1/8 --src megatron:tp=2 --dst vllm:tp=2 \
      --memory cuda --verify --iterations 4 --timeout 280 --transport "$transport" \
      --inject-fault 1:kill:mid=2 --recover "$@" > "$log" 2>&1; then
    row "kill rank 1 mid-refit, $label" "$(grep -c 'bit-exact' "$log") refits verified; $(grep -m1 -o \
        'detected by rank [0-9]* after [0-9]* ms' "$log"); replacement joined $(grep -m1 -o \
        '[0-9]* ms after the fault' "$log")"
  else
    row "kill rank 1 mid-refit, $label" "FAILED (see ${log##*/})"
    FAILED=1
  fi
}
if wanted kill; then
  kill_case "direct reads" tcp
  if [ "$N" -ge 4 ]; then
    kill_case nccl nccl --set executor.direct_intra_node=false "${NCCL_SET[@]}"
  else
    row "kill rank 1 mid-refit, nccl" "skipped: 4 ranks on $N GPU(s), NCCL needs a GPU a rank"
  fi
fi

echo
echo "== multi_gpu: $N x $(head -1 "$LOG/gpu.txt"), scale $SCALE =="
print_rows
exit $FAILED
