"""ferry.Layout: every fragment of every tensor on one side of a refit, and the ways to make one.

A Layout is immutable once made and wraps the core Layout (core/layout/layout.h) without copying
it into Python; the lists it returns are snapshots. Thread-safe to read.
"""

from __future__ import annotations

import operator
import os
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, NamedTuple, Sequence

from . import _ferry
from ._arrays import dtype_name


@dataclass(frozen=True)
class Shard:
    """One local tensor a rank holds: the global tensor's name, shape and dtype, the box
    [lo, hi) of it this tensor holds, the rank, and the buffer it lives in (default: its name).
    The box's elements are stored contiguous row-major, one after the other in the buffer in the
    order the shards are listed.

    `transform` names what a destination stores instead of the elements themselves, which the
    refit computes as it writes them: "" (the elements, in `dtype`), "neg_exp" (fp32 -exp(x) of
    each, as vLLM keeps Mamba-2's A from the checkpoint's A_log) or "fp8_block" (fp8 e4m3 values,
    one byte each, of a block-scaled buffer a BlockScaled lists: vLLM's block-quantized fp8
    weights). With a transform `dtype` stays the sender's. Every shard of a tensor in one layout
    must name the same transform."""

    name: str
    shape: Sequence[int]
    dtype: Any
    lo: Sequence[int]
    hi: Sequence[int]
    rank: int
    buffer: str | None = None
    transform: str = ""


@dataclass(frozen=True)
class BlockScaled:
    """A destination buffer of block-scaled fp8, as vLLM holds FP8 block-quantized weights
    (quantization_config fp8 with weight_block_size [128, 128]): buffer `buffer` on `rank` holds
    `matrices` dense row-major [rows, cols] e4m3 matrices (its shards' transform is "fp8_block"),
    each cut into 128x128 blocks from its first element, and buffer `scales` (no shards of its
    own) one scale_inv per block. The refit quantizes each matrix from the sender's bf16, fp16 or
    fp32: scale_inv = max(amax, 1e-4) / 448, each value e4m3(x / scale_inv), as vLLM's
    per_block_cast_to_fp8. `scale_fmt`: "float32" (dense fp32 [matrices, ceil(rows/128),
    ceil(cols/128)]), "ue8m0" (the same with power-of-two scales and the values requantized to
    them, as vLLM leaves them for DeepGEMM with E8M0 scales) or "ue8m0_packed" (DeepGEMM's
    packed int32 E8M0 codes, as vLLM holds them on Blackwell); docs/layout-format.md says each
    exactly."""

    rank: int
    buffer: str
    scales: str
    rows: int
    cols: int
    matrices: int = 1
    scale_fmt: str = "float32"


def layout_entry(item: Shard | BlockScaled | Mapping[str, Any],
                 rank: int | None = None) -> Shard | BlockScaled:
    """An item of a shard list as a Shard or a BlockScaled (a mapping with a "scales" key is a
    BlockScaled); `rank`, when given, is a mapping's rank unless it names its own."""
    if isinstance(item, (Shard, BlockScaled)):
        return item
    fields = dict(item) if rank is None else {"rank": rank, **item}
    return BlockScaled(**fields) if "scales" in item else Shard(**fields)


class TensorInfo(NamedTuple):
    """A logical tensor of a layout: its name, global shape and ferry dtype name."""

    name: str
    shape: tuple[int, ...]
    dtype: str


class BufferInfo(NamedTuple):
    """A named memory region of `bytes` bytes on `rank`: what that rank registers."""

    rank: int
    name: str
    bytes: int


class FragmentInfo(NamedTuple):
    """A box [lo, hi) of `tensor` stored in `buffer` on `rank`: element i of the box is at byte
    byte_offset + sum((i[d] - lo[d]) * strides[d]) * itemsize (strides in elements)."""

    tensor: str
    lo: tuple[int, ...]
    hi: tuple[int, ...]
    rank: int
    buffer: str
    byte_offset: int
    strides: tuple[int, ...]


