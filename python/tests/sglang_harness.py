"""SGLang's own model classes, built for one rank on the CPU as SGLang's ModelRunner builds
them, tiny configs of the architectures ferry models, and random checkpoints: what
python/tests/sglang_layout_worker.py and sglang_refit_worker.py share; the configs,
checkpoints and layout comparisons (fill_buffers, layout_differences, spec_mismatch, verdict)
serve the vLLM layout worker too; fp8_checkpoint and fill_fp8_buffers quantize FP8 checkpoints
and ferry's block-scaled buffers alike with vLLM's per_block_cast_to_fp8. Runs in the
environment tools/deps/vllm-venv.sh makes (PyPI's SGLang 0.5.23 and vLLM); importing it needs
torch and ferry, not SGLang.

SGLang publishes the server arguments for the world rank and derives every parallel rank and
width from them (runtime_context.publish with SpawnRanks; world rank tp_size * pp_rank +
tp_rank; under attention DP the DP controller's dp_rank, the rank's attention-DP group), the MoE
flags are set as its scheduler sets them, attention DP and the initial expert
locations are initialised as its ModelRunner does, and the model class is SGLang's. Only the
process-group handles and the all-to-all backends' token dispatchers are stand-ins, since
nothing here communicates through them.
"""

from __future__ import annotations

import contextlib
import importlib
import types
from typing import Callable, Iterator
from unittest import mock

import torch

import ferry


# Tiny configs of the real architectures (Hugging Face config.json contents) and the SGLang
# class of each.
LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 24,
         "intermediate_size": 48, "num_attention_heads": 12, "num_key_value_heads": 3,
         "head_dim": 2, "num_hidden_layers": 2, "vocab_size": 1010, "hidden_act": "silu",
         "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "tie_word_embeddings": False,
         "max_position_embeddings": 4096, "torch_dtype": "bfloat16"}

# Qwen3 dense: q/k norms and tied embeddings (lm_head is embed_tokens); Qwen2: q/k/v biases, one
# KV head over two ranks.
QWEN3 = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 24,
         "intermediate_size": 48, "num_attention_heads": 4, "num_key_value_heads": 2,
         "head_dim": 6, "num_hidden_layers": 2, "vocab_size": 1000, "hidden_act": "silu",
         "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "tie_word_embeddings": True,
         "max_position_embeddings": 4096, "torch_dtype": "bfloat16"}
QWEN2 = dict(QWEN3, architectures=["Qwen2ForCausalLM"], model_type="qwen2", num_key_value_heads=1,
             tie_word_embeddings=False)

QWEN3_MOE = {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
             "hidden_size": 32, "intermediate_size": 48, "moe_intermediate_size": 16,
             "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 2,
             "num_hidden_layers": 2, "num_experts": 128, "num_experts_per_tok": 8,
             "decoder_sparse_step": 1, "mlp_only_layers": [], "norm_topk_prob": True,
             "vocab_size": 2384, "hidden_act": "silu", "rms_norm_eps": 1e-6,
             "rope_theta": 10000.0, "tie_word_embeddings": False,
             "max_position_embeddings": 4096, "torch_dtype": "bfloat16"}

# DeepSeek-V3's architecture (MLA with a q LoRA, a dense first layer, 256 routed experts and one
# shared expert, the router bias) at tiny widths.
DEEPSEEK_V3 = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
               "hidden_size": 64, "intermediate_size": 96, "moe_intermediate_size": 16,
               "num_attention_heads": 4, "num_key_value_heads": 4, "q_lora_rank": 24,
               "kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4,
               "v_head_dim": 8, "num_hidden_layers": 2, "first_k_dense_replace": 1,
               "moe_layer_freq": 1, "n_routed_experts": 256, "n_shared_experts": 1,
               "num_experts_per_tok": 8, "n_group": 8, "topk_group": 4,
               "topk_method": "noaux_tc", "scoring_func": "sigmoid", "norm_topk_prob": True,
               "routed_scaling_factor": 2.5, "num_nextn_predict_layers": 0,
               "vocab_size": 1000, "hidden_act": "silu", "rms_norm_eps": 1e-6,
               "rope_theta": 10000, "tie_word_embeddings": False,
               "rope_scaling": {"type": "yarn", "factor": 40, "beta_fast": 32, "beta_slow": 1,
                                "mscale": 1.0, "mscale_all_dim": 1.0,
                                "original_max_position_embeddings": 4096},
               "max_position_embeddings": 4096, "torch_dtype": "bfloat16"}

