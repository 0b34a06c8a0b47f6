#!/usr/bin/env bash
# The Python package on a GPU machine whose Python is not the one Bazel builds for (the H200
# machine: Ubuntu's Python 3.12 with torch 2.11, no Bazel): the C++ core is compiled here by Bazel,
# only the pybind11 module (python/src) is compiled there, against that machine's own Python and
# pybind11 headers, and linked there with the core's objects exactly as Bazel links _ferry.so.
# Then the GPU tests run: the facade's refit_cuda_test, and the pytest suites that need CUDA or a
# torch with DTensor (test_cuda.py, test_dtensor.py, the example on CUDA) with the registration
# and layout suites (the module on that Python), then python/bench/direct_reads.py on CUDA tensors,
# and test_cuda.py and the bench again with PyTorch's expandable segments (VMM memory).
#
#   tools/device/python_gpu.sh pack DIR        here (Bazel): builds and fills DIR (about 40 MiB)
#   tools/device/python_gpu.sh test DIR [LIB]  there: builds the module, runs the tests; LIB holds
#                                              shared libraries that machine lacks (UCX, libfabric);
#                                              PYTEST_FILES="tests/test_cuda.py ..." narrows pytest
#
# `test` writes its logs under $OUT (or /tmp/python_gpu) and exits non-zero when a step failed.
# Why not build the module here: Debian's Python is 3.11 and a CPython extension is built for one
# minor version; the other machine's interpreter, headers and pybind11 are the ones that must agree.
set -euo pipefail
mode=${1:?usage: python_gpu.sh pack|test DIR [LIB]}
dir=${2:?usage: python_gpu.sh pack|test DIR [LIB]}

pack() {
  local root exec
  root=$(cd "$(dirname "$0")/../.." && pwd)
  dir=$(mkdir -p "$dir" && cd "$dir" && pwd)
  cd "$root"
  bazel build -c opt //python:_ferry.so //tests/core/refit:refit_cuda_test
  exec=$(bazel info -c opt execution_root)
  rm -rf "$dir" && mkdir -p "$dir/link" "$dir/src" "$dir/bin"
  # The link line of _ferry.so, less the module's own objects and this machine's linker choices;
  # every object and archive it names is copied beside it.
  bazel aquery -c opt 'mnemonic("CppLink", //python:_ferry.so)' --output=jsonproto |
    python3 "$root/tools/device/link_inputs.py" "$exec" "$dir/link" > "$dir/link.args"
  # The module's sources and the project headers they include.
  for f in python/src/*.cc; do g++ -std=c++20 -MM -I. "-I$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["include"])')" "$f"; done |
    tr ' \\' '\n\n' | grep -E '^(core|planner|python|tools|transports)/.*\.(h|cc)$' | sort -u |
    while read -r f; do mkdir -p "$dir/src/$(dirname "$f")" && cp "$f" "$dir/src/$f"; done
  cp python/src/*.cc "$dir/src/python/src/"
  mkdir -p "$dir/package" "$dir/tests" "$dir/examples"
  cp python/ferry/*.py python/ferry/*.pyi python/ferry/py.typed "$dir/package/"
  cp python/tests/*.py "$dir/tests/"
  cp examples/*.py "$dir/examples/"
  mkdir -p "$dir/bench" && cp python/bench/*.py "$dir/bench/"
  cp bazel-bin/tests/core/refit/refit_cuda_test "$dir/bin/"
  du -sh "$dir"
}

test_there() {
  local lib=${3:-} log=${OUT:-/tmp/python_gpu} work=/tmp/python_gpu_build failed=0 inc pybind suffix
  dir=$(cd "$dir" && pwd)
  mkdir -p "$log" "$work/site/ferry" "$work/libs"
  export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
  inc=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
  echo "python: $(python3 --version) at $(command -v python3); headers: $inc"
  [ -f "$inc/Python.h" ] || { echo "python_gpu: no Python.h in $inc: install the Python headers" >&2; exit 2; }
  pybind=$(python3 -m pybind11 --includes) || { echo "python_gpu: no pybind11 for python3" >&2; exit 2; }
  suffix=$(python3 -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
  echo "pybind11 $(python3 -c 'import pybind11; print(pybind11.__version__)'), $(g++ --version | head -1)"
  if [ -n "$lib" ]; then  # linkable names (libucp.so) for the carried libraries (libucp.so.0)
    for l in "$lib"/*.so.*; do b=$(basename "$l"); ln -sf "$(cd "$lib" && pwd)/$b" "$work/libs/${b%%.so.*}.so"; done
    export LD_LIBRARY_PATH="$(cd "$lib" && pwd)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  fi
  local pids=()
  for f in "$dir"/src/python/src/*.cc; do
    g++ -std=c++20 -O2 -fPIC -fvisibility=hidden -Wall -Wno-missing-field-initializers \
      -I"$dir/src" $pybind -c "$f" -o "$work/$(basename "$f" .cc).o" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || { echo "python_gpu: compiling python/src failed" >&2; exit 1; }; done
  (cd "$dir" && g++ -shared -o "$work/site/ferry/_ferry$suffix" "$work"/*.o $(cat link.args) -L"$work/libs")
  cp "$dir"/package/* "$work/site/ferry/"
  export PYTHONPATH="$work/site:$dir/tests:$dir/examples"
  python3 -c 'import ferry, torch; print("import ferry: ok; torch", torch.__version__, "cuda", torch.cuda.is_available())'
  run() {  # name command... -> log, pass/fail line
    if timeout 400 "${@:2}" > "$log/$1.log" 2>&1; then echo "passed: $1"; else echo "FAILED: $1"; tail -30 "$log/$1.log"; failed=1; fi
    grep -E '^\[  (PASSED|SKIPPED) |passed|skipped' "$log/$1.log" | tail -3 || true
  }
  run refit_cuda_test "$dir/bin/refit_cuda_test"
  # The suites CUDA and DTensor change, and the import and registration checks on this Python
  # (PYTEST_FILES, paths under DIR, narrows them).
  local files=()
  for f in ${PYTEST_FILES:-tests/test_cuda.py tests/test_dtensor.py tests/test_register.py \
      tests/test_layout.py examples/test_trainer_to_engine.py}; do files+=("$dir/$f"); done
  run pytest python3 -m pytest -q -rs -p no:cacheprovider "${files[@]}"
  # Python refits of CUDA tensors, 64 MiB over 4 processes on one GPU: CUDA IPC reads vs staged.
  run direct_reads_cuda python3 "$dir/bench/direct_reads.py" cuda && tail -3 "$log/direct_reads_cuda.log"
  # The same with PyTorch's expandable segments: tensors in cuMem (VMM) mappings, which direct
  # reads export as fds and map (core/cuda/vmm.h).
  run pytest_expandable_segments env PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True \
    python3 -m pytest -q -rs -p no:cacheprovider "$dir/tests/test_cuda.py"
  run direct_reads_cuda_expandable_segments env PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True \
    python3 "$dir/bench/direct_reads.py" cuda && tail -3 "$log/direct_reads_cuda_expandable_segments.log"
  return $failed
}

case "$mode" in
  pack) pack ;;
  test) test_there "$@" ;;
  *) echo "python_gpu.sh: unknown mode '$mode' (pack or test)" >&2; exit 2 ;;
esac
