#!/usr/bin/env bash
# Packs, on the development machine, what tools/device/multi_gpu.sh needs on a GPU machine that has
# no Bazel and no package index, small enough to travel with the repository (64 MiB a call):
#   DEST/bin/           ferry and peer_copy_ceiling (opt, stripped) and lib/ with the shared
#                       libraries of this machine's libfabric/UCX that the GPU machine's image lacks;
#   DEST/ucx.tar.xz     PyPI's libucx-cu13 (a CUDA-enabled UCX) unpacked, without its perftest,
#                       static and libtool files, duplicate sonames made links;
#   DEST/m2n-site.tar.xz  nccl-extensions 0.1.0, nccl4py, cuda-core and cuda-pathfinder for
#                       CPython 3.12 unpacked, without nccl-extensions' CUDA 12 and nccl.ep parts;
#   DEST/nccl-src.tar.gz  NVIDIA/nccl's source (src/, makefiles), when a checkout is given: M2N
#                       needs NCCL >= 2.30.5, whose wheel (305 MB) cannot travel; multi_gpu.sh
#                       --nccl-src builds it there.
# Usage: tools/device/pack_multi_gpu.sh DEST [NCCL_GIT_DIR]
#   e.g. tools/device/pack_multi_gpu.sh .devbin/mg /work/.mirror/NVIDIA+nccl/repo, DEST ignored by
#   git (.git/info/exclude), then on the GPU machine, with carry [DEST]:
#   tools/device/multi_gpu.sh DEST/bin --ucx DEST/ucx.tar.xz --m2n DEST/m2n-site.tar.xz
#     --nccl-src DEST/nccl-src.tar.gz [--only ...]
set -euo pipefail
DEST=${1:?usage: pack_multi_gpu.sh DEST [NCCL_GIT_DIR]}
NCCL_GIT=${2:-}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$DEST/bin/lib"
DEST=$(cd "$DEST" && pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

(cd "$ROOT" && bazel build -c opt //tools/cli:ferry //tests/core/cuda:peer_copy_ceiling)
for b in tools/cli/ferry tests/core/cuda/peer_copy_ceiling; do
  install -m 755 "$ROOT/bazel-bin/$b" "$DEST/bin/"
  strip "$DEST/bin/$(basename "$b")"
done
for l in libpsm_infinipath.so.1 libpsm2.so.2 libinfinipath.so.4 libefa.so.1; do
  p=$(ldconfig -p | awk -v l="$l" '$1 == l && !found { print $NF; found = 1 }')
  [ -n "$p" ] && cp -L "$p" "$DEST/bin/lib/"
done

wheels() {  # dir names... : CPython 3.12 manylinux wheels without their dependencies
  local dir=$1
  shift
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$dir" "$@"
}

# Copies of one library under several sonames (zip has no links) become links to the longest.
link_duplicates() {
  local f base
  find "$1" -name '*.so.*.*.*' | while read -r f; do
    base=${f%%.so.*}.so
    for alias in "$base" "${f%.*.*}"; do  # lib.so and lib.so.MAJOR beside lib.so.MAJOR.MINOR.PATCH
      if [ -f "$alias" ] && [ ! -L "$alias" ] && cmp -s "$f" "$alias"; then
        ln -sf "$(basename "$f")" "$alias"
      fi
    done
  done
}

wheels "$WORK/ucxw" libucx-cu13
mkdir -p "$WORK/ucx"
unzip -q "$WORK"/ucxw/*.whl -d "$WORK/ucx"
find "$WORK/ucx" \( -name '*perftest*' -o -name '*.a' -o -name '*.la' \) -prune -exec rm -rf {} +
link_duplicates "$WORK/ucx"
tar -C "$WORK/ucx" -cJf "$DEST/ucx.tar.xz" .

wheels "$WORK/m2nw" nccl-extensions==0.1.0 nccl4py cuda-core cuda-pathfinder
mkdir -p "$WORK/site"
for w in "$WORK"/m2nw/*.whl; do unzip -q -o "$w" -d "$WORK/site"; done
rm -rf "$WORK/site/nccl/ep" "$WORK/site/nccl/m2n/lib/cu12" "$WORK"/site/nccl/_extensions/bindings/*nccl_ep* \
  "$WORK"/site/nccl/_extensions/bindings/_internal/nccl_ep*
tar -C "$WORK/site" -cJf "$DEST/m2n-site.tar.xz" .

if [ -n "$NCCL_GIT" ]; then
  git -C "$NCCL_GIT" archive --format=tar.gz HEAD src makefiles Makefile LICENSE.txt > "$DEST/nccl-src.tar.gz"
  echo "NCCL source: $(git -C "$NCCL_GIT" show HEAD:makefiles/version.mk | awk '/NCCL_(MAJOR|MINOR|PATCH)/ { printf "%s ", $3 }')"
fi
du -sh "$DEST" "$DEST"/*
