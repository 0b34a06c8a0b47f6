"""FP8 block-quantized layers of a vLLM worker as ferry's block-scaled buffers: which layers vLLM
quantized, and the scale format their values and scales hold once the layer's kernel has
processed them after loading, which is what a refit must write in place.

A checkpoint whose quantization_config is fp8 with weight_block_size [128, 128] (DeepSeek-V3's,
Qwen3's FP8 releases) makes a linear layer's quant_method an Fp8LinearMethod with block_quant and
an expert layer's an Fp8MoEMethod (vllm/model_executor/layers/quantization/fp8.py); a bf16
checkpoint served with --quantization fp8_per_block (an RL engine's FP8 rollouts) makes them
Fp8PerBlockOnlineLinearMethod and Fp8PerBlockOnlineMoEMethod, which quantize as vLLM loads
(quantization/online/fp8.py) and leave the same parameters. A linear layer's `weight` holds
e4m3 values, one byte each, and `weight_scale_inv` one fp32 scale_inv per 128x128 block of the
rank's [rows, cols] partition (BlockQuantScaleParameter); RoutedExperts' `w13_weight` [local
experts, 2 * I/tp, H] and `w2_weight` [local experts, H, I/tp] hold e4m3 values and
`w13_weight_scale_inv` / `w2_weight_scale_inv` one scale per block of each expert's matrix
(Fp8MoEMethod.create_weights). The refit quantizes the trainer's bf16 into them as vLLM's
per_block_cast_to_fp8 does (ferry.BlockScaled), so the trainer sends unquantized weights.

What the kernel does after loading decides what vLLM holds. Linear layers
(vllm/model_executor/kernels/linear/scaled_mm/): CUTLASS, Triton, torch's blockwise and
FlashInfer's block GEMM compute from the weights as loaded (float32 scales); DeepGEMM, alone or
behind FlashInfer's dynamic kernel, requantizes them to power-of-two scales when it runs with E8M0
scales (fp8_utils.py requant_weight_ue8m0_inplace), which on Hopper stay an fp32 tensor of the
same shape (vllm/utils/deep_gemm.py DeepGemmQuantScaleFMT.FLOAT32_CEIL_UE8M0: ferry's "ue8m0")
and on Blackwell (SM100) become DeepGEMM's packed int32 codes (UE8M0: ferry's "ue8m0_packed",
core/base/fp8_packed_scales.h). Experts
(vllm/model_executor/layers/fused_moe/oracle/fp8.py convert_to_fp8_moe_kernel_format): Triton's
and vLLM's CUTLASS backends keep them as loaded, DeepGEMM's as its linear kernel does. Refused, by
layer name: E8M0 scales on SM120, blocks refined for a TP shard, Marlin, FlashInfer's expert
backends, AITER, the CPU kernels, per-tensor FP8, checkpoint E8M0 scales and every other
quantization method.

Duck-typed, as _vllm_layout.py; vLLM is imported only where DeepGEMM runs a layer, to read the
GPU's family and whether it runs with E8M0 scales.
"""

from __future__ import annotations

from typing import Any, Mapping

from ._arrays import dtype_name
from ._layout import BlockScaled

# The block-scaled GEMM kernels that compute from the weights and fp32 scales as vLLM's loaders
# leave them (vllm/model_executor/kernels/linear/scaled_mm/: cutlass.py, triton.py, pytorch.py,
# flashinfer.py; none overrides Fp8BlockScaledMMLinearKernel.process_weights_after_loading,
# whose process_fp8_weight_block_strategy changes only ROCm's e4m3fnuz weights).
_LOADED_SCALE_KERNELS = ("CutlassFp8BlockScaledMMKernel", "TritonFp8BlockScaledMMKernel",
                         "BlockWiseTorchFP8ScaledMMLinearKernel",
                         "FlashInferFp8BlockScaledMMKernel")


# vLLM's FP8 block-quantized methods: of FP8 checkpoints (quantization/fp8.py) and of bf16 ones
# that vLLM quantizes as it loads them (--quantization fp8_per_block, quantization/online/fp8.py:
# per_block_cast_to_fp8 of each rank's partition, or of each expert's matrices, then the same
# kernel step), which leave the same parameters.
_LINEAR_METHODS = ("Fp8LinearMethod", "Fp8PerBlockOnlineLinearMethod")
_EXPERT_METHODS = ("Fp8MoEMethod", "Fp8PerBlockOnlineMoEMethod")

# The FP8 expert backends that compute from w13/w2 and their fp32 block scales as loaded
# (vllm/model_executor/layers/fused_moe/oracle/fp8.py convert_to_fp8_moe_kernel_format leaves
# them as they are); FlashInfer's shuffle and pad them, AITER shuffles, Marlin repacks, the CPU
# backends prepack.
_LOADED_EXPERT_BACKENDS = ("TRITON", "BATCHED_TRITON", "VLLM_CUTLASS", "BATCHED_VLLM_CUTLASS")


