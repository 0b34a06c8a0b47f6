#!/usr/bin/env bash
# //python:pytest: the Python package's pytest suite (python/tests) and the examples' tests
# (examples/), run by Debian's /usr/bin/python3 (the interpreter _ferry.so is built for) against
# the package Bazel assembled (python/site). Multi-process tests bound every child by a deadline.
set -euo pipefail
runfiles="${TEST_SRCDIR}/${TEST_WORKSPACE}"
export PYTHONPATH="$runfiles/python/site:$runfiles/python/tests:$runfiles/examples"
cd "$runfiles"
exec /usr/bin/python3 -m pytest -q -rs -p no:cacheprovider --basetemp="${TEST_TMPDIR}/pytest" \
    python/tests examples "$@"
