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
- RoutedExperts (vllm/model_executor/layers/fused_moe/routed_experts.py, vLLM 0.33's FusedMoE
  weights): `w13_weight` [local experts, 2 * I/tp, H] holds, for each local slot, rows
  [t*I/tp, (t+1)*I/tp) of `{layer}.{e}.{gate}.weight` then of `{layer}.{e}.{up}.weight`
  (`_load_w13`), `w2_weight` [local experts, H, I/tp] those columns of `{layer}.{e}.{down}.weight`
  (`_load_w2`), with `{layer}` the layer's `layer_name`, t its MoE TP rank
  (`moe_config.tp_rank`: 0 under expert parallelism), {gate, up, down} its checkpoint names and e
  the expert whose weights slot s holds (`expert_map_manager.map_global_to_local`, linear or
  round-robin placement). Under EPLB the slots are physical experts, E + R of them over the EP
  ranks, and slot s holds the logical expert the layer's current EPLB map gives its physical
  expert (`expert_slots`), several slots one expert where it has replicas; vLLM moves experts
  between slots while it serves, and the worker plans again when they moved (eplb_placement).
  Refused: fused shared experts, padded or transposed expert weights, any
  other expert parameter (biases, the scales of quantizations other than FP8's), and expert
  kernels other than Triton's (FP8's: _vllm_fp8.py), which rearrange the weights after
  loading (`_LOADED_LAYOUT_KERNELS`);
- anything else (norms, replicated layers): the whole tensor, same shape on both sides.

A merged column-parallel layer (several outputs) that `packed_modules_mapping` does not name is
loaded from one checkpoint tensor of its own name ("already fused on disk",
MergedColumnParallelLinear.weight_loader without a shard id): each output's 1/TP of its rows, in
order; without such a tensor it is refused. A Mamba-2 mixer (vllm/model_executor/layers/mamba/
mamba_mixer2.py, MambaMixer2) is built of such layers: in_proj holds [z; x; B; C; dt] of the
checkpoint's in_proj, conv1d [x; B; C] of its conv1d (weight and bias), each 1/TP; A, D and
dt_bias hold their heads' 1/TP, A stored as fp32 -exp(A_log) (its composed_weight_loader): its
shard carries the "neg_exp" transform, which the refit applies as it writes; the gated norm
(Mixer2RMSNormGated) holds its 1/TP of norm.weight. A mixer with one group under TP > 1 holds
that group's B and C whole on every rank, as vLLM replicates it (mamba_v2_sharded_weight_loader).

Checkpoint names are vLLM's parameter names unless the model's `hf_to_vllm_mapper` renames
them (its renames alone: nemotron_h.py maps backbone -> model, A_log -> A, embeddings ->
embed_tokens): each name the trainer sends is mapped as vLLM maps it when loading.