def _deep_gemm_scales(name: str, e8m0: bool) -> str:
    """The scales vLLM leaves where DeepGEMM post-processes a layer (`e8m0`: with E8M0 scales,
    vllm/utils/deep_gemm.py is_deep_gemm_e8m0_used): fp8_utils.py
    deepgemm_post_process_fp8_weight_block requantizes the values to power-of-two scales
    (requant_weight_ue8m0_inplace) when `e8m0`, then hands the scales to DeepGEMM's
    transform_sf_into_required_layout with disable_ue8m0_cast = not `e8m0`
    (deepseek-ai/DeepGEMM csrc/apis/layout.hpp): fp32 128x128 scales stay as they are on Hopper
    or without E8M0 (DeepGemmQuantScaleFMT.FLOAT32 and FLOAT32_CEIL_UE8M0); with E8M0 on SM100
    they become packed int32 codes (UE8M0), and SM120 has no such layout there (refused)."""
    from vllm.platforms import current_platform
    if not e8m0:
        return "float32"
    if current_platform.is_device_capability_family(100):
        return "ue8m0_packed"
    if current_platform.is_device_capability_family(120):
        raise ValueError(f"vLLM layer {name}: DeepGEMM with E8M0 scales on an SM120 GPU, whose "
                         "scale layout ferry.vllm does not know; serve with "
                         "VLLM_USE_DEEP_GEMM_E8M0=0 (float32 scales)")
    return "ue8m0"


def _linear_scale_format(name: str, module: Any, method: Any) -> str:
    """An Fp8LinearMethod layer's scale format under its GEMM kernel (module docstring)."""
    e8m0 = getattr(method, "is_scale_e8m0", False)
    if list(module.weight_block_size) != [128, 128] or e8m0:
        raise ValueError(f"vLLM layer {name}: FP8 blocks {list(module.weight_block_size)} with "
                         f"{'E8M0' if e8m0 else 'fp32'} checkpoint scales; ferry.vllm writes "
                         "128x128 blocks with fp32 scales")
    kernel = method.fp8_linear
    kernel = getattr(kernel, "fallback", kernel)  # FlashInfer's dynamic kernel: DeepGEMM's step
    kernel_kind = type(kernel).__name__
    if kernel_kind in _LOADED_SCALE_KERNELS:
        return "float32"
    if kernel_kind == "DeepGemmFp8BlockScaledMMKernel":
        # scaled_mm/deep_gemm.py process_weights_after_loading: post-processed where supported
        if not kernel.is_deep_gemm_supported:
            return "float32"
        return _deep_gemm_scales(name, kernel.use_deep_gemm_e8m0)
    raise ValueError(f"vLLM layer {name}: the {kernel_kind} kernel keeps the FP8 weights in "
                     "its own layout after loading, which an in-place refit would not write")


def _expert_scale_format(name: str, method: Any) -> str:
    """An FP8 expert layer's scale format under its expert backend: 128x128 blocks that TP did
    not refine (fused_moe/oracle/fp8.py resolve_fp8_moe_weight_block_shape), kept as loaded, or
    DeepGEMM's (prepare_fp8_moe_layer_for_deepgemm)."""
    # (the online method has no TP-refined shape: its weight_block_size)
    blocks = list(getattr(method, "moe_block_shape", None) or method.weight_block_size)
    if blocks != [128, 128] or getattr(method, "weight_scale_refine", None) is not None:
        raise ValueError(f"vLLM layer {name}: FP8 expert blocks {blocks} (refined for the TP "
                         "shard); ferry.vllm writes 128x128 blocks")
    backend = method.fp8_backend.name
    if backend in _LOADED_EXPERT_BACKENDS:
        return "float32"
    if backend in ("DEEPGEMM", "BATCHED_DEEPGEMM"):  # prepare_fp8_moe_layer_for_deepgemm
        from vllm.utils.deep_gemm import is_deep_gemm_e8m0_used
        return _deep_gemm_scales(name, is_deep_gemm_e8m0_used())
    raise ValueError(f"vLLM layer {name}: the {method.fp8_backend.value} FP8 MoE kernel "
                     "rearranges the expert weights after loading, which an in-place refit "
                     "would not; serve with --moe-backend triton, or deep_gemm (DeepGEMM's "
                     "scales, on Hopper and Blackwell alike)")


def is_fp8_block_method(method: Any) -> bool:
    """Whether a layer's quant_method is one of vLLM's FP8 block-quantized methods."""
    return type(method).__name__ in _LINEAR_METHODS + _EXPERT_METHODS and \
        getattr(method, "block_quant", True)


