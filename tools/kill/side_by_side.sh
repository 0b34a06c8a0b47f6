#!/bin/bash
# Runs the kill harness on two `ferry` binaries cell by cell, alternating, so that both meet the
# same machine load: for each transport and fault, `--runs` trials of BEFORE, then of AFTER.
# Prints the harness's Markdown rows, each prefixed with the binary's label.
#   tools/kill/side_by_side.sh BEFORE_FERRY AFTER_FERRY [kill_harness options...]
#   options default to: --runs 3 --transports tcp,ucx,libfabric
#                       --faults kill:mid,kill:between,stop:mid,stop:between
# Exits 1 when any harness run reported a failed, unnamed or launcher-ended trial.
set -u
if [ $# -lt 2 ]; then
  echo "usage: $0 BEFORE_FERRY AFTER_FERRY [--runs N] [--transports a,b] [--faults f,g] [other kill_harness options]" >&2
  exit 2
fi
before=$1 after=$2
shift 2
harness=${KILL_HARNESS:-bazel-bin/tools/kill/kill_harness}
runs=3 transports=tcp,ucx,libfabric faults=kill:mid,kill:between,stop:mid,stop:between
rest=()
while [ $# -gt 0 ]; do
  case $1 in
    --runs) runs=$2 ;;
    --transports) transports=$2 ;;
    --faults) faults=$2 ;;
    *) rest+=("$1" "$2") ;;
  esac
  shift 2
done
status=0
echo "| binary | transport | direct reads | fault | runs | p50 s | p99 s | max s | culprit named | survivors left on their own |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for transport in ${transports//,/ }; do
  for fault in ${faults//,/ }; do
    for label in before after; do
      binary=$before
      [ $label = after ] && binary=$after
      table=$("$harness" --ferry "$binary" --runs "$runs" --transports "$transport" --faults "$fault" "${rest[@]}") || status=1
      grep '^| [a-z]' <<<"$table" | grep -v '^| transport' | sed "s/^| /| $label | /"
    done
  done
done
exit $status
