"""Framework specs from the frameworks' own configuration objects, so that a trainer or an engine
describes its layout with the values it actually runs with instead of a hand-written string.

`megatron_spec` reads Megatron-Core's TransformerConfig (which carries ModelParallelConfig's
fields) and, optionally, its DistributedDataParallelConfig: the field names are Megatron-Core's
(megatron/core/model_parallel_config.py, megatron/core/transformer/transformer_config.py,
megatron/core/distributed/distributed_data_parallel_config.py). `vllm_spec` reads vLLM's
ParallelConfig (vllm/config/parallel.py), `sglang_spec` SGLang's ServerArgs
(python/sglang/srt/server_args.py). All three work on any object with those attributes (a
SimpleNamespace in a test, Megatron-Bridge's providers, NeMo RL's configs) and import neither
framework. The strings are what `Layout.preset` and the CLI's --src/--dst take (the keys:
tools/models/framework_spec.h).
"""

from __future__ import annotations

from typing import Any, Mapping


def _int(config: Any, field: str, default: int | None) -> int | None:
    """`config.field` as an int, `default` when it is missing or None; anything else that is not
    a whole number is refused naming the field."""
    value = getattr(config, field, None)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{field} must be a non-negative integer, got {value!r}")
    return value


def _experts(config: Any) -> str:
    """Megatron-Core's expert module (tools/models/megatron_expert_storage.h): SequentialMLP
    without moe_grouped_gemm; TEGroupedMLP with it; one weight per layer with
    moe_single_grouped_weight; GroupedMLP with moe_use_legacy_grouped_gemm."""
    if not getattr(config, "moe_grouped_gemm", False):
        return "sequential"
    if getattr(config, "moe_single_grouped_weight", False):
        return "single_grouped"
    if getattr(config, "moe_use_legacy_grouped_gemm", False):
        return "legacy_grouped"
    return "grouped"


def megatron_spec(config: Any, ddp_config: Any = None, *, data_parallel_size: int | None = None,
                  make_vocab_size_divisible_by: int = 128, pad_vocab: bool = True) -> str:
    """The "megatron:..." spec of a trainer run with Megatron-Core's `config` (TransformerConfig)
    and `ddp_config` (DistributedDataParallelConfig; None: parameters as their own tensors, no
    distributed optimizer). `data_parallel_size` is the run's dp (None: the smallest that fits
    the expert layout, as Megatron needs); `make_vocab_size_divisible_by` is Megatron-LM's
    argument of that name; `pad_vocab=False` is Megatron-Bridge's should_pad_vocab=False (a
    model built from a Hugging Face checkpoint, as NeMo RL builds it).

    Raises ValueError naming the field when a value is not a whole number, and for a
    pipeline_model_parallel_layout that is not a string (pass Megatron's layout string)."""
    keys = [f"tp={_int(config, 'tensor_model_parallel_size', 1)}",
            f"pp={_int(config, 'pipeline_model_parallel_size', 1)}"]
    layout = getattr(config, "pipeline_model_parallel_layout", None)
    if layout is not None and not isinstance(layout, str):
        raise ValueError("pipeline_model_parallel_layout must be Megatron's layout string, got "
                         f"{type(layout).__name__}")
    first = _int(config, "num_layers_in_first_pipeline_stage", None)
    last = _int(config, "num_layers_in_last_pipeline_stage", None)
    keys += [f"first={first}"] if first is not None else []
    keys += [f"last={last}"] if last is not None else []
    vstages = _int(config, "virtual_pipeline_model_parallel_size", None)
    keys += [f"vstages={vstages}"] if vstages is not None and layout is None else []
    ep = _int(config, "expert_model_parallel_size", 1)
    etp = _int(config, "expert_tensor_parallel_size", None)
    keys += [f"ep={ep}"] + ([f"etp={etp}"] if etp is not None else [])
    keys += [f"cp={_int(config, 'context_parallel_size', 1)}"]
    if data_parallel_size is not None:
        keys += [f"dp={data_parallel_size}"]
    if getattr(config, "num_moe_experts", None):
        keys += [f"experts={_experts(config)}"]
    mtp = _int(config, "mtp_num_layers", None)
    if mtp:
        keys += [f"mtp={mtp}"] + (["mtp_repeated=1"]
                                  if getattr(config, "mtp_use_repeated_layer", False) else [])
    if ddp_config is not None and getattr(ddp_config, "use_distributed_optimizer", False):
        keys += ["buffers=distopt"]
        if getattr(ddp_config, "overlap_grad_reduce", False):
            keys += ["overlap_grad_reduce=yes"]
    keys += [f"vocab_divisible_by={make_vocab_size_divisible_by}"]
    keys += [] if pad_vocab else ["pad_vocab=no"]
    keys += [f"layout={layout}"] if layout is not None else []  # last: it may hold commas
    return "megatron:" + ",".join(keys)