def fp8_block_scale_format(name: str, module: Any) -> str | None:
    """None for a linear or expert layer vLLM keeps unquantized; the scale format ferry writes
    into an FP8 block-quantized one (Fp8LinearMethod or Fp8MoEMethod with 128x128 blocks) under
    its kernel; ValueError naming the layer for any other quantization, or a kernel that keeps
    the weights otherwise."""
    method = getattr(module, "quant_method", None)
    kind = type(method).__name__
    if method is None or kind.startswith("Unquantized"):
        return None
    if not is_fp8_block_method(method):
        raise ValueError(f"vLLM layer {name} is quantized by {kind}"
                         f"{' per tensor' if kind in _LINEAR_METHODS + _EXPERT_METHODS else ''}; "
                         "ferry.vllm refits unquantized layers and FP8 block-quantized ones")
    if kind in _EXPERT_METHODS:
        return _expert_scale_format(name, method)
    return _linear_scale_format(name, module, method)


def quantized_layers(modules: Mapping[str, Any]) -> dict[str, str]:
    """The scale format of every FP8 block-quantized linear or expert layer, by module name;
    ValueError for any such layer quantized otherwise (fp8_block_scale_format)."""
    formats = {}
    for name, module in modules.items():
        linear = hasattr(module, "input_size") and hasattr(module, "output_size")  # LinearBase
        if linear or hasattr(module, "expert_map_manager"):  # RoutedExperts
            scale_fmt = fp8_block_scale_format(name, module)
            if scale_fmt is not None:
                formats[name] = scale_fmt
    return formats


# An FP8 layer's e4m3 parameters, each with its scales parameter "<name>_scale_inv".
FP8_WEIGHTS = ("weight", "w13_weight", "w2_weight")


def block_scaled(prefix: str, module: Any, leaf: str, scale_fmt: str,
                 rank: int) -> tuple[BlockScaled, Any]:
    """The BlockScaled of FP8 layer `prefix`'s parameter `leaf` (an FP8_WEIGHTS name) and its
    scales, and the array to register as those scales: one fp32 scale per 128x128 block of each
    of its matrices (a linear weight is one [rows, cols] matrix, an expert weight one a local
    expert; BlockQuantScaleParameter, Fp8MoEMethod.create_weights), or for "ue8m0_packed"
    DeepGEMM's packed codes (_packed_scales). ValueError names a parameter held otherwise."""
    weight, scales = getattr(module, leaf), getattr(module, f"{leaf}_scale_inv")
    *stack, rows, cols = weight.shape
    name = f"{prefix}.{leaf}_scale_inv"
    if scale_fmt == "ue8m0_packed":
        array = _packed_scales(name, scales.data, stack, rows, cols)
    else:
        want = (*stack, (rows + 127) // 128, (cols + 127) // 128)
        if tuple(scales.shape) != want or dtype_name(scales.dtype) != "fp32":
            raise ValueError(f"vLLM parameter {name} is {scales.dtype} {list(scales.shape)}, "
                             f"not fp32 {list(want)} for its weight {list(weight.shape)}")
        array = scales.data
    return BlockScaled(rank, f"{prefix}.{leaf}", name, rows, cols,
                       matrices=stack[0] if stack else 1, scale_fmt=scale_fmt), array


def _packed_scales(name: str, scales: Any, stack: list[int], rows: int, cols: int) -> Any:
    """The whole storage of DeepGEMM's packed E8M0 scales of `stack` (at most one dimension:
    experts) [rows, cols] matrices, flat int32, to register: DeepGEMM's
    get_mn_major_tma_aligned_packed_ue8m0_tensor (csrc/jit_kernels/impls/smxx_layout.hpp) gives
    int32 [G, rows, P] with strides [P * N4, 1, N4] (P words of four 128-column blocks' codes a
    row, N4 rows rounded up to 4: core/base/fp8_packed_scales.h), squeezed for one matrix. The
    refit writes the G * P * N4 words, padding rows included (zero), so the tensor's storage
    must hold them: DeepGEMM allocates only up to its last row, which falls short of the padding
    of the last column of the last matrix when rows is not a multiple of 4 (refused)."""
    words = ((cols + 127) // 128 + 3) // 4
    stride = (rows + 3) // 4 * 4
    matrices = stack[0] if stack else 1
    want = (*stack, rows, words)
    want_strides = ((words * stride,) if stack else ()) + (1, stride)
    if tuple(scales.shape) != want or tuple(scales.stride()) != want_strides or \
            dtype_name(scales.dtype) != "int32":
        raise ValueError(f"vLLM parameter {name} is {scales.dtype} {list(scales.shape)} with "
                         f"strides {list(scales.stride())}, not DeepGEMM's packed E8M0 scales: "
                         f"int32 {list(want)} with strides {list(want_strides)}")
    try:
        return scales.as_strided((matrices * words * stride,), (1,))
    except RuntimeError as e:
        raise ValueError(f"vLLM parameter {name}: DeepGEMM's packed scales of {rows} rows end "
                         f"before the padding rows up to {stride} that ferry writes ({e})") from e
