"""The trainer's side of a vLLM refit as ferry shards: the box of every parameter each trainer
rank holds, from vLLM's trainer-side parameter metadata (the `ParamMeta` list of a vLLM
`WeightSource`: name, wire dtype, full shape, owners, mesh shape, placements).

The semantics are vLLM's (vllm/distributed/weight_transfer/base.py, `ParamMeta` and
`WeightSource.iter_local`): owners None means every trainer rank holds the whole tensor; the
owners form a row-major mesh of `mesh_shape`; each mesh axis either replicates or shards one
tensor dim the way `torch.chunk` does, the outer axis first when two axes shard one dim (as
DTensor does). Works on any object with those attributes; imports neither torch nor vLLM.
"""

from __future__ import annotations

from typing import Any, Iterable

from ._layout import Shard


def chunk_range(lo: int, hi: int, parts: int, index: int) -> tuple[int, int]:
    """[start, stop) of chunk `index` when [lo, hi) is split into `parts` as torch.chunk splits
    it: chunks of ceil(n / parts), the last ones shorter or empty."""
    size = -(-(hi - lo) // parts)
    start = min(lo + index * size, hi)
    return start, min(start + size, hi)


def mesh_coordinate(index: int, mesh_shape: tuple[int, ...]) -> tuple[int, ...]:
    """The row-major coordinate of the `index`-th owner in a mesh of `mesh_shape`."""
    coordinate = []
    for extent in reversed(mesh_shape):
        coordinate.append(index % extent)
        index //= extent
    return tuple(reversed(coordinate))


def param_box(meta: Any, rank: int, num_ranks: int) -> tuple[list[int], list[int]] | None:
    """The box [lo, hi) of `meta`'s tensor that trainer `rank` holds (of `num_ranks`), or None
    where the rank owns none of it (not an owner, or an empty chunk)."""
    owners = tuple(range(num_ranks)) if meta.owners is None else tuple(meta.owners)
    if rank not in owners:
        return None
    lo, hi = [0] * len(meta.shape), [int(e) for e in meta.shape]
    if meta.placements is not None:
        mesh_shape = tuple(meta.mesh_shape or (len(owners),))
        coordinate = mesh_coordinate(owners.index(rank), mesh_shape)
        for axis, placement in enumerate(meta.placements):
            dim = getattr(placement, "dim", None)  # vLLM's Shard has a dim, Replicate none
            if dim is not None:
                lo[dim], hi[dim] = chunk_range(lo[dim], hi[dim], mesh_shape[axis],
                                               coordinate[axis])
    if any(h <= l for l, h in zip(lo, hi)):
        return None
    return lo, hi


def trainer_shards(metadata: Iterable[Any], rank: int, num_ranks: int) -> list[Shard]:
    """The shards trainer `rank` holds, one per parameter it owns, each in a buffer named after
    the parameter (what the rank registers: the tensor `iter_local` yields for that name)."""
    if not 0 <= rank < num_ranks:
        raise ValueError(f"trainer rank {rank} is outside the {num_ranks} trainer ranks")
    shards = []
    for meta in metadata:
        box = param_box(meta, rank, num_ranks)
        if box is not None:
            shards.append(Shard(meta.name, tuple(meta.shape), meta.dtype, box[0], box[1], rank,
                                meta.name))
    return shards