# Nemotron-H's hybrid pattern (vLLM's tests only) at tiny widths: Mamba-2, MLP, attention, MLP,
# Mamba-2, MLP. The checkpoints' own configs name the attention head size attention_head_dim;
# transformers' NemotronHConfig, which vLLM reads, takes head_dim (default 128), so both are given.
NEMOTRON_H = {"architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h",
              "hybrid_override_pattern": "M-*-M-", "num_hidden_layers": 6, "hidden_size": 32,
              "intermediate_size": 48, "num_attention_heads": 4, "num_key_value_heads": 2,
              "head_dim": 8, "attention_head_dim": 8, "mamba_num_heads": 8, "mamba_head_dim": 8,
              "n_groups": 2, "ssm_state_size": 8, "conv_kernel": 4, "expand": 2,
              "chunk_size": 128, "mamba_hidden_act": "silu", "mlp_hidden_act": "relu2",
              "attention_bias": False, "mlp_bias": False, "use_bias": False,
              "mamba_proj_bias": False, "use_conv_bias": True, "residual_in_fp32": False,
              "layer_norm_epsilon": 1e-5, "vocab_size": 1000, "tie_word_embeddings": False,
              "max_position_embeddings": 4096, "torch_dtype": "bfloat16"}

# FP8 block-quantized checkpoints (quantization_config fp8, 128x128 blocks, as DeepSeek-V3's) at
# widths whose TP2 partitions fill whole blocks, as SGLang requires
# (layers/quantization/fp8.py validate_block_quant_shapes): 128-wide heads for Qwen3 and
# Qwen3-MoE, MLA with q_lora_rank 128 (the fused q_a/kv_a scales) and 2 x 64-wide heads a rank
# for DeepSeek-V3, with its 256 routed experts and shared expert. (Not Llama: SGLang
# 0.5.23's LlamaForCausalLM loader renames weight_scale_inv to weight_scale, which a block-scaled
# layer does not have, so it never loads those scales; ferry writes them.)
FP8_BLOCKS = {"quant_method": "fp8", "activation_scheme": "dynamic",
              "weight_block_size": [128, 128]}
QWEN3_FP8 = dict(QWEN3, hidden_size=256, intermediate_size=512, num_attention_heads=2,
                 num_key_value_heads=1, head_dim=128, quantization_config=FP8_BLOCKS)
QWEN3_MOE_FP8 = dict(QWEN3_MOE, hidden_size=256, num_attention_heads=2, num_key_value_heads=2,
                     head_dim=128, moe_intermediate_size=256, num_experts=8,
                     num_experts_per_tok=2, quantization_config=FP8_BLOCKS)
DEEPSEEK_V3_FP8 = dict(DEEPSEEK_V3, hidden_size=256, intermediate_size=512,
                       moe_intermediate_size=256, num_attention_heads=4, num_key_value_heads=4,
                       q_lora_rank=128, kv_lora_rank=128, qk_nope_head_dim=64,
                       qk_rope_head_dim=64, v_head_dim=64, quantization_config=FP8_BLOCKS)

MODELS = {"llama": (LLAMA, "sglang.srt.models.llama.LlamaForCausalLM"),
          "qwen3": (QWEN3, "sglang.srt.models.qwen3.Qwen3ForCausalLM"),
          "qwen2": (QWEN2, "sglang.srt.models.qwen2.Qwen2ForCausalLM"),
          "qwen3_moe": (QWEN3_MOE, "sglang.srt.models.qwen3_moe.Qwen3MoeForCausalLM"),
          "deepseek_v3": (DEEPSEEK_V3, "sglang.srt.models.deepseek_v2.DeepseekV3ForCausalLM"),
          # a server with the NextN draft: the target, then the draft built from the
          # checkpoint's one MTP layer (model.layers.2)
          "deepseek_v3_nextn": (dict(DEEPSEEK_V3, num_nextn_predict_layers=1),
                                "sglang.srt.models.deepseek_v2.DeepseekV3ForCausalLM+"
                                "sglang.srt.models.deepseek_nextn.DeepseekV3ForCausalLMNextN"),
          "qwen3_fp8": (QWEN3_FP8, "sglang.srt.models.qwen3.Qwen3ForCausalLM"),
          "qwen3_moe_fp8": (QWEN3_MOE_FP8, "sglang.srt.models.qwen3_moe.Qwen3MoeForCausalLM"),
          "deepseek_v3_fp8": (DEEPSEEK_V3_FP8,
                              "sglang.srt.models.deepseek_v2.DeepseekV3ForCausalLM"),
          "deepseek_v3_fp8_nextn": (dict(DEEPSEEK_V3_FP8, num_nextn_predict_layers=1),
                                    "sglang.srt.models.deepseek_v2.DeepseekV3ForCausalLM+"
                                    "sglang.srt.models.deepseek_nextn."
                                    "DeepseekV3ForCausalLMNextN")}