class Layout:
    """All fragments of all tensors on one side (source or destination) of a refit."""

    def __init__(self, impl: _ferry.Layout):
        self._impl = impl

    @staticmethod
    def preset(model: str | os.PathLike[str], framework: str, scale: str | float | None = None,
               first_rank: int = 0) -> "Layout":
        """A model under a framework spec, on ranks first_rank.. (as `ferry layout`): `model` is
        a preset name or a Hugging Face config.json (a path to the file, or to the directory
        holding it); "megatron:tp=2,pp=2" is a trainer (source) side, "vllm:tp=1,dp=2" an
        inference (destination) side. `scale` shrinks the wide dims ("1/64" or 1/64)."""
        text = "" if scale is None else (scale if isinstance(scale, str) else repr(float(scale)))
        name = os.fspath(model) if isinstance(model, os.PathLike) else model
        return Layout(_ferry.Layout.preset(_text("model", name),
                                           _text("framework", framework), text,
                                           _rank("first_rank", first_rank)))

    @staticmethod
    def load(path: str) -> "Layout":
        """A layout file (YAML or JSON, docs/layout-format.md)."""
        return Layout(_ferry.Layout.load(str(path)))

    @staticmethod
    def from_yaml(text: str) -> "Layout":
        """A layout from YAML or JSON text (the format of Layout.load's files,
        docs/layout-format.md). Raises InvalidArgumentError naming the key and line at fault."""
        return Layout(_ferry.Layout.from_yaml(_text("text", text)))

    @staticmethod
    def from_shards(shards: Iterable[Shard | BlockScaled | Mapping[str, Any]]) -> "Layout":
        """A layout from the local tensors of every rank (gather each rank's list first: every
        rank of a refit plans from the same two layouts), and the block-scaled buffers that
        fp8_block shards lie in (BlockScaled entries in the same list; a mapping with a "scales"
        key is one). Raises FerryError for a box outside its tensor or a name given two shapes or
        dtypes, ValueError for a block-scaled buffer that is unlisted, holds other shards or
        does not match its matrices; coverage is not required here (validate() and ferry.plan
        report elements nobody holds)."""
        rows, scaled = [], []
        for s in map(layout_entry, shards):
            if isinstance(s, BlockScaled):
                scaled.append((_rank("rank", s.rank), _text("buffer", s.buffer),
                               _text("scales", s.scales), int(s.matrices), int(s.rows),
                               int(s.cols), _text("scale_fmt", s.scale_fmt)))
            else:
                rows.append((s.name, list(s.shape), dtype_name(s.dtype), list(s.lo),
                             list(s.hi), int(s.rank), s.buffer or "", s.transform))
        return Layout(_ferry.Layout.from_shards(rows, scaled))

    @staticmethod
    def from_dtensors(tensors: Mapping[str, Any], first_rank: int = 0) -> "Layout":
        """A layout from torch DTensors (name -> DTensor) with Shard(dim)/Replicate() placements:
        each mesh rank r holds its shard in buffer `name` on ferry rank first_rank + r. Every rank
        can build it alone: the mesh and placements say where every shard is."""
        rows = []
        for name, t in tensors.items():
            placements = []
            for p in t.placements:
                if p.is_shard():
                    placements.append(("shard", int(p.dim)))
                elif p.is_replicate():
                    placements.append(("replicate", 0))
                else:
                    raise ValueError(f"{name}: placement {p} is neither Shard nor Replicate; "
                                     "redistribute partial tensors before a refit")
            mesh = t.device_mesh.mesh
            ranks = [first_rank + int(r) for r in mesh.flatten().tolist()]
            rows.append((name, list(t.shape), dtype_name(t.dtype), list(mesh.shape), ranks,
                         placements, name))
        return Layout(_ferry.Layout.from_meshes(rows))

    def save(self, path: str) -> None:
        """Writes the layout as YAML (JSON when the path ends in .json is still YAML-readable)."""
        self._impl.save(str(path))

    def to_yaml(self) -> str:
        """The layout as YAML text, as save() writes it and from_yaml() reads it."""
        return self._impl.to_yaml()

    def validate(self) -> None:
        """Raises FerryError naming the tensor, ranks and region at fault (as `ferry layout
        --validate`): overlaps, boxes out of bounds, elements no fragment covers."""
        self._impl.validate()

    @property
    def ranks(self) -> list[int]:
        """The ranks that hold a buffer of this layout, ascending."""
        return list(self._impl.ranks())

    @property
    def tensors(self) -> list[TensorInfo]:
        """The logical tensors: name, global shape and ferry dtype name."""
        return [TensorInfo(n, tuple(s), d) for n, s, d in self._impl.tensors()]

    @property
    def stored_dtypes(self) -> dict[str, str]:
        """The tensors whose fragments hold a transform of their elements rather than the
        elements (Shard.transform; vLLM's Mamba A in the `vllm:` presets), each with the dtype
        its fragments' elements are stored in: what fragment_view and register take there."""
        return {name: dtype for name, _, dtype in self._impl.transforms()}

    @property
    def block_scaled(self) -> list[BlockScaled]:
        """The destination buffers of block-scaled fp8 and their scales buffers (BlockScaled;
        the `vllm:...,quant=fp8_block` and `sglang:...,quant=fp8_block` presets' and
        from_shards' own)."""
        return [BlockScaled(rank, buffer, scales, rows, cols, matrices, fmt)
                for rank, buffer, scales, matrices, rows, cols, fmt in self._impl.block_scaled()]

    def buffers(self, rank: int | None = None) -> list[BufferInfo]:
        """The buffers (of every rank, or of `rank`): what each rank registers before a run."""
        return [BufferInfo(*b) for b in self._impl.buffers() if rank is None or b[0] == rank]

    def fragments(self, rank: int | None = None) -> list[FragmentInfo]:
        """The fragments (of every rank, or of `rank`): where each box of each tensor lives in
        its buffer; fragment_view() turns one into a view of the array behind that buffer."""
        rows = self._impl.fragments(-1 if rank is None else _rank("rank", rank))
        return [FragmentInfo(r["tensor"], tuple(r["lo"]), tuple(r["hi"]), r["rank"], r["buffer"],
                             r["byte_offset"], tuple(r["strides"])) for r in rows]

    def __repr__(self) -> str:
        return (f"ferry.Layout({len(self._impl.tensors())} tensors, "
                f"{len(self._impl.buffers())} buffers, ranks {self.ranks})")


def _text(name: str, value: Any) -> str:
    """`value` if it is a str, else a TypeError naming the argument (not the compiled signature)."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__}")
    return value


def _rank(name: str, value: Any) -> int:
    """`value` as a rank number: any integer type (numpy's too); a TypeError or ValueError naming
    the argument otherwise. ferry's own checks (negative, past kMaxRanks) follow."""
    try:
        number = None if isinstance(value, bool) else operator.index(value)
    except TypeError:
        number = None
    if number is None:
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}")
    if not -2**31 <= number < 2**31:
        raise ValueError(f"{name} {number} is not a rank: ranks are below 131072 (kMaxRanks)")
    return number