# vllm/config/parallel.py: the default all2all_backend, those under which use_sequence_parallel_moe
# holds, and those that keep round-robin expert placement with dp > 1.
_DEFAULT_ALL2ALL = "allgather_reducescatter"
_SEQUENCE_PARALLEL_ALL2ALL = ("allgather_reducescatter", "deepep_high_throughput",
                              "deepep_low_latency", "deepep_v2", "flashinfer_nvlink_one_sided",
                              "passthrough", "mori_high_throughput", "mori_low_latency", "nixl_ep")
_ROUND_ROBIN_ALL2ALL = ("deepep_low_latency", "nixl_ep")


def vllm_spec(parallel_config: Any, *, engines: int = 1, speculative_config: Any = None) -> str:
    """The "vllm:..." spec of `engines` independent vLLM engines, each run with
    `parallel_config` (vLLM's ParallelConfig: tensor_parallel_size, pipeline_parallel_size,
    data_parallel_size, enable_expert_parallel, expert_placement_strategy, and with enable_eplb
    its eplb_config.num_redundant_experts, all2all_backend). Expert parallelism spans tp * dp
    ranks, as vLLM's FusedMoE does with enable_expert_parallel. Round-robin placement with
    dp > 1 becomes linear under the all-to-all backends where vLLM falls back to it
    (vllm/model_executor/layers/fused_moe/expert_map_manager.py,
    determine_expert_placement_strategy). With `speculative_config` (vLLM's SpeculativeConfig)
    of method "mtp", the MTP drafter's layers (its draft config's n_predict) are mtp=N.

    Raises ValueError naming the field when a value is not a whole number, the placement
    strategy is not one vLLM has, expert parallelism with tp > 1 and dp > 1 runs an all-to-all
    backend without sequence-parallel MoE, or speculative decoding drafts with another method,
    none of which the layouts model."""
    tp = _int(parallel_config, "tensor_parallel_size", 1)
    pp = _int(parallel_config, "pipeline_parallel_size", 1)
    dp = _int(parallel_config, "data_parallel_size", 1)
    keys = [f"tp={tp}", f"pp={pp}", f"dp={dp}"]
    if getattr(parallel_config, "enable_expert_parallel", False):
        keys += [f"ep={tp * dp}"] + _vllm_placement(parallel_config, tp, dp)
    if getattr(parallel_config, "enable_eplb", False):
        eplb = getattr(parallel_config, "eplb_config", None)
        redundant = _int(eplb, "num_redundant_experts", 0) if eplb is not None else 0
        keys += [f"redundant={redundant}"] if redundant else []
    keys += _vllm_drafter(speculative_config)
    if isinstance(engines, bool) or not isinstance(engines, int) or engines < 1:
        raise ValueError(f"engines must be a positive integer, got {engines!r}")
    keys += [f"engines={engines}"]
    return "vllm:" + ",".join(keys)


