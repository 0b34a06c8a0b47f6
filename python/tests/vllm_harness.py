"""vLLM's own model classes on the CPU, for ferry's vLLM tests (run by the vLLM environment's
python): a worker's model built by the class its Hugging Face config names, at any TP/PP/DP rank
with or without expert parallelism (vLLM's parallel groups stood in for by their rank and size,
as its layers read them), and vLLM's own `load_weights` to compare ferry's writes with; the
tiny Qwen3-MoE of ferry.vllm's refit test with its checkpoint at each step; and EPLB as vLLM's
model runner keeps it (start_eplb), rearranges it (rearrange_experts) and loads under it
(load_placed).

vLLM 0.33 keeps a MoE layer's experts in `RoutedExperts` (`mlp.experts.routed_experts.w13_weight`
[local experts, 2 * I/tp, H] and `w2_weight` [local experts, H, I/tp]); without expert
parallelism its MoE TP spans tp x dp ranks (`FusedMoEParallelConfig.make`,
vllm/model_executor/layers/fused_moe/config.py), with it each of the tp x dp ranks holds whole
experts.
"""

from __future__ import annotations

import contextlib
import json
import os
import types
from typing import Iterator
from unittest import mock

import torch

from deep_gemm_layout import deep_gemm_sm100_transform

# vLLM picks its platform at import; on a machine without a GPU its attention layers then find
# no backend unless it is told it runs on the CPU.
os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")

DTYPE = torch.bfloat16
# The FP8 block-scaled GEMM kernel an FP8 model's linear layers record here (vllm/model_executor/
# kernels/linear/scaled_mm/): on the CPU vLLM finds none without AMX, so the harness stands in
# for a CUDA engine's. Its weights are never processed after loading here: with "DeepGemmE8M0"
# the test itself does what DeepGEMM's step does to them (requantize_ue8m0 on Hopper,
# deep_gemm_sm100 on Blackwell).
FP8_KERNEL = "TritonFp8BlockScaledMMKernel"

HIDDEN, HEADS, KV_HEADS, HEAD_DIM, MOE_I, EXPERTS, VOCAB, LAYERS = 32, 4, 2, 8, 16, 8, 128, 2
CONFIG = dict(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=64,
              moe_intermediate_size=MOE_I, num_hidden_layers=LAYERS,
              num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM,
              num_experts=EXPERTS, num_experts_per_tok=2, decoder_sparse_step=1,
              mlp_only_layers=[], tie_word_embeddings=False, torch_dtype="bfloat16",
              architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe",
              max_position_embeddings=4096)


def expert_names(layer: int, expert: int) -> list[str]:
    prefix = f"model.layers.{layer}.mlp.experts.{expert}"
    return [f"{prefix}.gate_proj.weight", f"{prefix}.up_proj.weight",
            f"{prefix}.down_proj.weight"]


def checkpoint_shapes() -> dict[str, tuple[int, ...]]:
    """The Hugging Face tensors of CONFIG's Qwen3-MoE."""
    q, kv = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    shapes = {"model.embed_tokens.weight": (VOCAB, HIDDEN), "model.norm.weight": (HIDDEN,),
              "lm_head.weight": (VOCAB, HIDDEN)}
    for layer in range(LAYERS):
        p = f"model.layers.{layer}."
        shapes.update({
            p + "input_layernorm.weight": (HIDDEN,),
            p + "post_attention_layernorm.weight": (HIDDEN,),
            p + "self_attn.q_proj.weight": (q, HIDDEN), p + "self_attn.k_proj.weight": (kv, HIDDEN),
            p + "self_attn.v_proj.weight": (kv, HIDDEN), p + "self_attn.o_proj.weight": (HIDDEN, q),
            p + "self_attn.q_norm.weight": (HEAD_DIM,), p + "self_attn.k_norm.weight": (HEAD_DIM,),
            p + "mlp.gate.weight": (EXPERTS, HIDDEN)})
        for expert in range(EXPERTS):
            gate, up, down = expert_names(layer, expert)
            shapes.update({gate: (MOE_I, HIDDEN), up: (MOE_I, HIDDEN), down: (HIDDEN, MOE_I)})
    return shapes


