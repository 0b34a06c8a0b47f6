"""The inference side of a vLLM refit as ferry shards: for every parameter of a vLLM worker's
model, which boxes of which checkpoint (Hugging Face) tensors it holds and in what order, so that
ferry writes straight into the parameter's own storage.

Each vLLM parameter is one ferry buffer (named like the parameter) holding one or more boxes,
stored one after the other, row-major, from its first byte. The boxes encode how vLLM's weight
loaders place checkpoint tensors into tensor-parallel shards:

- QKVParallelLinear (vllm/model_executor/layers/linear.py, `QKVParallelLinear.weight_loader`):
  the fused qkv_proj holds rows [r*q, (r+1)*q) of q_proj, then rows [s*kv, (s+1)*kv) of k_proj and
  of v_proj, with r the TP rank, s = r // num_kv_head_replicas (KV heads replicated when TP
  exceeds their count), q = num_heads * head_size, kv = num_kv_heads * head_size (v_head_size for
  v) in local heads; its bias (Qwen2's, vllm/model_executor/models/qwen2.py `bias=True`, a 1-D
  parameter with output_dim 0) holds the same rows of q_proj.bias, k_proj.bias and v_proj.bias;
- MergedColumnParallelLinear (same file, `MergedColumnParallelLinear.weight_loader`): gate_up_proj
  holds the r-th 1/TP of each of gate_proj, up_proj in order;
- ColumnParallelLinear / RowParallelLinear (same file): the r-th 1/TP along the parameter's
  `output_dim` / `input_dim` (a row-parallel bias is whole);
- VocabParallelEmbedding / ParallelLMHead (vllm/model_executor/layers/vocab_parallel_embedding.py,
  `weight_loader` and `shard_indices`): rows [org_vocab_start_index, org_vocab_end_index) at the
  start of the parameter, the padding rows after them untouched;
- anything else (norms, replicated layers): the whole tensor, same shape on both sides.

Fused names come from the model's `packed_modules_mapping` (vllm/model_executor/models/llama.py:
{"qkv_proj": ["q_proj", "k_proj", "v_proj"], "gate_up_proj": ["gate_proj", "up_proj"]}). The
layers are recognised by the attributes vLLM gives them (duck-typed, so this module imports
neither vLLM nor, itself, torch). A parameter that fits none of these, or whose checkpoint tensor
the trainer does not send, or whose dtype differs from the trainer's, raises ValueError naming
it: ferry moves bytes and must not guess a transform (quantized layers are not supported).
"""

from __future__ import annotations

from typing import Any, Mapping, NamedTuple

from ._arrays import dtype_name
from ._layout import Shard


class Piece(NamedTuple):
    """Checkpoint tensor `tensor`, rows [start, stop) along `dim` (None: the whole tensor)."""

    tensor: str
    dim: int | None
    start: int
    stop: int