def _vllm_drafter(speculative_config: Any) -> list[str]:
    """["mtp=N"] for vLLM's MTP drafter: SpeculativeConfig.method "mtp" (vLLM normalizes
    deepseek_mtp and the other MTP model types to it), N its draft config's n_predict, the
    checkpoint's MTP layers the drafter builds (vllm/config/speculative.py,
    vllm/model_executor/models/deepseek_mtp.py). [] without one; ValueError for other methods."""
    if speculative_config is None:
        return []
    method = getattr(speculative_config, "method", None)
    if method != "mtp":
        raise ValueError(f"speculative_config.method {method!r}: ferry models vLLM's MTP "
                         "drafter only (method 'mtp')")
    draft = getattr(getattr(speculative_config, "draft_model_config", None), "hf_config", None)
    return [f"mtp={_int(draft, 'n_predict', 1)}"]


def _vllm_placement(parallel_config: Any, tp: int, dp: int) -> list[str]:
    """The placement key of an engine with expert parallelism, and the check of its all-to-all
    backend (ParallelConfig.all2all_backend)."""
    placement = getattr(parallel_config, "expert_placement_strategy", "linear") or "linear"
    if placement not in ("linear", "round_robin"):
        raise ValueError("expert_placement_strategy must be 'linear' or 'round_robin', got "
                         f"{placement!r}")
    backend = getattr(parallel_config, "all2all_backend", None) or _DEFAULT_ALL2ALL
    if tp > 1 and dp > 1 and backend not in _SEQUENCE_PARALLEL_ALL2ALL:
        raise ValueError(f"all2all_backend {backend!r} with expert parallelism, tp > 1 and "
                         "dp > 1: vLLM's layers then shard what ferry's layouts keep whole "
                         "(ParallelConfig.use_sequence_parallel_moe); not modelled")
    if placement == "round_robin" and dp > 1 and backend not in _ROUND_ROBIN_ALL2ALL:
        placement = "linear"  # as vLLM falls back
    # As configured otherwise: where vLLM falls back to linear placement for other reasons (no
    # expert groups, redundant experts) planning refuses round_robin and says so.
    return ["placement=round_robin"] if placement == "round_robin" else []


def _flag(config: Any, field: str) -> bool:
    """`config.field` as a bool (missing or None: False); anything else is refused naming it."""
    value = getattr(config, field, None)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ValueError(f"{field} must be a bool, got {value!r}")
    return value


def _partition(text: str) -> str:
    """A PP_LAYER_PARTITION value ("3,2") as a spec writes it ("3.2"); refused unless it is
    whole numbers separated by commas."""
    counts = [c.strip() for c in str(text).split(",")]
    if not all(c.isdigit() for c in counts):
        raise ValueError(f"partition must be layer counts separated by commas, got {text!r}")
    return ".".join(counts)


def _sglang_draft(server_args: Any) -> list[str]:
    """["mtp=1"] for SGLang's NextN draft: --speculative-algorithm NEXTN, or EAGLE, which NEXTN
    aliases, with the draft read from the served checkpoint (arg_groups/speculative_hook.py
    _handle_eagle_family: a DeepSeek-V3 draft's path defaults to the model's). [] without one;
    ValueError for a draft ferry does not model."""
    algorithm = getattr(server_args, "speculative_algorithm", None)
    if algorithm is None:
        return []
    draft = getattr(server_args, "speculative_draft_model_path", None)
    if algorithm not in ("NEXTN", "EAGLE") or draft not in (None,
                                                            getattr(server_args, "model_path", None)):
        raise ValueError(f"speculative_algorithm {algorithm!r} with draft {draft!r}: ferry models "
                         "SGLang's NextN draft of the served checkpoint's MTP layer only (NEXTN, "
                         "or EAGLE without another speculative_draft_model_path)")
    return ["mtp=1"]