def checkpoint(step: int) -> dict[str, torch.Tensor]:
    """The full weights after trainer step `step`: random, different every step."""
    g = torch.Generator().manual_seed(2000 + step)
    return {n: torch.randn(s, generator=g).to(DTYPE) for n, s in checkpoint_shapes().items()}


def _group(rank: int, size: int):
    """A stand-in for one of vLLM's parallel groups: its rank and size, as its layers read
    them (nothing here communicates)."""
    return types.SimpleNamespace(rank_in_group=rank, world_size=size, rank=rank, local_rank=0,
                                 is_first_rank=rank == 0, is_last_rank=rank == size - 1,
                                 device_group=types.SimpleNamespace(size=lambda: size,
                                                                    rank=lambda: rank),
                                 cpu_group=None)


def write_config(directory: str, config: dict) -> str:
    """`config` as `directory`/config.json, written whole even when processes race to write it;
    returns `directory`."""
    path = os.path.join(directory, "config.json")
    if not os.path.exists(path):
        os.makedirs(directory, exist_ok=True)
        temporary = f"{path}.{os.getpid()}"
        with open(temporary, "w") as f:
            json.dump(config, f)
        os.replace(temporary, path)
    return directory


def build(model_dir: str, tp: int, tp_rank: int, dp: int = 1, dp_rank: int = 0,
          ep: bool = False, pp: int = 1, pp_rank: int = 0, placement: str = "linear",
          redundant: int = 0, moe_kernel: str | None = "TRITON", fp8_kernel: str = FP8_KERNEL,
          quantization: str | None = None):
    """The class `model_dir`'s config names, as worker (dp_rank, pp_rank, tp_rank) of a
    TPxPPxDP engine builds it (with `redundant` > 0: under EPLB with that many redundant
    experts), its parameters zeroed, and the VllmConfig it was built under. Its MoE layers run
    the expert kernel `moe_kernel` (None: the one vLLM picks here, on the CPU), its FP8 linear
    layers `fp8_kernel` (instantiate). `quantization` is the engine's --quantization (e.g.
    "fp8_per_block": a bf16 checkpoint quantized by vLLM as it loads)."""
    import vllm.distributed.parallel_state as parallel_state
    from vllm.config import (AttentionConfig, DeviceConfig, LoadConfig, ModelConfig,
                             ParallelConfig, VllmConfig)

    parallel_state._TP = _group(tp_rank, tp)
    parallel_state._PP = _group(pp_rank, pp)
    parallel_state._DP = _group(dp_rank, dp)
    parallel_state._EP = _group(dp_rank * tp + tp_rank, dp * tp)
    parallel_state._PCP = parallel_state._DCP = _group(0, 1)
    parallel = ParallelConfig(tensor_parallel_size=tp, pipeline_parallel_size=pp,
                              data_parallel_size=dp, data_parallel_rank=dp_rank,
                              enable_expert_parallel=ep, expert_placement_strategy=placement)
    parallel.rank = pp_rank * tp + tp_rank
    model_config = ModelConfig(model=model_dir, dtype="bfloat16", skip_tokenizer_init=True,
                               quantization=quantization)
    # MLA on the CPU backend whatever the CPU: vLLM prefers its AMX backend where the CPU has AMX
    # (platforms/cpu.py), which packs W_UK and W_UV with kernels PyPI's vLLM lacks and which
    # ferry.vllm refuses; CPU_MLA derives them as the CUDA backends do. Other attention keeps
    # CPU_ATTN.
    config = VllmConfig(model_config=model_config, parallel_config=parallel,
                        device_config=DeviceConfig(device="cpu"),
                        load_config=LoadConfig(load_format="dummy"),
                        attention_config=AttentionConfig(backend="CPU_MLA"))
    if redundant:  # vLLM validates EPLB only for GPU platforms; its layers build it anywhere
        config.parallel_config.enable_eplb = True
        config.parallel_config.eplb_config.num_redundant_experts = redundant
    return instantiate(config, moe_kernel, fp8_kernel), config