An MTP drafter (speculative decoding's method "mtp": vllm/model_executor/models/deepseek_mtp.py
DeepSeekMTP and the drafters built like it) loads the checkpoint's MTP layers (layers
num_hidden_layers.. of the checkpoint) under its own names: model.layers.K.X as
model.layers.K.mtp_block.X for the decoder layer's tensors, enorm, hnorm, eh_proj and shared_head
under their own names (its `_rewrite_spec_layer_name`, which ferry calls). The parameters it
shares with its target (the target's embed_tokens under one PP rank, the target's lm_head as each
layer's shared_head.head: vllm/v1/spec_decode/llm_base_proposer.py) are the target's, left out of
the drafter's shards (`skip`).

MLA attention (DeepSeek-V2/V3, Kimi-K2; vllm/model_executor/layers/attention/mla_attention.py,
`MLAAttention.process_weights_after_loading`) derives its decode weights from `kv_b_proj` after
loading: `split_kv_b_proj` reads kv_b_proj.weight (`get_and_maybe_dequant_weights`, which returns
the weight itself when it is unquantized and already in the activation dtype, and dequantizes an
FP8 one), and W_UV = [L, N, V]^T and W_UK_T = [L, N, P] permuted are registered as parameters.
Where they are views of kv_b_proj.weight's bytes, ferry writes kv_b_proj and the views read the
new weights. Where they are copies (an FP8 kv_b_proj, or activations of another dtype) the worker
derives them again after each update with vLLM's own split_kv_b_proj (mla_copies). Neither is a
buffer of its own. Where vLLM keeps them otherwise (the AMX backend's packed weights, the AITER
BMMs' W_K/W_V, DCP query replication's gathered W_UK_T_dcp_qrep) the module is refused by name.

Fused names come from the model's `packed_modules_mapping` (vllm/model_executor/models/llama.py:
{"qkv_proj": ["q_proj", "k_proj", "v_proj"], "gate_up_proj": ["gate_proj", "up_proj"]}); a
drafter without one fuses as its target does (engine_shards' `packed`).

FP8 block-quantized linear and expert layers hold e4m3 values of the same boxes in `weight`
(`w13_weight`, `w2_weight`; their shards' transform is "fp8_block") and their scales in
`weight_scale_inv` (`w13_weight_scale_inv`, ...), block-scaled buffer pairs (ferry.BlockScaled)
in the scale format the layer's kernel leaves: `_vllm_fp8.py` says which.

The layers are recognised by the attributes vLLM gives them (duck-typed, so this module imports
neither vLLM nor, itself, torch). A parameter that fits none of these, or whose checkpoint
tensor the trainer does not send, or whose dtype differs from the trainer's, raises ValueError
naming it: ferry moves bytes and applies no transform but those named above.
"""

from __future__ import annotations

from typing import Any, Callable, Collection, Mapping, NamedTuple

from ._arrays import dtype_name
from ._layout import BlockScaled, Shard
from ._vllm_fp8 import FP8_WEIGHTS, block_scaled, is_fp8_block_method, quantized_layers


class Piece(NamedTuple):
    """Checkpoint tensor `tensor` (named as vLLM names it), rows [start, stop) along `dim`
    (None: the whole tensor)."""

    tensor: str
    dim: int | None
    start: int
    stop: int
    # what the parameter stores of the box: "" itself, "neg_exp" fp32 -exp, "fp8_block" e4m3
    transform: str = ""


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


# The expert kernels that compute from w13_weight and w2_weight as the loaders left them
# (vllm/model_executor/layers/fused_moe/oracle/unquantized.py,
# `convert_to_unquantized_kernel_format`): FlashInfer CUTLASS swaps the gate and up halves,
# FlashInfer TRT-LLM (Blackwell's default) pads and permutes rows into its block layout, AITER
# shuffles, MoonEP regroups, XPU transposes, the CPU backend prepacks.
_LOADED_LAYOUT_KERNELS = ("TRITON", "BATCHED_TRITON")


def _check_expert_kernel(name: str, module: Any) -> None:
    """Refuses RoutedExperts `module` unless its kernel reads the weights as loaded (an FP8
    layer's kernel: checked by _vllm_fp8.quantized_layers, which engine_shards runs first)."""
    method = getattr(module, "quant_method", None)
    if is_fp8_block_method(method):
        return
    backend = getattr(method, "unquantized_backend", None)
    if backend is None:
        raise ValueError(f"vLLM parameter {name}: experts under {type(method).__name__} are "
                         "kept by their kernel; not supported")
    if backend.name not in _LOADED_LAYOUT_KERNELS:
        raise ValueError(f"vLLM parameter {name}: the {backend.value} MoE kernel rearranges "
                         "the expert weights after loading, which an in-place refit would "
                         "not; serve with --moe-backend triton")


def _eplb_states(modules: Mapping[str, Any]) -> dict[int, Any]:
    """The EPLB state of each RoutedExperts module under EPLB, by the module's id: its MoE
    runner's router's EplbLayerState (vllm/model_executor/layers/fused_moe/runner/moe_runner.py,
    `eplb_state` is `self.router.eplb_state`; None without EPLB)."""
    states = {}
    for module in modules.values():
        state = getattr(getattr(module, "router", None), "eplb_state", None)
        if state is not None and hasattr(module, "routed_experts"):
            states[id(module.routed_experts)] = state
    return states


def _physical_experts(name: str, config: Any, state: Any) -> list[int]:
    """Under EPLB, the logical expert each physical expert holds: the inverse of the layer's
    logical_to_physical_map ([E, replicas], -1 where unused: vllm/distributed/eplb/eplb_state.py
    EplbLayerState, a view of the map EplbState rewrites in place as it moves experts,
    _commit_eplb_maps), of which logical_replica_count columns are used; before vLLM registers
    the layer's state (set_eplb_state), the arrangement its loader loads: the E experts, then
    replicas of experts 0, 1, ... (EplbState.build_initial_global_physical_to_logical_map)."""
    physical, logical = config.num_experts, config.num_logical_experts
    table = getattr(state, "logical_to_physical_map", None)
    if table is None:
        return list(range(logical)) + [i % logical for i in range(physical - logical)]
    width = int(state.logical_replica_count.max())
    held = [-1] * physical
    for expert, slots in enumerate(table[:, :width].tolist()):
        for slot in slots:
            if not -1 <= slot < physical or (slot >= 0 and held[slot] >= 0):
                raise ValueError(f"vLLM parameter {name}: the EPLB map places expert {expert} "
                                 f"in physical slot {slot} of {physical}, which is not free")
            if slot >= 0:
                held[slot] = expert
    return held


def expert_slots(name: str, module: Any, eplb: Any = None) -> list[int]:
    """The expert each local slot of RoutedExperts `module` holds (`eplb`: its EPLB state, under
    EPLB), checked to be what ferry can write in place."""
    _check_expert_kernel(name, module)
    config = module.moe_config
    if config.moe_parallel_config.enable_eplb and eplb is None:
        raise ValueError(f"vLLM parameter {name}: EPLB is on but its MoE runner's router has no "
                         "EPLB state (a MoE layer ferry does not know)")
    manager = module.expert_map_manager
    if manager.num_fused_shared_experts or \
            (eplb is None and config.num_experts != config.num_logical_experts):
        raise ValueError(f"vLLM parameter {name}: fused shared experts, or redundant experts "
                         "without EPLB, are not supported")
    held = _physical_experts(name, config, eplb) if eplb is not None else \
        list(range(config.num_experts))
    slots: dict[int, int] = {}
    for physical, expert in enumerate(held):
        slot = manager.map_global_to_local(physical)
        if slot < 0:
            continue
        if expert < 0:
            raise ValueError(f"vLLM parameter {name}: EPLB maps no expert to physical slot "
                             f"{physical} (elastic EP scaling up); not supported")
        slots[slot] = expert
    if sorted(slots) != list(range(module.local_num_experts)):
        raise ValueError(f"vLLM parameter {name}: local expert slots {sorted(slots)} are not "
                         f"0..{module.local_num_experts - 1}")
    return [slots[s] for s in range(module.local_num_experts)]


def eplb_placement(model: Any, skip: Collection[int] = ()) -> dict[str, tuple[int, ...]]:
    """The expert each local slot holds, by RoutedExperts module name, of `model`'s MoE layers
    under EPLB whose weights are not in `skip`: what vLLM's EPLB changes while it serves, so that
    a plan made for one placement is made again when it differs (ferry.vllm)."""
    modules = dict(model.named_modules())
    states = _eplb_states(modules)
    return {name: tuple(expert_slots(name, module, states[id(module)]))
            for name, module in modules.items()
            if id(module) in states and id(module.w13_weight) not in skip}


def expert_pieces(name: str, module: Any, param: Any, eplb: Any = None) -> list[Piece]:
    """The checkpoint boxes RoutedExperts parameter `name` holds, slot by slot (`eplb`: the
    layer's EPLB state, under EPLB)."""
    leaf = name.rpartition(".")[2]
    if leaf not in ("w13_weight", "w2_weight") or getattr(param, "is_transposed", False):
        raise ValueError(f"vLLM parameter {name}: only untransposed w13_weight and w2_weight "
                         "expert weights are supported")
    config = module.moe_config
    if config.tp_shard_with_padding:
        raise ValueError(f"vLLM parameter {name}: padded expert shards are not supported")
    tp, rank = config.moe_parallel_config.tp_size, config.tp_rank
    size = config.intermediate_size // tp
    if size * tp != config.intermediate_size or size != config.intermediate_size_per_partition:
        raise ValueError(f"vLLM parameter {name}: intermediate size {config.intermediate_size} "
                         f"is not split evenly as {config.intermediate_size_per_partition} a "
                         f"rank over {tp}")
    if leaf == "w13_weight":
        projections, dim = [module.ckpt_gate_proj_name, module.ckpt_up_proj_name], 0
    else:
        projections, dim = [module.ckpt_down_proj_name], 1
    return [Piece(f"{module.layer_name}.{expert}.{projection}.weight", dim, rank * size,
                  (rank + 1) * size)
            for expert in expert_slots(name, module, eplb)
            for projection in projections if projection is not None]


def _fused_on_disk_pieces(name: str, module: Any, param: Any) -> list[Piece]:
    """A merged layer loaded from one checkpoint tensor of its own name
    (MergedColumnParallelLinear.weight_loader without a shard id: "already fused on disk", as
    a Mamba-2 mixer's in_proj and conv1d): each output's 1/TP of its own rows, in order."""
    pieces, offset, dim = [], 0, param.output_dim
    for size in module.output_sizes:
        part = size // module.tp_size
        start = offset + module.tp_rank * part
        pieces.append(Piece(name, dim, start, start + part))
        offset += size
    return pieces


def _mixer_pieces(prefix: str, mixer: Any) -> dict[str, list[Piece]]:
    """The pieces of the parameters a Mamba-2 mixer's own loaders place (mamba_mixer2.py
    MambaMixer2), by name: A, D and dt_bias split over TP by heads (sharded_weight_loader(0)), A
    stored as fp32 -exp(A_log) (its composed_weight_loader); with one group under TP > 1, which
    vLLM replicates on every rank (in_proj and conv1d ColumnParallelLinears loaded by
    mamba_v2_sharded_weight_loader with duplicate_groups), in_proj's z, x and dt 1/TP with B and
    C whole and conv1d's x 1/TP with B and C whole. Its other layers follow their own rules."""
    tp, rank = mixer.in_proj.tp_size, mixer.in_proj.tp_rank
    pieces = {}
    for leaf in ("A", "D", "dt_bias"):
        name, size = f"{prefix}.{leaf}", getattr(mixer, leaf).shape[0]
        pieces[name] = [Piece(name, 0, rank * size, (rank + 1) * size,
                              "neg_exp" if leaf == "A" else "")]
    if hasattr(mixer.in_proj, "output_sizes") or tp == 1:
        return pieces  # in_proj and conv1d split output by output (_fused_on_disk_pieces)
    inner, state, heads = mixer.intermediate_size, mixer.ssm_state_size, mixer.num_heads

    def split(offset: int, size: int) -> tuple[int, int]:
        return offset + rank * (size // tp), offset + (rank + 1) * (size // tp)

    in_proj = [split(0, inner), split(inner, inner), (2 * inner, 2 * inner + state),
               (2 * inner + state, 2 * inner + 2 * state), split(2 * inner + 2 * state, heads)]
    conv1d = [split(0, inner), (inner, inner + state), (inner + state, inner + 2 * state)]
    for layer, rows in (("in_proj", in_proj), ("conv1d", conv1d)):
        for leaf in ("weight", "bias"):
            if getattr(getattr(mixer, layer), leaf, None) is not None:
                name = f"{prefix}.{layer}.{leaf}"
                pieces[name] = [Piece(name, 0, start, stop) for start, stop in rows]
    return pieces


def _all_mixer_pieces(modules: Mapping[str, Any]) -> dict[str, list[Piece]]:
    """The pieces of the parameters Mamba-2 mixers' own loaders place, by parameter name."""
    pieces = {}
    for prefix, module in modules.items():
        if all(hasattr(module, a) for a in ("A", "conv1d", "in_proj")):
            pieces.update(_mixer_pieces(prefix, module))
    return pieces


def param_pieces(name: str, module: Any, param: Any, packed: Mapping[str, list[str]],
                 sent: Callable[[str], bool], eplb: Any = None) -> list[Piece]:
    """The checkpoint boxes vLLM parameter `name` (of `module`) holds, in storage order;
    `sent` says whether the trainer sends a tensor of that (vLLM) name; `eplb` is a MoE
    layer's EPLB state."""
    if hasattr(module, "expert_map_manager"):
        return expert_pieces(name, module, param, eplb)
    leaf = name.rpartition(".")[0].rpartition(".")[2]
    out_dim = getattr(param, "output_dim", None)
    if leaf in packed and out_dim is not None and hasattr(module, "output_sizes"):
        return _fused_pieces(name, module, param, list(packed[leaf]))
    if len(getattr(module, "output_sizes", ())) > 1:
        # (QKVParallelLinear, with its KV-head replicas, only through the packing map)
        if out_dim is not None and sent(name) and not hasattr(module, "num_kv_head_replicas"):
            return _fused_on_disk_pieces(name, module, param)
        raise ValueError(f"vLLM parameter {name}: merged from {len(module.output_sizes)} "
                         "outputs, each split over TP, that the model's packed_modules_mapping "
                         "does not name, and the trainer sends no fused tensor of its name")
    return _split_pieces(name, module, param)


def _split_pieces(name: str, module: Any, param: Any) -> list[Piece]:
    """A layer's parameter that holds one box of one tensor: the rank's rows of the padded
    vocabulary, of a column- or row-parallel split or of a gated norm, else the whole tensor."""
    out_dim = getattr(param, "output_dim", None)
    in_dim = getattr(param, "input_dim", None)
    tp_rank = getattr(module, "tp_rank", 0)
    if hasattr(module, "shard_indices") and out_dim is not None:
        indices = module.shard_indices
        return [Piece(name, out_dim, indices.org_vocab_start_index,
                      indices.org_vocab_end_index)]
    if hasattr(module, "full_hidden_size") and hasattr(module, "per_rank_hidden_size"):
        size = module.per_rank_hidden_size  # Mixer2RMSNormGated: its weight split over TP
        return [Piece(name, 0, tp_rank * size, (tp_rank + 1) * size)]
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


def _expert_box(name: str, param: Any, piece: Piece,
                shape: tuple[int, ...]) -> tuple[list[int], list[int]]:
    """The box of expert `piece` in its checkpoint tensor of `shape` (one expert's matrix),
    whose unsharded dim must be the parameter's own (H)."""
    whole = 1 - piece.dim
    if len(shape) != 2 or shape[whole] != param.shape[1 + whole] or \
            not 0 <= piece.start <= piece.stop <= shape[piece.dim]:
        raise ValueError(f"vLLM parameter {name} {list(param.shape)} does not hold rows "
                         f"[{piece.start}, {piece.stop}) of dim {piece.dim} of {piece.tensor} "
                         f"{list(shape)} as vLLM's expert loaders lay it out")
    lo, hi = [0, 0], list(shape)
    lo[piece.dim], hi[piece.dim] = piece.start, piece.stop
    return lo, hi


def _check_coverage(name: str, module: Any, param: Any, pieces: list[Piece],
                    boxes: list[tuple[list[int], list[int]]], experts: bool) -> None:
    """Refuses a parameter its boxes do not fill as vLLM's loaders fill it (`experts`: the
    parameter is a RoutedExperts weight)."""
    if experts:
        volume = sum(_volume(lo, hi) for lo, hi in boxes)
        if volume != param.numel():
            raise ValueError(f"vLLM parameter {name} {list(param.shape)} holds "
                             f"{param.numel()} elements, its experts' boxes {volume}")
        return
    dim = pieces[0].dim
    if dim is None:
        return
    rows = sum(hi[dim] - lo[dim] for lo, hi in boxes)
    padded = hasattr(module, "shard_indices")  # vocab padding rows follow the boxes
    if rows > param.shape[dim] or (rows < param.shape[dim] and not padded):
        raise ValueError(f"vLLM parameter {name} has {param.shape[dim]} rows on dim {dim}, "
                         f"its checkpoint boxes cover {rows}")


def _volume(lo: list[int], hi: list[int]) -> int:
    volume = 1
    for l, h in zip(lo, hi):
        volume *= h - l
    return volume


# MLAAttention's weights derived from kv_b_proj (mla_attention.py): views of it or copies ferry
# derives again, and the forms it does not derive.
_MLA_DERIVED = ("W_UV", "W_UK_T")
_MLA_UNDERIVED = ("W_K", "W_V", "W_UK_T_dcp_qrep")


def _byte_range(tensor: Any) -> tuple[int, int]:
    """The addresses `tensor`'s elements span, [first byte, past the last)."""
    start = tensor.data_ptr()
    if tensor.numel() == 0:
        return start, start
    last = sum((n - 1) * stride for n, stride in zip(tensor.shape, tensor.stride()))
    return start, start + (last + 1) * tensor.element_size()


def _is_mla(module: Any) -> bool:
    """Whether `module` is an MLA attention layer (MLAAttention: its kv_b_proj and the step that
    derives W_UV and W_UK_T from it)."""
    return hasattr(module, "kv_b_proj") and hasattr(module, "process_weights_after_loading")


def _mla_derived(name: str, module: Any) -> tuple[list[Any], bool]:
    """The weights MLA attention `module` derived from kv_b_proj (none before vLLM processed the
    loaded weights), and whether they are copies (not views of kv_b_proj.weight's bytes), which
    the worker derives again after each update (mla_copies); ValueError where vLLM keeps them in
    a form ferry does not derive (AMX's packing, AITER's W_K/W_V, DCP's gathered W_UK_T)."""
    if getattr(module, "is_amx_bmm_enabled", False):
        raise ValueError(f"vLLM module {name}: the AMX MLA backend packs its own copies of "
                         "W_UK/W_UV and releases kv_b_proj's weight "
                         "(vllm/v1/attention/backends/mla/amx_mla.py); not supported")
    other = [a for a in _MLA_UNDERIVED if getattr(module, a, None) is not None]
    if other:
        raise ValueError(f"vLLM module {name}: MLA keeps {', '.join(other)} derived from "
                         "kv_b_proj in a form ferry does not derive again after an update "
                         "(ROCm's AITER BMMs, DCP query replication); not supported")
    lo, hi = _byte_range(module.kv_b_proj.weight)
    derived = [d for d in (getattr(module, a, None) for a in _MLA_DERIVED) if d is not None]
    inside = [lo <= start and stop <= hi for start, stop in map(_byte_range, derived)]
    return derived, not all(inside)


def _derived_params(modules: Mapping[str, Any]) -> set[int]:
    """The ids of parameters vLLM derived from parameters ferry writes (MLA's W_UV and W_UK_T):
    views of them, or copies the worker derives again (mla_copies); refuses MLA layers that keep
    them otherwise."""
    derived = set()
    for name, module in modules.items():
        if _is_mla(module):
            derived.update(id(d) for d in _mla_derived(name, module)[0])
    return derived


def mla_copies(model: Any) -> list[Any]:
    """The MLA attention modules of `model` whose W_UV and W_UK_T are copies of kv_b_proj (an FP8
    kv_b_proj dequantized, or another dtype than the activations'): after each update the worker
    derives them again from the new kv_b_proj, as vLLM's MLAAttention.process_weights_after_
    loading does (mla_attention.py split_kv_b_proj), and copies them into place."""
    return [m for n, m in model.named_modules() if _is_mla(m) and _mla_derived(n, m)[1]]


def _checkpoint_names(model: Any, source: Mapping[str, Any]) -> dict[str, str]:
    """vLLM's name of each tensor the trainer sends whose checkpoint name vLLM renames, to that
    checkpoint name: the renames of the model's `hf_to_vllm_mapper` (vllm/model_executor/models/
    utils.py WeightsMapper.get_rename_mapper; nemotron_h.py: backbone -> model, A_log -> A,
    embeddings -> embed_tokens), or an MTP drafter's (_spec_layer_name). Models without either
    load checkpoint names as they are."""
    mapper = getattr(model, "hf_to_vllm_mapper", None)
    if mapper is not None:
        rename = mapper.get_rename_mapper().map_name
    elif hasattr(model, "_rewrite_spec_layer_name"):
        rename = lambda name: _spec_layer_name(model, name)  # noqa: E731
    else:
        return {}
    renamed = {}
    for name in source:
        new = rename(name)
        if new is not None and new != name:
            renamed[new] = name
    return renamed


def _spec_layer_name(drafter: Any, name: str) -> str | None:
    """Where an MTP drafter (vllm/model_executor/models/deepseek_mtp.py DeepSeekMTP, and the
    drafters built like it: glm4_moe_mtp.py, ...) loads checkpoint tensor `name`: a tensor of an
    MTP layer (layers num_hidden_layers .. + num_nextn_predict_layers - 1 of the checkpoint,
    utils.py get_spec_layer_idx_from_weight_name) under the name the drafter's own
    `_rewrite_spec_layer_name` gives it (model.layers.K.X -> model.layers.K.mtp_block.X for the
    decoder layer's tensors; model.layers.K.embed_tokens -> model.embed_tokens), any other tensor
    under its own name (load_weights loads only embed_tokens of those)."""
    config = drafter.config
    base = config.num_hidden_layers
    for layer in range(base, base + (getattr(config, "num_nextn_predict_layers", 0) or 0)):
        if name.startswith((f"model.layers.{layer}.", f"layers.{layer}.",
                            f"model.language_model.layers.{layer}.")):
            return drafter._rewrite_spec_layer_name(layer, name)
    return name


def engine_shards(model: Any, source: Mapping[str, Any], rank: int, skip: Collection[int] = (),
                  packed: Mapping[str, list[str]] | None = None
                  ) -> tuple[list[Shard | BlockScaled], dict[str, Any]]:
    """The shards of every parameter of `model` (a vLLM worker's torch module) on ferry rank
    `rank`, against the checkpoint tensors the trainer sends (`source`: name -> object with
    `shape` and `dtype`), with a BlockScaled for each FP8 block-quantized layer, and the
    parameter storage behind each buffer (`param.data`; DeepGEMM's packed scales' whole storage,
    flat). Parameters whose id is in `skip` are left out (a drafter's parameters that are its
    target's). `packed` names the checkpoint
    tensors of each fused module when the model has no packed_modules_mapping (a drafter
    fuses as its target: deepseek_mtp.py's stacked_params_mapping, gate_up_proj and
    fused_qkv_a_proj, is DeepseekV2ForCausalLM's packed_modules_mapping)."""
    packed = getattr(model, "packed_modules_mapping", None) or packed or {}
    modules = dict(model.named_modules())
    left_out = _derived_params(modules) | set(skip)
    renamed = _checkpoint_names(model, source)
    mixers = _all_mixer_pieces(modules)
    eplb = _eplb_states(modules)

    def sent_name(tensor: str) -> str:
        return renamed.get(tensor, tensor)

    def checkpoint_tensor(piece: Piece) -> str:
        tensor = sent_name(piece.tensor)
        if piece.transform and tensor not in source and f"{tensor}_log" in source:
            return f"{tensor}_log"  # Mamba's A, kept as A_log by checkpoints
        return tensor

    quantized = quantized_layers(modules)  # FP8 block-quantized layers: their scale format
    shards: list[Shard | BlockScaled] = []
    buffers = {}
    for name, param in model.named_parameters():
        if id(param) in left_out:
            continue
        prefix, _, leaf = name.rpartition(".")
        module = modules[prefix]
        fp8, scaled = quantized.get(prefix), leaf.removesuffix("_scale_inv")
        if fp8 and scaled != leaf and scaled in FP8_WEIGHTS:  # the scales of an e4m3 weight
            scaled_shard, buffers[name] = block_scaled(prefix, module, scaled, fp8, rank)
            shards.append(scaled_shard)
            continue
        pieces = mixers.get(name) or param_pieces(name, module, param, packed,
                                                  lambda t: sent_name(t) in source,
                                                  eplb.get(id(module)))
        if fp8 and leaf in FP8_WEIGHTS:
            pieces = [p._replace(transform="fp8_block") for p in pieces]
        pieces = [p._replace(tensor=checkpoint_tensor(p)) for p in pieces]
        shards += _piece_shards(name, module, param, pieces, source, rank)
        buffers[name] = param.data
    return shards, buffers


def _piece_shards(name: str, module: Any, param: Any, pieces: list[Piece],
                  source: Mapping[str, Any], rank: int) -> list[Shard]:
    """The shards of parameter `name`, one a piece (named as the trainer sends it), checked
    against the tensor the trainer sends and against the parameter they fill."""
    experts = hasattr(module, "expert_map_manager")
    box_of = _expert_box if experts else _piece_box
    shards, boxes = [], []
    for piece in pieces:
        if piece.tensor not in source:
            raise ValueError(f"vLLM parameter {name}: the trainer sends no tensor "
                             f"{piece.tensor!r}")
        sent = source[piece.tensor]
        _check_dtype(name, param, piece, sent)
        lo, hi = box_of(name, param, piece, tuple(sent.shape))
        boxes.append((lo, hi))
        shards.append(Shard(piece.tensor, tuple(sent.shape), sent.dtype, lo, hi, rank, name,
                            piece.transform))
    _check_coverage(name, module, param, pieces, boxes, experts)
    return shards


_STORED_DTYPES = {"neg_exp": "fp32", "fp8_block": "fp8_e4m3"}


def _check_dtype(name: str, param: Any, piece: Piece, sent: Any) -> None:
    """The parameter holds the dtype the trainer sends `piece.tensor` in, or what it stores of
    it: fp32 -exp (neg_exp), or e4m3 of a wider float (fp8_block)."""
    held = dtype_name(param.dtype)
    want = _STORED_DTYPES.get(piece.transform, dtype_name(sent.dtype))
    if held != want:
        raise ValueError(f"vLLM parameter {name} is {param.dtype} but the trainer sends "
                         f"{piece.tensor} as {sent.dtype}"
                         + (f", which vLLM stores as {want} {piece.transform}"
                            if piece.transform else ""))
