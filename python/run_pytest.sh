#!/usr/bin/env bash
# //python:pytest: the Python package's pytest suite (python/tests) and the examples' tests
# (examples/), run by Debian's /usr/bin/python3 (the interpreter _ferry.so is built for) against
# the package Bazel assembled (python/site). Multi-process tests bound every child by a deadline.
# With arguments, pytest runs those instead (//python:vllm_test and //python:sglang_test: the
# inference engines' slow tests, which the default run leaves out).
set -euo pipefail
runfiles="${TEST_SRCDIR}/${TEST_WORKSPACE}"
export PYTHONPATH="$runfiles/python/site:$runfiles/python/tests:$runfiles/examples"
cd "$runfiles"
[ $# -gt 0 ] || set -- python/tests examples --ignore=python/tests/test_vllm.py \
  --ignore=python/tests/test_vllm_layouts.py --ignore=python/tests/test_sglang_layout.py \
  --ignore=python/tests/test_sglang_refit.py
exec /usr/bin/python3 -m pytest -q -rs -p no:cacheprovider --basetemp="${TEST_TMPDIR}/pytest" "$@"