def _fp8_kernel_factory(kernel: str):
    """A stand-in for vLLM's init_fp8_linear_kernel that makes the FP8 block-scaled kernel
    `kernel` names ("DeepGemmE8M0": DeepGEMM with E8M0 scales) for every layer, but DeepGEMM
    only where it can run the layer (scaled_mm/deep_gemm.py can_implement:
    vllm/utils/deep_gemm.py should_use_deepgemm_for_fp8_linear, bf16 output, rows % 64 == 0,
    columns % 128 == 0); elsewhere vLLM picks a kernel that keeps the float32 scales as loaded,
    as FP8_KERNEL does."""
    from vllm.model_executor.kernels import linear as kernels
    from vllm.model_executor.kernels.linear.scaled_mm.ScaledMMLinearKernel import (
        FP8ScaledMMLinearLayerConfig)
    from vllm.utils.deep_gemm import should_use_deepgemm_for_fp8_linear

    def make(activation_quant_key, weight_quant_key, input_dtype, out_dtype, weight_shape,
             **_):
        config = FP8ScaledMMLinearLayerConfig(
            weight_quant_key=weight_quant_key, activation_quant_key=activation_quant_key,
            input_dtype=input_dtype, out_dtype=out_dtype, weight_shape=weight_shape)
        if kernel == "DeepGemmE8M0" and not should_use_deepgemm_for_fp8_linear(
                out_dtype, weight_shape, supports_deep_gemm=True):
            return getattr(kernels, FP8_KERNEL)(config)
        if kernel != "DeepGemmE8M0":
            return getattr(kernels, kernel)(config)
        made = kernels.DeepGemmFp8BlockScaledMMKernel(config)
        made.is_deep_gemm_supported = made.use_deep_gemm_e8m0 = True
        return made
    return make


def process_kv_scales(model) -> None:
    """What vLLM's loader does to the attention layers of a quantized model once the weights are
    loaded (model_loader/utils.py process_weights_after_loading calls each layer's quant
    method; quantization/kv_cache.py BaseKVCacheMethod): the KV-cache scale parameters
    (q_scale, k_scale, v_scale, prob_scale) become the layer's private values and are deleted,
    so a served model has none."""
    from vllm.model_executor.layers.quantization.kv_cache import BaseKVCacheMethod
    for module in model.modules():
        method = getattr(module, "quant_method", None)
        if isinstance(method, BaseKVCacheMethod):
            method.process_weights_after_loading(module)


def _deep_gemm_linear(module) -> bool:
    """Whether `module` is an FP8 linear layer that DeepGEMM's kernel runs."""
    kernel = getattr(getattr(module, "quant_method", None), "fp8_linear", None)
    return type(kernel).__name__ == "DeepGemmFp8BlockScaledMMKernel"


def requantize_ue8m0(model) -> None:
    """What DeepGEMM's kernel does to each FP8 linear layer it runs after loading with E8M0 scales
    (scaled_mm/deep_gemm.py process_weights_after_loading: fp8_utils.py
    requant_weight_ue8m0_inplace; on Hopper the scales then stay as they are)."""
    from vllm.model_executor.layers.quantization.utils.fp8_utils import (
        requant_weight_ue8m0_inplace)
    for module in model.modules():
        if _deep_gemm_linear(module):
            requant_weight_ue8m0_inplace(module.weight.data, module.weight_scale_inv.data,
                                         module.weight_block_size)