def _sglang_quant(server_args: Any, quantization_config: Mapping[str, Any] | None) -> list[str]:
    """["quant=fp8_block"] for a checkpoint whose quantization_config is fp8 in 128x128 blocks
    (DeepSeek-V3's), which SGLang serves as it is stored; [] for an unquantized one. ValueError
    for any other quantization, of the checkpoint or of the server (--quantization)."""
    method = getattr(server_args, "quantization", None)
    if quantization_config is None:
        if method is not None:
            raise ValueError(f"quantization {method!r} of an unquantized checkpoint: SGLang "
                             "quantizes it as it loads, which ferry does not model")
        return []
    if not isinstance(quantization_config, Mapping):
        raise ValueError(f"quantization_config must be a mapping (config.json's), got "
                         f"{type(quantization_config).__name__}")
    kind = quantization_config.get("quant_method")
    blocks = quantization_config.get("weight_block_size")
    if kind != "fp8" or blocks != [128, 128] or method not in (None, "fp8"):
        raise ValueError(f"quantization_config {dict(quantization_config)!r} (server "
                         f"quantization {method!r}): ferry models SGLang's FP8 checkpoints "
                         "quantized in 128x128 blocks only")
    return ["quant=fp8_block"]


def sglang_spec(server_args: Any, *, engines: int = 1, partition: str | None = None,
                quantization_config: Mapping[str, Any] | None = None) -> str:
    """The "sglang:..." spec of `engines` independent SGLang servers, each run with `server_args`
    (SGLang's ServerArgs, python/sglang/srt/server_args.py: tp_size, pp_size, dp_size,
    attn_dp_size, enable_dp_attention, ep_size, ep_num_redundant_experts, moe_dense_tp_size,
    enable_dp_lm_head, disable_shared_experts_fusion and moe_a2a_backend). dp_size counts copies
    of the server;
    attn_dp_size splits its tp_size ranks' attention into groups and adds no ranks. The older
    `--dp-size N --enable-dp-attention` is read as SGLang 0.5.23 reads it
    (arg_groups/parallel_hook.py _handle_deprecated_dp_attention): attn_dp_size N, dp_size 1.
    Shared-expert fusion is left to SGLang's own rule unless disabled. A NextN draft
    (speculative_algorithm NEXTN, or EAGLE from the served checkpoint) is mtp=1. `partition` is
    the servers' SGLANG_PP_LAYER_PARTITION ("3,2": decoder layers per PP rank), which SGLang reads from its
    environment rather than from ServerArgs. `quantization_config` is the checkpoint's (its
    config.json's "quantization_config", which SGLang reads from the model rather than from
    ServerArgs): FP8 in 128x128 blocks is quant=fp8_block; other quantizations are refused.

    Raises ValueError naming the field when a value is not a whole number or a flag not a bool."""
    dp = _int(server_args, "dp_size", 1)
    attn_dp = _int(server_args, "attn_dp_size", 1)
    if _flag(server_args, "enable_dp_attention") and attn_dp == 1:
        attn_dp, dp = dp, 1
    keys = [f"tp={_int(server_args, 'tp_size', 1)}", f"pp={_int(server_args, 'pp_size', 1)}"]
    keys += [f"partition={_partition(partition)}"] if partition is not None else []
    keys += [f"dp={dp}"]
    keys += [f"attn_dp={attn_dp}"] if attn_dp > 1 else []
    keys += [f"ep={_int(server_args, 'ep_size', 1)}"]
    redundant = _int(server_args, "ep_num_redundant_experts", 0)
    keys += [f"redundant={redundant}"] if redundant else []
    dense_tp = _int(server_args, "moe_dense_tp_size", None)
    keys += [f"dense_tp={dense_tp}"] if dense_tp is not None else []
    keys += ["dp_lm_head=yes"] if _flag(server_args, "enable_dp_lm_head") else []
    if _flag(server_args, "disable_shared_experts_fusion"):
        keys += ["shared_experts=separate"]
    a2a = getattr(server_args, "moe_a2a_backend", None)
    if a2a is not None and not isinstance(a2a, str):
        raise ValueError(f"moe_a2a_backend must be a string, got {a2a!r}")
    keys += [f"a2a={a2a}"] if a2a not in (None, "none") else []
    keys += _sglang_draft(server_args)
    keys += _sglang_quant(server_args, quantization_config)
    if isinstance(engines, bool) or not isinstance(engines, int) or engines < 1:
        raise ValueError(f"engines must be a positive integer, got {engines!r}")
    keys += [f"engines={engines}"]
    return "sglang:" + ",".join(keys)
