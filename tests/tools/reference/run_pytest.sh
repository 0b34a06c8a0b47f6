#!/usr/bin/env bash
# Runs the given pytest files with Debian's /usr/bin/python3, tools/reference on the path.
set -euo pipefail
runfiles="${TEST_SRCDIR}/${TEST_WORKSPACE}"
export PYTHONPATH="$runfiles/tools/reference"
cd "$runfiles"
exec /usr/bin/python3 -m pytest -q -rs -p no:cacheprovider --basetemp="${TEST_TMPDIR}/pytest" "$@"