def deep_gemm_sm100(model) -> None:
    """What vLLM does after loading to each FP8 layer DeepGEMM runs on an SM100 GPU with E8M0
    scales, by vLLM's own code with only DeepGEMM's CUDA transform stood in for
    (deep_gemm_sm100_transform): a linear layer's DeepGEMM kernel's process_weights_after_loading
    (scaled_mm/deep_gemm.py: requant_weight_ue8m0_inplace, the transform, replace_parameter), and
    an expert layer's Fp8MoEMethod.process_weights_after_loading under the DEEPGEMM backend
    (quantization/fp8.py: oracle/fp8.py convert_to_fp8_moe_kernel_format's
    prepare_fp8_moe_layer_for_deepgemm, then replace_parameter), without building the CUDA
    expert kernel after it (_init_moe_kernel)."""
    from vllm.model_executor.layers.fused_moe.oracle.fp8 import Fp8MoeBackend
    from vllm.model_executor.layers.quantization.utils import fp8_utils
    with mock.patch.object(fp8_utils, "transform_sf_into_required_layout",
                           deep_gemm_sm100_transform), \
            mock.patch.object(fp8_utils, "is_deep_gemm_e8m0_used", lambda: True):
        for module in model.modules():
            method = getattr(module, "quant_method", None)
            if _deep_gemm_linear(module):
                method.fp8_linear.process_weights_after_loading(module)
            elif getattr(method, "fp8_backend", None) is Fp8MoeBackend.DEEPGEMM:
                with mock.patch.object(method, "_init_moe_kernel", lambda layer: None):
                    method.process_weights_after_loading(module)


def instantiate(config, moe_kernel: str | None = "TRITON", fp8_kernel: str = FP8_KERNEL):
    """The class `config.model_config` names, built under `config` in bf16 as vLLM's loader
    builds it (model_loader/utils.py initialize_model), its parameters zeroed.

    On the CPU vLLM gives unquantized MoE layers its CPU expert kernel, which prepacks the
    weights after loading; a CUDA engine on Hopper gets Triton's, which computes from them as
    loaded (fused_moe/oracle/unquantized.py, `_get_priority_backends`). `moe_kernel` names the
    `UnquantizedMoeBackend` the layers record instead, standing in for that engine: the weights
    here are never processed after loading, so they are as a Triton engine holds them; FP8
    experts record `moe_kernel` as their Fp8MoeBackend too. FP8 block-quantized linear layers
    record the kernel `fp8_kernel` names (FP8_KERNEL)."""
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.model_loader.utils import get_model_architecture

    from vllm.model_executor.layers.quantization import fp8
    from vllm.model_executor.layers.quantization.online import fp8 as online_fp8

    cls, _ = get_model_architecture(config.model_config)
    with set_current_vllm_config(config):
        previous = (torch.get_default_dtype(), fp8.init_fp8_linear_kernel)
        torch.set_default_dtype(DTYPE)
        fp8.init_fp8_linear_kernel = _fp8_kernel_factory(fp8_kernel)
        online_fp8.init_fp8_linear_kernel = fp8.init_fp8_linear_kernel
        try:
            model = cls(vllm_config=config, prefix="")
        finally:
            torch.set_default_dtype(previous[0])
            fp8.init_fp8_linear_kernel = online_fp8.init_fp8_linear_kernel = previous[1]
    for p in model.parameters():
        p.data.zero_()
    if moe_kernel is not None:
        from vllm.model_executor.layers.fused_moe.oracle.fp8 import Fp8MoeBackend
        from vllm.model_executor.layers.fused_moe.oracle.unquantized import UnquantizedMoeBackend
        for module in model.modules():
            method = getattr(module, "quant_method", None)
            if hasattr(method, "unquantized_backend"):
                method.unquantized_backend = UnquantizedMoeBackend[moe_kernel]
            if hasattr(method, "fp8_backend"):  # FP8 experts (quantization/fp8.py Fp8MoEMethod)
                method.fp8_backend = Fp8MoeBackend[moe_kernel]
            if type(method).__name__ == "Fp8PerBlockOnlineMoEMethod":
                # It quantizes as vLLM loads, then builds its CUDA expert kernel, which the CPU
                # lacks (quantization/online/fp8.py _setup_kernel); the harness never runs it.
                method.get_fused_moe_quant_config = lambda layer: None
    return model