def stand_in_group(rank: int, size: int) -> types.SimpleNamespace:
    """A process-group handle for a rank that builds and loads a model without communicating;
    the model classes ask the pipeline group whether the rank is its first or last."""
    return types.SimpleNamespace(is_first_rank=rank == 0, is_last_rank=rank == size - 1,
                                 world_size=size, rank_in_group=rank, rank=rank,
                                 ranks=list(range(size)), local_rank=rank, device_group=None,
                                 cpu_group=None)


@contextlib.contextmanager
def stand_in_dispatcher() -> Iterator[None]:
    """Inside it, FusedMoE layers of the all-to-all backends (DeepEP and the like, whose
    dispatchers need their CUDA libraries) get SGLang's StandardDispatcher: a dispatcher moves
    activations between ranks and holds no weights, so the layer's parameters are its own."""
    from sglang.srt.layers.moe.fused_moe_triton import layer
    from sglang.srt.layers.moe.token_dispatcher import StandardDispatcher
    from sglang.srt.layers.moe.utils import get_moe_a2a_backend

    original = layer.create_moe_dispatcher

    def create(config, quant_method):
        if get_moe_a2a_backend().is_none():
            return original(config, quant_method)
        return StandardDispatcher(config)

    layer.create_moe_dispatcher = create
    try:
        yield
    finally:
        layer.create_moe_dispatcher = original


@contextlib.contextmanager
def hopper_fp8_processing() -> Iterator[None]:
    """Inside it, SGLang's FP8 methods process weights after loading as on a CUDA GPU without
    UE8M0 DeepGEMM (Hopper): scales and weights as loaded (layers/quantization/fp8.py
    process_weights_after_loading_block_quant, its CUDA branch). On the CPU they would instead
    repack the weights for AMX kernels that PyPI's SGLang lacks, or assert AMX where the CPU has
    none; end_weight_update runs that step after every update."""
    from sglang.srt.layers.quantization import fp8

    original = fp8._is_cpu
    fp8._is_cpu = False
    try:
        yield
    finally:
        fp8._is_cpu = original


