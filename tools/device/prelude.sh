# The set-up every device script shares; sourced, not run (`. "$(dirname "$0")/prelude.sh"`).
# A device script runs on a lent GPU machine that has no Bazel and may lack some of the shared
# libraries ferry was linked against here; it logs under $OUT (the folder the device tool brings
# back) and ends with a table of rows.

# device_setup NAME [LIB]: with BIN set to the folder holding ferry,
#   LOG=${OUT:-/tmp/NAME}, created;
#   NCCL_NVLS_ENABLE=0 (NVLink SHARP multicast stays off on lent machines);
#   FAILED=0 and ROWS=() for the script's result and table;
#   LIB (default BIN/lib) put first on LD_LIBRARY_PATH when ldd finds a library of ferry missing;
#   prints the GPU (also to $LOG/gpu.txt) and the date.
# Returns 1, naming the missing libraries, when ferry still cannot start.
device_setup() {
  local name=$1 lib=${2:-$BIN/lib}
  LOG=${OUT:-/tmp/$name}
  mkdir -p "$LOG"
  export NCCL_NVLS_ENABLE=0
  FAILED=0
  ROWS=()
  if ldd "$BIN/ferry" | grep -q 'not found'; then
    export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    echo "$name: using carried libraries in $lib"
  fi
  if ldd "$BIN/ferry" | grep 'not found' >&2; then
    echo "$name: ferry cannot start here (libraries above not found)" >&2
    return 1
  fi
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$LOG/gpu.txt"
  echo "date: $(date -u +%Y-%m-%dT%H:%MZ)"
}

# row ARGS...: appends one table row, formatted by the script's ROW_FORMAT (a printf format).
row() { ROWS+=("$(printf "$ROW_FORMAT" "$@")"); }

# print_rows: the table, to stdout and $LOG/table.txt.
print_rows() { printf '%s\n' "${ROWS[@]}" | tee "$LOG/table.txt"; }