def speculative_config(config):
    """vLLM's SpeculativeConfig of MTP speculative decoding (one token) for the engine `config`
    (build()'s) serves."""
    from vllm.config import SpeculativeConfig

    return SpeculativeConfig(method="mtp", num_speculative_tokens=1,
                             target_model_config=config.model_config,
                             target_parallel_config=config.parallel_config)


def build_drafter(target, config):
    """The MTP drafter vLLM's speculative decoding (method "mtp") builds beside `target`, built
    under `config` (build()'s), its parameters zeroed, and the VllmConfig it was built under."""
    import dataclasses

    speculative = speculative_config(config)
    parallel = config.parallel_config  # EPLB is validated for GPU platforms only (build())
    eplb = parallel.enable_eplb, parallel.eplb_config.num_redundant_experts
    parallel.enable_eplb, parallel.eplb_config.num_redundant_experts = False, 0
    try:
        draft_config = dataclasses.replace(config, speculative_config=speculative,
                                           model_config=speculative.draft_model_config)
    finally:
        parallel.enable_eplb, parallel.eplb_config.num_redundant_experts = eplb
    draft_parallel = draft_config.parallel_config
    draft_parallel.enable_eplb, draft_parallel.eplb_config.num_redundant_experts = eplb
    return instantiate(draft_config), draft_config


def share_with_target(drafter, target, pp: int) -> None:
    """What vLLM's proposer does once both are loaded (vllm/v1/spec_decode/llm_base_proposer.py
    `_maybe_share_embeddings`, `_maybe_share_lm_head`): an MTP drafter takes the target's
    embed_tokens when there is one PP rank (it keeps its own otherwise), and each MTP layer's
    shared_head.head is the target's lm_head."""
    if pp == 1:
        del drafter.model.embed_tokens
        drafter.model.embed_tokens = target.model.embed_tokens
    for layer in drafter.model.layers.values():
        del layer.shared_head.head
        layer.shared_head.head = target.lm_head


def build_qwen3_moe(directory: str, tp: int, tp_rank: int, dp: int = 1, dp_rank: int = 0,
                    ep: bool = False, redundant: int = 0):
    """build() of the refit test's tiny Qwen3-MoE (CONFIG), its config under `directory`."""
    path = write_config(os.path.join(directory, "qwen3-moe"), CONFIG)
    return build(path, tp, tp_rank, dp, dp_rank, ep, redundant=redundant)


def start_eplb(models):
    """vLLM's EPLB state of `models` ((model, VllmConfig) pairs built with redundant experts:
    the target, then its MTP drafter if any) as its model runner makes it at load
    (vllm/v1/worker/gpu_model_runner.py: EplbState.add_model for each, the drafter as a model of
    its own, which registers each MoE layer's view of its maps with set_eplb_state), on the
    CPU; the communicator that moves expert weights between EP ranks, which needs their process
    group, is left out (None)."""
    from vllm.config import set_current_vllm_config
    from vllm.distributed.eplb.eplb_state import EplbState
    parallel = models[0][1].parallel_config
    parallel.eplb_config.communicator = "torch_gloo"
    state = EplbState(parallel, torch.device("cpu"))
    module = "vllm.distributed.eplb.eplb_state"
    with mock.patch(f"{module}.create_eplb_communicator", lambda **_: None), \
            mock.patch(f"{module}.get_eplb_group", lambda: None):
        for model, config in models:
            with set_current_vllm_config(config):
                state.add_model(model, config.model_config)
    return state