@contextlib.contextmanager
def sglang_rank(model_dir: str, rank: int,
                server_args: dict) -> Iterator[Callable[[str], torch.nn.Module]]:
    """Inside it, SGLang's runtime context is that of world rank `rank` of a server run with
    `server_args`; it yields a function that builds the model class it is given (for example
    sglang.srt.models.qwen3_moe.Qwen3MoeForCausalLM) with its parameters zeroed, in bf16, and
    the checkpoint's quantization; SGLang's FP8 methods process weights there as on Hopper
    (hopper_fp8_processing)."""
    from sglang.srt.configs.load_config import LoadConfig
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.eplb.expert_location import (compute_initial_expert_location_metadata,
                                                 set_global_expert_location_metadata)
    from sglang.srt.layers.dp_attention import (compute_dp_attention_world_info,
                                                initialize_dp_attention)
    from sglang.srt.layers.moe.utils import initialize_moe_config
    from sglang.srt.model_loader.loader import _get_quantization_config
    from sglang.srt.runtime_context import SpawnRanks, get_parallel, publish
    from sglang.srt.server_args import ServerArgs

    args = ServerArgs(model_path=model_dir, device="cpu", skip_tokenizer_init=True,
                      load_format="dummy", **server_args)
    publish(args, role="scheduler", ranks=SpawnRanks(world_rank=rank))
    par = get_parallel()
    if par.attn_dp_size > 1:  # the DP controller gives each rank its attention-DP rank
        _, _, dp_rank, _ = compute_dp_attention_world_info(par.tp_rank, par.tp_size,
                                                           par.attn_dp_size, par.attn_cp_size)
        publish(args, role="scheduler", ranks=SpawnRanks(world_rank=rank, dp_rank=dp_rank))
        par = get_parallel()
    initialize_moe_config()  # as the scheduler does after publishing
    groups = {"pp_group": stand_in_group(par.pp_rank, par.pp_size),
              "attn_cp_group": stand_in_group(0, 1),
              "moe_dp_group": stand_in_group(0, 1),
              "tp_group": stand_in_group(par.tp_rank, par.tp_size),
              "attn_tp_group": stand_in_group(par.attn_tp_rank, par.attn_tp_size),
              "moe_tp_group": stand_in_group(par.moe_tp_rank, par.moe_tp_size),
              "moe_ep_group": stand_in_group(par.moe_ep_rank, par.moe_ep_size)}
    torch.set_default_dtype(torch.bfloat16)
    model_config = ModelConfig.from_server_args(args)
    # the checkpoint's quantization, as model_loader/loader.py gives it to the model class
    quant_config = _get_quantization_config(model_config, LoadConfig(load_format="dummy"))
    with par.override(**groups):
        initialize_dp_attention(args)  # as ModelRunner does
        set_global_expert_location_metadata(compute_initial_expert_location_metadata(
            model_config=model_config, moe_ep_rank=par.moe_ep_rank))
        with stand_in_dispatcher(), hopper_fp8_processing():
            yield lambda model_class: build_model(model_dir, model_class, quant_config)


def rebalance_experts(model: torch.nn.Module, model_dir: str, server_args: dict,
                      seed: int) -> None:
    """SGLang's EPLB rebalance of this rank's server, as eplb/eplb_manager.py rebalance() makes
    it, inside sglang_rank: ExpertLocationMetadata.init_by_eplb from the expert counts of the
    server's last forward passes (random ones of `seed`, which every rank of a server shares, as
    SGLang all-reduces them), then the global metadata updated in place for `model`'s MoE layers
    (the keys of its routed_experts_weights_of_layer, as _compute_update_layer_ids_chunks takes
    them; ExpertLocationMetadata.update, as eplb/expert_location_updater.py does after moving
    the weights: an update then rewrites every expert, so the weights themselves are not
    moved)."""
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.eplb.expert_location import (ExpertLocationMetadata,
                                                 get_global_expert_location_metadata)
    from sglang.srt.server_args import ServerArgs

    args = ServerArgs(model_path=model_dir, device="cpu", skip_tokenizer_init=True,
                      load_format="dummy", **server_args)
    metadata = get_global_expert_location_metadata()
    counts = torch.randint(0, 1000, (metadata.num_layers, metadata.num_logical_experts),
                           generator=torch.Generator().manual_seed(seed))
    rebalanced = ExpertLocationMetadata.init_by_eplb(ModelConfig.from_server_args(args), counts)
    metadata.update(rebalanced, update_layer_ids=sorted(model.routed_experts_weights_of_layer))


def build_model(model_dir: str, model_class: str, quant_config=None) -> torch.nn.Module:
    """`model_class` built as model_loader/loader.py _initialize_model builds it, with the
    checkpoint's `quant_config` and its shared experts resolved for it, its parameters zeroed. A
    NextN draft's config names the NextN architecture, as configs/model_config.py makes a
    DeepSeek-V3 draft's."""
    from transformers import AutoConfig

    from sglang.srt.layers.moe.utils import resolve_shared_experts_config
    from sglang.srt.runtime_context import get_model

    module, name = model_class.rsplit(".", 1)
    cls = getattr(importlib.import_module(module), name)
    hf_config = AutoConfig.from_pretrained(model_dir)
    if name == "DeepseekV3ForCausalLMNextN":
        hf_config.architectures = [name]
    shared = resolve_shared_experts_config(cls, hf_config, quant_config)
    with get_model().override(shared_experts=shared):
        model = cls(hf_config, quant_config=quant_config)
    model.shared_experts_config = shared
    for p in model.parameters():
        p.data.zero_()
    return model


