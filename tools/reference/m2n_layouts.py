#!/usr/bin/env python3
"""Which tensors of a ferry refit NCCL's M2N Reshard can move, and how to describe them to it.

NCCL M2N (the `nccl.m2n` module of NVIDIA's nccl-extensions 0.1.0, `nccl/m2n/api.py` and
`nccl/m2n/include/nccl_m2n.h` in its wheel) reshards one tensor at a time between two meshes of
one NCCL communicator. A side is described by a mesh of at most 2 dimensions over a contiguous,
row-major interval of ranks (`ncclMesh_t`: dims and start rank), one placement per mesh dimension
(`Replicate` or `Shard(dim)`, nested in mesh-axis order as DTensor nests them), and on each rank
one contiguous buffer holding its local block (`ncclDistTensor_t` carries a pointer and a local
shape, no strides); tensors have at most 3 dimensions (NCCL_RESHARD_MAX_TENSOR_DIMS) and every
shard is even (a global extent not divisible by its shard factor is refused). Both sides hold the
same dtype.

This module reads the two layout files of a refit (`ferry layout --save`, docs/layout-format.md)
and, for each tensor, finds the mesh and placements that give exactly the fragments each side
holds, or says why none does: a rank holding several pieces of the tensor (Megatron's fused QKV,
which interleaves query groups), a piece that is not contiguous in its buffer, uneven or padded
shards (vLLM's vocabulary padding), ranks that are not one interval, more than 3 dimensions, a
dtype conversion or a transform on the destination. A stacked expert tensor (ferry's
`experts.[0:128].gate_proj`) that M2N cannot take whole goes expert by expert, as a checkpoint names
them, when every expert can (Megatron keeps each expert in a buffer of its own). The supported
tensors keep their place in the frameworks' own buffers: a local block's address is its buffer plus
the fragment's byte offset.

    m2n_layouts.py --src SRC.yaml --dst DST.yaml --out DIR

writes DIR/m2n_plan.json (what tools/reference/m2n_reference.py runs) and DIR/src.yaml,
DIR/dst.yaml: the same layouts cut down to the supported tensors, so that `ferry run --src-layout
--dst-layout` moves exactly the bytes the reference moves. It prints how many tensors and bytes
are supported and, per reason, how many are not.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import re
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass

import yaml

MAX_TENSOR_DIMS = 3  # NCCL_RESHARD_MAX_TENSOR_DIMS, nccl_m2n.h
MAX_MESH_DIMS = 2  # NCCL_RESHARD_MESH_NDIMS, nccl_m2n.h
REPLICATE = "R"

DTYPE_BYTES = {
    "bf16": 2, "fp16": 2, "fp32": 4, "fp64": 8, "fp8_e4m3": 1, "fp8_e5m2": 1,
    "int8": 1, "int16": 2, "int32": 4, "int64": 8, "uint8": 1,
}
# ferry's dtype -> the name nccl.m2n takes (nccl/m2n/tensor.py `_DTYPE_NAMES`); NCCL has no int16.
M2N_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32", "fp64": "float64",
              "fp8_e4m3": "float8_e4m3fn", "fp8_e5m2": "float8_e5m2", "int8": "int8",
              "int32": "int32", "int64": "int64", "uint8": "uint8"}
DTYPE_ALIASES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32",
                 "float": "fp32", "float64": "fp64", "double": "fp64"}


@dataclass(frozen=True)
class Fragment:
    rank: int
    buffer: str
    byte_offset: int
    box: tuple[tuple[int, int], ...]
    strides: tuple[int, ...] | None  # elements; None: row-major over the box


@dataclass(frozen=True)
class Side:
    """One side of a tensor as M2N takes it: mesh over ranks start.., placements, local blocks."""
    start: int
    mesh: tuple[int, ...]
    placements: tuple[object, ...]  # REPLICATE or a tensor dimension, one per mesh dimension
    # rank -> (buffer, byte offset, local shape, the block's first index in the tensor)
    pieces: dict[int, tuple[str, int, tuple[int, ...], tuple[int, ...]]]

    def to_json(self) -> dict:
        return {"start": self.start, "mesh": list(self.mesh), "placements": list(self.placements),
                "pieces": {str(r): [b, o, list(s), list(lo)]
                           for r, (b, o, s, lo) in sorted(self.pieces.items())}}


class Layout:
    """The parts of a layout file this module needs; raises ValueError naming what is malformed."""

    def __init__(self, doc: dict, path: str = "layout") -> None:
        if not isinstance(doc, dict) or not isinstance(doc.get("tensors"), list):
            raise ValueError(f"{path}: not a ferry layout (no 'tensors' list)")
        self.doc = doc
        self.tensors: dict[str, tuple[tuple[int, ...], str]] = {}
        for i, t in enumerate(doc["tensors"]):
            try:
                dtype = DTYPE_ALIASES.get(str(t["dtype"]), str(t["dtype"]))
                self.tensors[str(t["name"])] = (tuple(int(x) for x in t["shape"]), dtype)
            except (KeyError, TypeError, ValueError) as e:
                raise ValueError(f"{path}: tensors[{i}] is malformed: {e}") from None
        self.fragments: dict[str, list[Fragment]] = defaultdict(list)
        for i, f in enumerate(doc.get("fragments") or []):
            try:
                strides = f.get("strides")
                self.fragments[str(f["tensor"])].append(Fragment(
                    rank=int(f["rank"]), buffer=str(f.get("buffer", f["tensor"])),
                    byte_offset=int(f.get("byte_offset", -1)),
                    box=tuple((int(lo), int(hi)) for lo, hi in f["box"]),
                    strides=tuple(int(s) for s in strides) if strides is not None else None))
            except (KeyError, TypeError, ValueError) as e:
                raise ValueError(f"{path}: fragments[{i}] is malformed: {e}") from None
        self.transformed = {str(t["tensor"]) for t in doc.get("transforms") or []}
        self.block_scaled = bool(doc.get("block_scaled"))

    @staticmethod
    def load(path: str) -> "Layout":
        with open(path, encoding="utf-8") as f:
            doc = yaml.load(f, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        return Layout(doc, path)


def _row_major(box_shape: tuple[int, ...], strides: tuple[int, ...] | None) -> bool:
    if strides is None:
        return True
    if len(strides) != len(box_shape):
        return False
    expected = 1
    for extent, stride in zip(reversed(box_shape), reversed(strides)):
        if extent > 1 and stride != expected:
            return False
        expected *= extent
    return True


def _meshes(k: int) -> list[tuple[int, ...]]:
    """Mesh shapes over k ranks, one dimension first."""
    shapes = [(k,)]
    if MAX_MESH_DIMS >= 2:
        shapes += [(a, k // a) for a in range(2, k) if k % a == 0]
    return shapes


def expected_box(shape: tuple[int, ...], mesh: tuple[int, ...], placements: tuple[object, ...],
                 coords: tuple[int, ...]) -> tuple[tuple[int, int], ...] | None:
    """The block of `shape` the rank at mesh `coords` holds, DTensor-style; None if uneven."""
    box = []
    for d, extent in enumerate(shape):
        factor, index = 1, 0
        for axis, p in enumerate(placements):
            if p == d:
                factor *= mesh[axis]
                index = index * mesh[axis] + coords[axis]
        if extent % factor != 0:
            return None
        chunk = extent // factor
        box.append((index * chunk, (index + 1) * chunk))
    return tuple(box)


def _matches(shape, mesh, placements, start, boxes: dict[int, tuple]) -> bool:
    """Whether every rank of the mesh (row-major from `start`) holds the block DTensor gives it."""
    for offset, coords in enumerate(itertools.product(*(range(m) for m in mesh))):
        if expected_box(shape, mesh, placements, coords) != boxes.get(start + offset):
            return False
    return True


def describe_side(shape: tuple[int, ...], fragments: list[Fragment]) -> Side | str:
    """The M2N description of one side of a tensor, or the reason there is none."""
    if len(shape) > MAX_TENSOR_DIMS:
        return f"{len(shape)} dimensions (M2N takes at most {MAX_TENSOR_DIMS})"
    if not fragments:
        return "no fragments"
    by_rank: dict[int, list[Fragment]] = defaultdict(list)
    for f in fragments:
        by_rank[f.rank].append(f)
    for rank, frags in by_rank.items():
        if len(frags) > 1:
            return f"rank {rank} holds {len(frags)} pieces (a fused or interleaved buffer)"
        f = frags[0]
        box_shape = tuple(hi - lo for lo, hi in f.box)
        if f.byte_offset < 0 or not _row_major(box_shape, f.strides):
            return f"rank {rank}'s piece is not one contiguous block of its buffer"
    ranks = sorted(by_rank)
    if ranks != list(range(ranks[0], ranks[0] + len(ranks))):
        return f"ranks {ranks} are not one interval"
    boxes = {r: by_rank[r][0].box for r in ranks}
    choices = [REPLICATE] + list(range(len(shape)))
    for mesh in _meshes(len(ranks)):
        for placements in itertools.product(choices, repeat=len(mesh)):
            if _matches(shape, mesh, placements, ranks[0], boxes):
                pieces = {r: (by_rank[r][0].buffer, by_rank[r][0].byte_offset,
                              tuple(hi - lo for lo, hi in boxes[r]), tuple(lo for lo, _ in boxes[r]))
                          for r in ranks}
                return Side(ranks[0], mesh, tuple(placements), pieces)
    return "its pieces are no even DTensor-style sharding (uneven or padded shards)"


STACKED = re.compile(r"\[(\d+):(\d+)\]")  # ferry's stacked experts: experts.[0:128].gate_proj


def expert_slices(name: str, shape: tuple[int, ...], fragments: list[Fragment], elem: int):
    """A stacked expert tensor (ferry's `experts.[a:b]`, dim 0 the experts) as its experts' own
    tensors, named as checkpoints name them (`experts.5.gate_proj`): [(name, shape, fragments)],
    each fragment cut to that expert; None for any other tensor. A framework that keeps each
    expert in a buffer of its own (Megatron's SequentialMLP) holds one block per expert, which
    M2N can take expert by expert."""
    m = STACKED.search(name)
    if m is None or len(shape) < 2 or int(m.group(2)) - int(m.group(1)) != shape[0]:
        return None
    out = []
    for e in range(shape[0]):
        cut = []
        for f in fragments:
            lo, hi = f.box[0]
            if not lo <= e < hi:
                continue
            extents = [b - a for a, b in f.box]
            strides = f.strides or tuple(math.prod(extents[d + 1:]) for d in range(len(extents)))
            offset = f.byte_offset + (e - lo) * strides[0] * elem if f.byte_offset >= 0 else -1
            cut.append(Fragment(f.rank, f.buffer, offset, f.box[1:], tuple(strides[1:])))
        out.append((name[:m.start()] + str(int(m.group(1)) + e) + name[m.end():], shape[1:], cut))
    return out


def _entry(name, layout_tensor, shape, dtype, s: Side, d: Side) -> dict:
    return {"name": name, "tensor": layout_tensor, "dtype": dtype, "shape": list(shape),
            "bytes": DTYPE_BYTES[dtype] * math.prod(shape), "src": s.to_json(), "dst": d.to_json()}


def _describe(shape, src_frags, dst_frags) -> tuple[Side, Side] | str:
    s = describe_side(shape, src_frags)
    if isinstance(s, str):
        return "source: " + s
    d = describe_side(shape, dst_frags)
    if isinstance(d, str):
        return "destination: " + d
    return s, d


def plan(src: Layout, dst: Layout) -> tuple[list[dict], list[tuple[str, int, str]]]:
    """(supported tensors as M2N plan entries, [(tensor, bytes, reason)] for the others). A stacked
    expert tensor M2N cannot take whole is taken expert by expert when every expert can be."""
    supported, unsupported = [], []
    for name, (shape, dtype) in dst.tensors.items():
        nbytes = DTYPE_BYTES.get(dtype, 0) * math.prod(shape)
        reason = None
        if name not in src.tensors:
            reason = "not in the source layout"
        elif src.tensors[name] != (shape, dtype):
            reason = "another dtype or shape on the source (a conversion)"
        elif dtype not in M2N_DTYPES:
            reason = f"dtype {dtype} (NCCL has no such type)"
        elif name in dst.transformed or dst.block_scaled:
            reason = "transformed on the destination"
        if reason is not None:
            unsupported.append((name, nbytes, reason))
            continue
        whole = _describe(shape, src.fragments.get(name, []), dst.fragments.get(name, []))
        if not isinstance(whole, str):
            supported.append(_entry(name, name, shape, dtype, *whole))
            continue
        elem = DTYPE_BYTES[dtype]
        src_experts = expert_slices(name, shape, src.fragments.get(name, []), elem)
        dst_experts = expert_slices(name, shape, dst.fragments.get(name, []), elem)
        if src_experts is None:
            unsupported.append((name, nbytes, whole))
            continue
        experts = [(n, sh, _describe(sh, sf, df)) for (n, sh, sf), (_, _, df) in zip(src_experts, dst_experts)]
        failed = next((r for _, _, r in experts if isinstance(r, str)), None)
        if failed is not None:
            unsupported.append((name, nbytes, whole + "; expert by expert, " + failed))
            continue
        supported.extend(_entry(n, name, sh, dtype, *sides) for n, sh, sides in experts)
    return supported, unsupported


def cut_layout(layout: Layout, keep: set[str]) -> dict:
    """The layout document with only the tensors in `keep`, their fragments and their buffers."""
    doc = dict(layout.doc)
    doc["tensors"] = [t for t in layout.doc["tensors"] if str(t["name"]) in keep]
    frags = [f for f in layout.doc.get("fragments") or [] if str(f["tensor"]) in keep]
    doc["fragments"] = frags
    used = {(int(f["rank"]), str(f.get("buffer", f["tensor"]))) for f in frags}
    if "buffers" in layout.doc:
        doc["buffers"] = [b for b in layout.doc["buffers"] if (int(b["rank"]), str(b["name"])) in used]
    for key in ("padding", "transforms"):
        if key in layout.doc:
            doc[key] = [p for p in layout.doc[key] if str(p["tensor"]) in keep]
    return doc


def buffer_sizes(layout: Layout, entries: list[dict], side: str) -> dict[str, dict[str, int]]:
    """rank -> buffer -> bytes, for the buffers the plan's `side` pieces live in."""
    declared = {(int(b["rank"]), str(b["name"])): int(b["bytes"])
                for b in layout.doc.get("buffers") or [] if "bytes" in b}
    sizes: dict[str, dict[str, int]] = defaultdict(dict)
    for e in entries:
        elem = DTYPE_BYTES[e["dtype"]]
        for rank, (buf, offset, local, _) in e[side]["pieces"].items():
            end = offset + elem * math.prod(local)
            size = max(declared.get((int(rank), buf), 0), end, sizes[rank].get(buf, 0))
            sizes[rank][buf] = size
    return sizes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--src", required=True, help="source layout file (ferry layout --save)")
    parser.add_argument("--dst", required=True, help="destination layout file")
    parser.add_argument("--out", required=True, help="directory for m2n_plan.json, src.yaml, dst.yaml")
    args = parser.parse_args(argv)
    try:
        src, dst = Layout.load(args.src), Layout.load(args.dst)
    except (OSError, ValueError, yaml.YAMLError) as e:
        print(f"m2n_layouts: {e}", file=sys.stderr)
        return 1
    supported, unsupported = plan(src, dst)
    os.makedirs(args.out, exist_ok=True)
    ranks = {int(r) for e in supported for side in ("src", "dst") for r in e[side]["pieces"]}
    out = {"world": max(ranks) + 1 if ranks else 0, "tensors": supported,
           "src_buffers": buffer_sizes(src, supported, "src"),
           "dst_buffers": buffer_sizes(dst, supported, "dst"),
           "unsupported": [{"name": n, "bytes": b, "reason": r} for n, b, r in unsupported]}
    with open(os.path.join(args.out, "m2n_plan.json"), "w", encoding="utf-8") as f:
        json.dump(out, f)
    keep = {e["tensor"] for e in supported}
    for name, layout in (("src.yaml", src), ("dst.yaml", dst)):
        with open(os.path.join(args.out, name), "w", encoding="utf-8") as f:
            yaml.dump(cut_layout(layout, keep), f, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper),
                      default_flow_style=None, sort_keys=False)
    total = sum(e["bytes"] for e in supported) + sum(b for _, b, _ in unsupported)
    kept = sum(e["bytes"] for e in supported)
    print(f"m2n_layouts: {len(supported)} of {len(supported) + len(unsupported)} tensors, "
          f"{kept / 2**20:.1f} of {total / 2**20:.1f} MiB, are M2N-expressible")
    for reason, count in Counter(r for _, _, r in unsupported).most_common():
        print(f"  not expressible ({count} tensors): {reason}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
