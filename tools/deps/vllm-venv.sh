#!/usr/bin/env bash
# tools/deps/vllm-venv.sh [DIR]: makes the Python environment the inference engines' tests run in
# (python/tests/test_vllm.py, python/tests/test_sglang_layout.py): a venv of Debian's
# /usr/bin/python3 (the interpreter ferry's extension is built for) with PyPI's vLLM and torch
# (tools/deps/vllm-requirements.txt) and SGLang (tools/deps/sglang-requirements.txt), at DIR
# (default: $FERRY_VLLM_VENV, else ~/.cache/ferry/vllm-venv). Does nothing when DIR already holds
# the environment of the current requirements. A fresh one takes about 3 minutes (2 cores,
# PyPI at ~100 MB/s) and 6.6 GB.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="${1:-${FERRY_VLLM_VENV:-$HOME/.cache/ferry/vllm-venv}}"
vllm_version=0.33.0
sglang_version=0.5.23
stamp="$venv/.ferry-requirements"
want="$(cat "$here/vllm-requirements.txt" "$here/sglang-requirements.txt"
        echo "vllm==$vllm_version"; echo "sglang==$sglang_version")"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
echo "ferry: making the inference engines' test environment in $venv" >&2
rm -rf "$venv"
/usr/bin/python3 -m venv --system-site-packages "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$here/vllm-requirements.txt"
"$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps "vllm==$vllm_version"
"$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps \
  -r "$here/sglang-requirements.txt" "sglang==$sglang_version"
check_imports() {  # NAME MODULES...: every module imports in the venv, else say which
  local name="$1" out
  shift
  if ! out="$("$venv/bin/python" -c "import $(IFS=,; echo "$*")" 2>&1)"; then
    printf '%s\n' "$out" | tail -5 >&2
    echo "ferry: $name does not import in $venv (a package missing from its requirements?)" >&2
    exit 1
  fi
}
check_imports vLLM vllm.distributed.weight_transfer vllm.model_executor.layers.linear \
  vllm.model_executor.layers.vocab_parallel_embedding
check_imports SGLang sglang.srt.models.llama sglang.srt.models.qwen3_moe \
  sglang.srt.models.deepseek_v2
printf '%s' "$want" >"$stamp"
