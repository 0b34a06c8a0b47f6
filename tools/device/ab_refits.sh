#!/usr/bin/env bash
# Builds of ferry side by side on one GPU: the same verified refits (`ferry run --memory cuda`,
# direct reads, every rank on GPU 0) run by build A, then build B (then C...), then A again, and so
# on, so that all see the same machine; one table at the end with each build's mean refit time per
# round and its ratio to A's. For a change to the executor or its kernels whose speed must not move
# on one GPU (or must, by how much), on the lent machine where runs are noisy and only ratios
# measured together count.
#
# Usage: tools/device/ab_refits.sh BIN_A BIN_B [BIN_C...] [--pairs N] [--only LIST]
#   BIN_A, BIN_B...  folders holding ferry (bazel build -c opt //tools/cli:ferry), optionally lib/
#                 with shared libraries the machine lacks (BIN_A's is used for all).
#   --pairs N     how many rounds (A, B, ...) a case runs (default 3).
#   --only LIST   only these cases, comma-separated (names below).
# Cases: small-moe (Qwen3-30B-A3B at 1/4, Megatron TP2xEP2 -> vLLM TP2xDP2, 8 processes), small-pp
# (Llama-3.1-8B at 1/4, Megatron TP2xPP2 -> vLLM TP4), small-fp8 (Llama-3.1-8B at 1/4, TP2 -> TP2
# into fp8 e4m3), large (Llama-3.1-70B at 1/2, Megatron TP2 with the distributed optimizer's
# buffer -> vLLM TP2, 33 GiB) and large-fp8 (the same into fp8 e4m3).
# Writes logs under $OUT (or /tmp/ab_refits); exits non-zero when a refit failed.
set -u
BINS=() PAIRS=3 ONLY=""
while [ $# -gt 0 ]; do
  case $1 in
    --pairs) PAIRS=$2; shift 2 ;;
    --only) ONLY=",$2,"; shift 2 ;;
    -*) echo "ab_refits: unknown option $1" >&2; exit 2 ;;
    *) BINS+=("$(cd "$1" && pwd)") || exit 2; shift ;;
  esac
done
if [ ${#BINS[@]} -lt 2 ]; then
  echo "usage: ab_refits.sh BIN_A BIN_B [BIN_C...] [--pairs N] [--only LIST]" >&2
  exit 2
fi
BIN=${BINS[0]}
. "$(dirname "$0")/prelude.sh"
ROW_FORMAT='%-12s %-5s %s'
device_setup ab_refits || exit 1
wanted() { [ -z "$ONLY" ] || [[ "$ONLY" == *",$1,"* ]]; }

# name: model scale src dst iterations [more ferry run args]
declare -A CASES=(
  [small-moe]="qwen3-30b-a3b 1/4 megatron:tp=2,ep=2 vllm:tp=2,dp=2 10"
  [small-pp]="llama-3.1-8b 1/4 megatron:tp=2,pp=2 vllm:tp=4 10"
  [small-fp8]="llama-3.1-8b 1/4 megatron:tp=2 vllm:tp=2 10 --dst-dtype fp8_e4m3"
  [large]="llama-3.1-70b 1/2 megatron:tp=2,buffers=distopt vllm:tp=2 3"
  [large-fp8]="llama-3.1-70b 1/2 megatron:tp=2,buffers=distopt vllm:tp=2 3 --dst-dtype fp8_e4m3"
)

# letter_of I: build I's letter, A for the first.
letter_of() { printf "\\$(printf '%03o' $((65 + $1)))"; }

# mean_ms BIN NAME ARGS...: one verified `ferry run` of the case; prints its mean refit time in ms.
mean_ms() {
  local bin=$1 name=$2 model=$3 scale=$4 src=$5 dst=$6 iterations=$7
  shift 7
  local csv="$LOG/$name.csv"
  rm -f "$csv"
  if ! timeout 300 "$bin/ferry" run --model "$model" --scale "$scale" --src "$src" --dst "$dst" \
      --memory cuda --verify --transport tcp --strategy reshard --warmup 2 --iterations "$iterations" \
      --timeout 280 --results "$csv" --set executor.staging_budget=8GiB "$@" >> "$LOG/$name.log" 2>&1; then
    echo FAILED
    return 1
  fi
  local label variant ranks bytes mean rest
  IFS=, read -r label variant ranks bytes mean rest < "$csv"
  awk -v s="$mean" 'BEGIN { printf "%.3f", s * 1000 }'
}

for name in small-moe small-pp small-fp8 large large-fp8; do
  wanted "$name" || continue
  read -r -a args <<< "${CASES[$name]}"
  for ((p = 1; p <= PAIRS; p++)); do
    cells="" first=""
    for i in "${!BINS[@]}"; do
      letter=$(letter_of "$i")
      ms=$(mean_ms "${BINS[$i]}" "$name-$letter" "${args[@]}") || { FAILED=1; tail -15 "$LOG/$name-$letter.log"; }
      [ -n "$first" ] || first=$ms
      ratio=$(awk -v a="$first" -v b="$ms" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.3f", b / a; else print "-" }')
      cells+=$(printf '%s %9s ms' "$letter" "$ms")
      [ "$i" -eq 0 ] || cells+=" ($ratio)"
      cells+="   "
    done
    row "$name" "#$p" "$cells"
    echo "${ROWS[-1]}"
  done
done

echo
echo "== ab_refits: $(head -1 "$LOG/gpu.txt"); mean refit time of each build, (its ratio to A's) =="
for i in "${!BINS[@]}"; do echo "$(letter_of "$i") = ${BINS[$i]}"; done
print_rows
exit $FAILED