def _fused_pieces(name: str, module: Any, param: Any, subs: list[str]) -> list[Piece]:
    prefix, _, leaf_attr = name.rpartition(".")
    parent = prefix.rpartition(".")[0]
    hf = [f"{parent}.{s}.{leaf_attr}" if parent else f"{s}.{leaf_attr}" for s in subs]
    dim, tp_rank, tp_size = param.output_dim, module.tp_rank, module.tp_size
    if hasattr(module, "num_kv_head_replicas"):  # QKVParallelLinear
        head, v_head = module.head_size, getattr(module, "v_head_size", module.head_size)
        sizes = [module.num_heads * head, module.num_kv_heads * head,
                 module.num_kv_heads * v_head]
        kv_rank = tp_rank // module.num_kv_head_replicas
        ranks = [tp_rank, kv_rank, kv_rank]
    else:  # MergedColumnParallelLinear: output_sizes are the global sizes
        sizes = [size // tp_size for size in module.output_sizes]
        ranks = [tp_rank] * len(sizes)
    if len(sizes) != len(hf):
        raise ValueError(f"vLLM parameter {name}: {len(sizes)} fused outputs but "
                         f"packed_modules_mapping names {len(hf)} ({subs})")
    return [Piece(t, dim, r * s, (r + 1) * s) for t, s, r in zip(hf, sizes, ranks)]


def param_pieces(name: str, module: Any, param: Any,
                 packed: Mapping[str, list[str]]) -> list[Piece]:
    """The checkpoint boxes vLLM parameter `name` (of `module`) holds, in storage order."""
    leaf = name.rpartition(".")[0].rpartition(".")[2]
    out_dim = getattr(param, "output_dim", None)
    in_dim = getattr(param, "input_dim", None)
    tp_rank = getattr(module, "tp_rank", 0)
    if hasattr(module, "shard_indices") and out_dim is not None:
        indices = module.shard_indices
        return [Piece(name, out_dim, indices.org_vocab_start_index,
                      indices.org_vocab_end_index)]
    if leaf in packed and out_dim is not None and hasattr(module, "output_sizes"):
        return _fused_pieces(name, module, param, list(packed[leaf]))
    if hasattr(module, "input_is_parallel") and in_dim is not None:
        size = param.shape[in_dim]
        return [Piece(name, in_dim, tp_rank * size, (tp_rank + 1) * size)]
    if hasattr(module, "gather_output") and out_dim is not None:
        size = param.shape[out_dim]
        return [Piece(name, out_dim, tp_rank * size, (tp_rank + 1) * size)]
    return [Piece(name, None, 0, 0)]


def _piece_box(name: str, param: Any, piece: Piece,
               shape: tuple[int, ...]) -> tuple[list[int], list[int]]:
    """The box of `piece` in its checkpoint tensor of `shape`, checked against the parameter."""
    local = tuple(param.shape)
    if len(shape) != len(local):
        raise ValueError(f"vLLM parameter {name} {list(local)}: checkpoint tensor "
                         f"{piece.tensor} has shape {list(shape)}")
    lo, hi = [0] * len(shape), list(shape)
    if piece.dim is not None:
        if not 0 <= piece.start <= piece.stop <= shape[piece.dim]:
            raise ValueError(f"vLLM parameter {name}: rows [{piece.start}, {piece.stop}) of dim "
                             f"{piece.dim} are outside {piece.tensor} {list(shape)}")
        lo[piece.dim], hi[piece.dim] = piece.start, piece.stop
    for d, (whole, mine) in enumerate(zip(shape, local)):
        if d != piece.dim and whole != mine:
            raise ValueError(f"vLLM parameter {name} {list(local)} does not hold {piece.tensor} "
                             f"{list(shape)} as vLLM's loaders lay it out (dim {d})")
    return lo, hi


def engine_shards(model: Any, source: Mapping[str, Any],
                  rank: int) -> tuple[list[Shard], dict[str, Any]]:
    """The shards of every parameter of `model` (a vLLM worker's torch module) on ferry rank
    `rank`, against the checkpoint tensors the trainer sends (`source`: name -> object with
    `shape` and `dtype`), and the parameter storage behind each buffer (`param.data`)."""
    packed = getattr(model, "packed_modules_mapping", None) or {}
    modules = dict(model.named_modules())
    shards, buffers = [], {}
    for name, param in model.named_parameters():
        module = modules[name.rpartition(".")[0]]
        pieces = param_pieces(name, module, param, packed)
        rows = 0
        for piece in pieces:
            if piece.tensor not in source:
                raise ValueError(f"vLLM parameter {name}: the trainer sends no tensor "
                                 f"{piece.tensor!r}")
            sent = source[piece.tensor]
            if dtype_name(sent.dtype) != dtype_name(param.dtype):
                raise ValueError(f"vLLM parameter {name} is {param.dtype} but the trainer "
                                 f"sends {piece.tensor} as {sent.dtype}")
            lo, hi = _piece_box(name, param, piece, tuple(sent.shape))
            rows += hi[piece.dim] - lo[piece.dim] if piece.dim is not None else 0
            shards.append(Shard(piece.tensor, tuple(sent.shape), param.dtype, lo, hi, rank, name))
        dim = pieces[0].dim
        padded = hasattr(module, "shard_indices")  # vocab padding rows follow the boxes
        if dim is not None and (rows > param.shape[dim] or
                                (rows < param.shape[dim] and not padded)):
            raise ValueError(f"vLLM parameter {name} has {param.shape[dim]} rows on dim {dim}, "
                             f"its checkpoint boxes cover {rows}")
        buffers[name] = param.data
    return shards, buffers