def build_server(build: Callable[..., torch.nn.Module],
                 model_classes: str) -> list[torch.nn.Module]:
    """The models of one server rank, built by `build` (sglang_rank's): MODEL_CLASS, or
    "TARGET+DRAFT" for a server with a speculative-decoding draft. The draft is on the last PP
    stage only (managers/scheduler.py: "non-last stages have no draft worker") and takes the
    target's embed_tokens and lm_head as SGLang's draft worker gives them to it
    (speculative/eagle_worker_v2.py init_lm_head, speculative/pp_draft_embedding.py
    resolve_target_embed_and_head); where the stage has no embed_tokens of the target's it keeps
    its own (load_server fills it)."""
    from sglang.srt.runtime_context import get_parallel
    from sglang.srt.speculative.pp_draft_embedding import resolve_target_embed_and_head

    target_class, _, draft_class = model_classes.partition("+")
    models = [build(target_class)]
    par = get_parallel()
    if draft_class and par.pp_rank == par.pp_size - 1:
        draft = build(draft_class)
        embed, head = resolve_target_embed_and_head(models[0], draft_model=draft)
        if embed is None:
            embed = draft.model.embed_tokens.weight
        # set_embed_and_head ends with CUDA calls that free and wait, no-ops on the CPU
        with mock.patch.object(torch.cuda, "empty_cache"), \
                mock.patch.object(torch.cuda, "synchronize"):
            draft.set_embed_and_head(embed, head)
        models.append(draft)
    return models


def load_server(models: list[torch.nn.Module], weights: dict[str, torch.Tensor]) -> None:
    """`weights` loaded into a server rank's models (build_server's) as SGLang loads them at
    start: each through its own load_weights, and a draft's own embed_tokens through its
    weight_loader from the checkpoint's model.embed_tokens (speculative/pp_draft_embedding.py
    load_draft_embedding_from_checkpoint)."""
    for model in models:
        model.load_weights(iter(weights.items()))
    if len(models) > 1:
        target, draft = models
        own = draft.model.embed_tokens.weight
        if own is not getattr(getattr(target.model, "embed_tokens", None), "weight", None):
            own.weight_loader(own, weights["model.embed_tokens.weight"])


def checkpoint(tensors, seed: int = 1) -> dict[str, torch.Tensor]:
    """Random bf16 (fp32 where the checkpoint holds fp32) values for every checkpoint tensor of
    a ferry layout's `tensors`, the same for a seed whatever torch's default dtype."""
    gen = torch.Generator().manual_seed(seed)
    return {t.name: torch.randn(t.shape, generator=gen, dtype=torch.float32).to(
        torch.float32 if t.dtype == "fp32" else torch.bfloat16) for t in tensors}


