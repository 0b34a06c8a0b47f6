#!/usr/bin/env bash
# tools/sim/published_cases.sh: re-predicts every case of docs/simulator.md's calibration (b), the
# published refit times held out, in one run, so that the tables there can be regenerated after a
# change to the model. Prints one line a case: its name, then the predicted times of ferry's
# reshard, of gather-and-broadcast ("-" where not simulated) and the lower bound, as `ferry
# simulate` prints them.
#
#   tools/sim/published_cases.sh FERRY [GROUP...]
#
# FERRY is the ferry binary (bazel-bin/tools/cli/ferry, best built with -c opt). GROUPs, all by
# default: results (the Results table), ep (vLLM with expert parallelism), lanes (the CPU lanes'
# table), costs (fixed costs ten times larger), staging (the staging budget: unlimited on DGX H100,
# larger ones on GB200 NVL72).
# Each case takes 5-20 s of one core on the development machine; all of them about 8 minutes.
set -euo pipefail

if [ $# -lt 1 ] || [ ! -x "$1" ]; then
  echo "usage: $0 FERRY [results|ep|lanes|costs|staging]..." >&2
  exit 2
fi
ferry="$1"
shift
groups=("$@")
[ ${#groups[@]} -gt 0 ] || groups=(results ep lanes costs staging)

DS=(--model deepseek-v3 --src megatron:pp=16,ep=16,first=3,last=2 --dst vllm:tp=32,engines=8)
DS_EP=(--model deepseek-v3 --src megatron:pp=16,ep=16,first=3,last=2 --dst vllm:tp=32,ep=32,engines=8)
QW=(--model qwen3-235b-a22b --src megatron:tp=2,pp=8,cp=2,ep=16,etp=1,first=11,last=11
    --dst vllm:tp=8,engines=16)

scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT

# A cluster file `base: dgx-h100` with the given "key: value" lines; prints its path.
cluster_file() {
  local name="$1"
  shift
  local path="$scratch/$name.yaml"
  printf 'name: %s\nbase: dgx-h100\n' "$name" >"$path"
  printf '%s\n' "$@" >>"$path"
  echo "$path"
}

# Runs `ferry simulate ARGS` and prints NAME with the three columns of its "predicted time" row.
predict() {
  local name="$1"
  shift
  local out
  if ! out="$("$ferry" simulate "$@" 2>&1)"; then
    echo "$name: ferry simulate failed:" >&2
    echo "$out" >&2
    exit 1
  fi
  local row
  row="$(grep '^predicted time' <<<"$out" | sed 's/^predicted time *//; s/  */ /g')"
  local reshard baseline bound
  reshard="$(awk '{print $1" "$2}' <<<"$row")"
  if grep -q skipped <<<"$row"; then
    baseline="-"
    bound="$(awk '{print $4" "$5}' <<<"$row")"
  else
    baseline="$(awk '{print $3" "$4}' <<<"$row")"
    bound="$(awk '{print $5" "$6}' <<<"$row")"
  fi
  printf '%-44s reshard %-10s baseline %-10s bound %s\n' "$name" "$reshard" "$baseline" "$bound"
}

results() {
  local window
  for window in default 0; do
    local w=()
    [ "$window" = default ] || w=(--max-in-flight 0)
    predict "DeepSeek-V3 BF16 dgx-h100 window=$window" "${DS[@]}" --cluster dgx-h100 "${w[@]}"
    predict "Qwen3-235B BF16 dgx-h100 window=$window" "${QW[@]}" --cluster dgx-h100 "${w[@]}"
    predict "DeepSeek-V3 --flat dgx-h100 window=$window" "${DS[@]}" --cluster dgx-h100 --no-baseline --flat "${w[@]}"
    predict "Qwen3-235B --flat dgx-h100 window=$window" "${QW[@]}" --cluster dgx-h100 --no-baseline --flat "${w[@]}"
    predict "DeepSeek-V3 BF16 gb200-nvl72 window=$window" "${DS[@]}" --cluster gb200-nvl72 --no-baseline "${w[@]}"
    predict "Qwen3-235B BF16 gb200-nvl72 window=$window" "${QW[@]}" --cluster gb200-nvl72 --no-baseline "${w[@]}"
  done
  predict "DeepSeek-V3 FP8 dgx-h100" "${DS[@]}" --cluster dgx-h100 --dtype fp8_e4m3
  predict "Qwen3-235B FP8 dgx-h100" "${QW[@]}" --cluster dgx-h100 --dtype fp8_e4m3
}

ep() {
  predict "DeepSeek-V3 BF16 dgx-h100 vllm ep=32" "${DS_EP[@]}" --cluster dgx-h100
}

lanes() {
  local none load350 posting loading
  none="$(cluster_file lanes-none 'op_post_overhead: 0' 'tensor_load_overhead: 0')"
  loading="$(cluster_file lanes-loading 'op_post_overhead: 0')"
  load350="$(cluster_file lanes-load350 'tensor_load_overhead: 350us')"
  posting="$(cluster_file lanes-posting 'tensor_load_overhead: 0')"
  local model
  for model in DS QW; do
    local -n args="$model"
    predict "$model lanes none" "${args[@]}" --cluster "$none"
    predict "$model lanes weight loading" "${args[@]}" --cluster "$loading"
    predict "$model lanes loading 350us + posting" "${args[@]}" --cluster "$load350"
    predict "$model lanes posting" "${args[@]}" --cluster "$posting"
  done
}

costs() {
  local tenfold
  tenfold="$(cluster_file costs-x10 'nic_message_overhead: 40us' 'nvlink_message_overhead: 30us' \
    'kernel_overhead: 24us' 'op_post_overhead: 86us')"
  predict "DeepSeek-V3 fixed costs x10" "${DS[@]}" --cluster "$tenfold"
  predict "Qwen3-235B fixed costs x10" "${QW[@]}" --cluster "$tenfold"
}

staging() {
  predict "DeepSeek-V3 dgx-h100 staging unlimited" "${DS[@]}" --cluster dgx-h100 --no-baseline --staging-budget 0
  predict "Qwen3-235B dgx-h100 staging unlimited" "${QW[@]}" --cluster dgx-h100 --no-baseline --staging-budget 0
  local budget
  for budget in 4GiB 16GiB 64GiB; do
    predict "DeepSeek-V3 gb200-nvl72 staging $budget" "${DS[@]}" --cluster gb200-nvl72 --no-baseline \
      --staging-budget "$budget"
    predict "Qwen3-235B gb200-nvl72 staging $budget" "${QW[@]}" --cluster gb200-nvl72 --no-baseline \
      --staging-budget "$budget"
  done
}

for group in "${groups[@]}"; do
  case "$group" in
    results | ep | lanes | costs | staging) echo "# $group"; "$group" ;;
    *) echo "unknown group '$group'" >&2; exit 2 ;;
  esac
done
