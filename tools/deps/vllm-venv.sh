#!/usr/bin/env bash
# tools/deps/vllm-venv.sh [DIR]: makes the Python environment the vLLM backend's tests run in
# (python/tests/test_vllm.py): a venv of Debian's /usr/bin/python3 (the interpreter ferry's
# extension is built for) with PyPI's vLLM and torch (tools/deps/vllm-requirements.txt), at DIR
# (default: $FERRY_VLLM_VENV, else ~/.cache/ferry/vllm-venv). Does nothing when DIR already holds
# the environment of the current requirements. A fresh one takes about 2.5 minutes (2 cores,
# PyPI at ~100 MB/s) and 6.5 GB.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="${1:-${FERRY_VLLM_VENV:-$HOME/.cache/ferry/vllm-venv}}"
vllm_version=0.33.0
stamp="$venv/.ferry-requirements"
want="$(cat "$here/vllm-requirements.txt"; echo "vllm==$vllm_version")"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
echo "ferry: making the vLLM test environment in $venv" >&2
rm -rf "$venv"
/usr/bin/python3 -m venv --system-site-packages "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$here/vllm-requirements.txt"
"$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps "vllm==$vllm_version"
imports="import vllm.distributed.weight_transfer, vllm.model_executor.layers.linear, \
vllm.model_executor.layers.vocab_parallel_embedding"
if ! out="$("$venv/bin/python" -c "$imports" 2>&1)"; then
  printf '%s\n' "$out" | tail -5 >&2
  echo "ferry: vLLM does not import in $venv (a package missing from vllm-requirements.txt?)" >&2
  exit 1
fi
printf '%s' "$want" >"$stamp"