def fill_buffers(layout, rank: int, weights: dict[str, torch.Tensor],
                 buffers: dict[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
    """The buffers of `rank` in ferry layout `layout` as uint8 tensors holding `weights` where
    its fragments place them (zeros elsewhere, and in block-scaled fp8 buffers); `buffers`, when
    given, is filled in place."""
    if buffers is None:
        buffers = {b.name: torch.zeros(b.bytes, dtype=torch.uint8) for b in layout.buffers(rank)}
    dtypes = {t.name: t.dtype for t in layout.tensors}
    for f in layout.fragments(rank):
        if dtypes[f.tensor] == "fp8_e4m3":  # quantized: fill_fp8_buffers
            continue
        box = weights[f.tensor][tuple(slice(lo, hi) for lo, hi in zip(f.lo, f.hi))]
        ferry.fragment_view(buffers[f.buffer], f, dtypes[f.tensor]).copy_(box)
    return buffers


def fp8_checkpoint(layout, weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """`weights` as an FP8 block-quantized checkpoint holds them: each tensor the layout stores
    as fp8 (in its block-scaled buffers) quantized per 128x128 block by vLLM's
    per_block_cast_to_fp8 (float32 scales, as DeepSeek-V3's checkpoint), with its
    weight_scale_inv beside it; the others as they are."""
    if not layout.block_scaled:
        return weights
    from vllm.utils.deep_gemm import per_block_cast_to_fp8

    out = {}
    for t in layout.tensors:
        if t.dtype == "fp8_e4m3":
            out[t.name], out[t.name + "_scale_inv"] = per_block_cast_to_fp8(weights[t.name],
                                                                            [128, 128])
        else:
            out[t.name] = weights[t.name]
    return out


def fill_fp8_buffers(layout, rank: int, weights: dict[str, torch.Tensor],
                     buffers: dict[str, torch.Tensor]) -> None:
    """Writes into `buffers` (fill_buffers') each block-scaled buffer of `rank` and its scales as
    an engine that loaded fp8_checkpoint holds them, if ferry's layout is right: the buffer's
    matrices, assembled in bf16 from `weights` where its fragments place them, each quantized by
    the same per_block_cast_to_fp8."""
    pairs = [pair for pair in layout.block_scaled if pair.rank == rank]
    if not pairs:
        return
    from vllm.utils.deep_gemm import per_block_cast_to_fp8

    by_buffer: dict[str, list] = {pair.buffer: [] for pair in pairs}
    for f in layout.fragments(rank):
        if f.buffer in by_buffer:
            by_buffer[f.buffer].append(f)
    for pair in pairs:
        stage = torch.zeros(pair.matrices * pair.rows * pair.cols, dtype=torch.bfloat16)
        for f in by_buffer[pair.buffer]:  # an fp8 buffer's offsets count its one-byte elements
            box = weights[f.tensor][tuple(slice(lo, hi) for lo, hi in zip(f.lo, f.hi))]
            shape = [hi - lo for lo, hi in zip(f.lo, f.hi)]
            stage.as_strided(shape, list(f.strides), f.byte_offset).copy_(box)
        quantized = [per_block_cast_to_fp8(m, [128, 128])
                     for m in stage.view(pair.matrices, pair.rows, pair.cols)]
        buffers[pair.buffer] = as_bytes(torch.stack([q for q, _ in quantized]))
        buffers[pair.scales] = as_bytes(torch.stack([s for _, s in quantized]))


def fragment_keys(layout, rank: int) -> list[tuple]:
    """`rank`'s fragments in `layout` as sortable tuples, to compare two layouts of a rank."""
    return sorted((f.tensor, tuple(f.lo), tuple(f.hi), f.buffer, f.byte_offset)
                  for f in layout.fragments(rank))


def layout_differences(engine: str, params: dict[str, torch.Tensor], layout, rank: int,
                       expected: dict[str, torch.Tensor]) -> list[str]:
    """What ferry's layout of `rank` says otherwise than the parameters `engine` loaded:
    parameters one side lacks, sizes, and bytes against `expected` (fill_buffers' buffers)."""
    buffers = {b.name: b for b in layout.buffers(rank)}
    problems = [f"{engine} has {n}, ferry does not" for n in sorted(set(params) - set(buffers))]
    problems += [f"ferry has {n}, {engine} does not" for n in sorted(set(buffers) - set(params))]
    for name in sorted(set(params) & set(buffers)):
        p, size = params[name], buffers[name].bytes
        if p.numel() * p.element_size() != size:
            problems.append(f"{name}: {engine} {tuple(p.shape)} {p.dtype}, ferry {size} bytes")
        elif not torch.equal(as_bytes(p), expected[name]):
            problems.append(f"{name}: bytes differ from ferry's fragments")
    return problems


def spec_mismatch(model_dir: str, layout, rank: int, derived: str, source: str) -> list[str]:
    """[] when spec `derived` (what `source` read from the framework's own config objects) lays
    `rank` out as `layout` does, else the problem."""
    other = ferry.Layout.preset(model_dir, derived + ",expert_tensors=members")
    if fragment_keys(other, rank) != fragment_keys(layout, rank):
        return [f"{source} gives {derived}, another layout"]
    return []


def verdict(rank: int, spec: str, problems: list[str], parameters: int) -> int:
    """Prints a layout worker's verdict on `rank`; its exit code."""
    if problems:
        print(f"rank {rank} under {spec}:\n  " + "\n  ".join(problems))
        return 1
    print(f"rank {rank}: {parameters} parameters byte-exact")
    return 0


def as_bytes(t: torch.Tensor) -> torch.Tensor:
    """`t`'s elements, in row-major order, as bytes."""
    return t.detach().contiguous().view(-1).view(torch.uint8)