def rearrange_experts(state, physical_to_logical: list[int]) -> None:
    """The maps of an EPLB rearrangement that puts logical expert physical_to_logical[p] in
    physical slot p of every MoE layer, committed as EplbState.rearrange commits them
    (eplb_state.py _commit_eplb_maps: each layer's logical_to_physical_map rewritten in place).
    The expert weights it would move between ranks are left as they are: the next update
    writes every slot."""
    from vllm.distributed.eplb.eplb_state import _commit_eplb_maps
    for model_state in state.model_states.values():
        layers = model_state.physical_to_logical_map.shape[0]
        _commit_eplb_maps(model_state, torch.tensor([physical_to_logical] * layers))


@contextlib.contextmanager
def drafter_loads_replicas(redundant: int) -> Iterator[None]:
    """Inside it, vLLM's MTP drafter loads its redundant experts too. vLLM 0.33's
    DeepSeekMTP.load_weights (vllm/model_executor/models/deepseek_mtp.py) builds its expert
    mapping without the engine's num_redundant_experts, which the target's loader passes
    (deepseek_v2.py DeepseekV2ForCausalLM.load_weights), so under EPLB the drafter's redundant
    physical experts are never loaded and hold what their allocation held. ferry writes each
    slot the expert the drafter's EPLB map gives it; the expected drafter is loaded by vLLM's
    own loader given the count as the target's loader gives it."""
    import vllm.model_executor.models.deepseek_mtp as mtp

    mapping = mtp.fused_moe_make_expert_params_mapping

    def with_replicas(*args, **kwargs):
        return mapping(*args, num_redundant_experts=redundant, **kwargs)

    with mock.patch.object(mtp, "fused_moe_make_expert_params_mapping", with_replicas):
        yield


def load_placed(model, config, weights: dict[str, torch.Tensor],
                physical_to_logical: list[int] | None) -> None:
    """load_with_vllm with logical expert physical_to_logical[p] loaded into physical slot p
    (None: vLLM's initial arrangement): vLLM's expert mapping takes its arrangement from
    EplbState.build_initial_global_physical_to_logical_map (routed_experts.py
    build_expert_params_mapping), which this replaces while it loads."""
    if physical_to_logical is None:
        return load_with_vllm(model, config, weights)
    with mock.patch("vllm.distributed.eplb.eplb_state.EplbState."
                    "build_initial_global_physical_to_logical_map",
                    lambda *_: list(physical_to_logical)):
        load_with_vllm(model, config, weights)


def load_with_vllm(model, config, weights: dict[str, torch.Tensor]) -> None:
    """The checkpoint through vLLM's own Qwen3-MoE load_weights."""
    from vllm.config import set_current_vllm_config
    with set_current_vllm_config(config):
        model.load_weights(iter(weights.items()))


def process_mla(model, act_dtype=DTYPE) -> int:
    """What vLLM's loader does to MLA attention once the weights are loaded
    (model_loader/utils.py `process_weights_after_loading` calls each MLAAttention's): W_UV and
    W_UK_T derived from kv_b_proj for activations in `act_dtype`, on the CPU MLA backend. The
    rest of that step needs vLLM's compiled CPU kernels, which PyPI's vLLM lacks. Returns the
    number of MLA layers."""
    from vllm.model_executor.layers.attention.mla_attention import MLAAttention

    layers = [m for m in model.modules() if isinstance(m, MLAAttention)]
    for layer in layers:
        layer.process_weights_after_loading(act_dtype)
    return len(layers)


def differing(model, expected) -> list[str]:
    """Names of `model`'s parameters whose bytes differ from `expected`'s."""
    want = dict(expected.named_parameters())

    def raw(t):  # its bytes, in element order, whatever its dtype and strides
        return t.data.reshape(-1).contiguous().view(torch.uint8)
    return [n for n, p in model.named_parameters()
            if p.shape != want[n].shape or not torch.equal(raw(p), raw(want[n]))]
