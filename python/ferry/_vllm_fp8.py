"""FP8 block-quantized linear layers of a vLLM worker as ferry's block-scaled buffers: which
layers vLLM quantized, and the scale format their values and scales hold once the layer's GEMM
kernel has processed them after loading, which is what a refit must write in place.

A checkpoint whose quantization_config is fp8 with weight_block_size [128, 128] (DeepSeek-V3's,
Qwen3's FP8 releases) makes every linear layer's quant_method an Fp8LinearMethod with block_quant
(vllm/model_executor/layers/quantization/fp8.py): `weight` holds e4m3 values, one byte each, and
`weight_scale_inv` one fp32 scale_inv per 128x128 block of the rank's [rows, cols] partition
(BlockQuantScaleParameter). The refit quantizes the trainer's bf16 into them as vLLM's
per_block_cast_to_fp8 does (ferry.BlockScaled), so the trainer sends unquantized weights.

What the kernel does after loading decides what vLLM holds (vllm/model_executor/kernels/linear/
scaled_mm/): CUTLASS, Triton, torch's blockwise and FlashInfer's block GEMM compute from the
weights as loaded (float32 scales); DeepGEMM, alone or behind FlashInfer's dynamic kernel,
requantizes them to power-of-two scales when it runs with E8M0 scales
(fp8_utils.py requant_weight_ue8m0_inplace), which on Hopper stay an fp32 tensor of the same shape
(vllm/utils/deep_gemm.py DeepGemmQuantScaleFMT.FLOAT32_CEIL_UE8M0: ferry's "ue8m0") and on
Blackwell become packed int32 codes (UE8M0). Refused, by layer name: packed scales, Marlin, AITER,
the CPU kernels, per-tensor FP8, checkpoint E8M0 scales and every other quantization method.

Duck-typed, as _vllm_layout.py; vLLM is imported only to read DeepGEMM's scale format.
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


def _deep_gemm_scale_format(name: str, kernel: Any) -> str:
    """The scales DeepGEMM's kernel leaves (scaled_mm/deep_gemm.py,
    DeepGemmFp8BlockScaledMMKernel.process_weights_after_loading): as loaded without E8M0, else
    requantized to powers of two (fp8_utils.py requant_weight_ue8m0_inplace) and laid out by
    DeepGEMM's transform_sf_into_required_layout, which keeps fp32 128x128 scales as they are on
    Hopper (vllm/utils/deep_gemm.py DeepGemmQuantScaleFMT.FLOAT32_CEIL_UE8M0) and packs them into
    int32 E8M0 codes on Blackwell (UE8M0)."""
    if not kernel.is_deep_gemm_supported or not kernel.use_deep_gemm_e8m0:
        return "float32"
    from vllm.utils.deep_gemm import DeepGemmQuantScaleFMT
    if DeepGemmQuantScaleFMT.from_oracle() == DeepGemmQuantScaleFMT.FLOAT32_CEIL_UE8M0:
        return "ue8m0"
    raise ValueError(f"vLLM layer {name}: DeepGEMM packs its E8M0 scales into int32 codes here "
                     "(Blackwell), which ferry.vllm does not write yet; serve with "
                     "VLLM_USE_DEEP_GEMM=0 or a float32-scale kernel")


def fp8_block_scale_format(name: str, module: Any) -> str | None:
    """None for a linear layer vLLM keeps unquantized; the scale format ferry writes into an FP8
    block-quantized one (Fp8LinearMethod with 128x128 blocks) under its GEMM kernel; ValueError
    naming the layer for any other quantization, or a kernel that keeps the weights otherwise."""
    method = getattr(module, "quant_method", None)
    kind = type(method).__name__
    if method is None or kind.startswith("Unquantized"):
        return None
    if kind != "Fp8LinearMethod" or not getattr(method, "block_quant", False):
        raise ValueError(f"vLLM layer {name} is quantized by {kind}"
                         f"{'' if kind != 'Fp8LinearMethod' else ' per tensor'}; ferry.vllm "
                         "refits unquantized layers and FP8 block-quantized ones")
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
        return _deep_gemm_scale_format(name, kernel)
    raise ValueError(f"vLLM layer {name}: the {kernel_kind} kernel keeps the FP8 weights in "
                     "its own layout after loading, which an in-place refit would not write")


def quantized_layers(modules: Mapping[str, Any]) -> dict[str, str]:
    """The scale format of every FP8 block-quantized linear layer, by module name; ValueError
    for any linear layer quantized otherwise (fp8_block_scale_format)."""
    formats = {}
    for name, module in modules.items():
        if hasattr(module, "input_size") and hasattr(module, "output_size"):  # LinearBase
            scale_fmt = fp8_block_scale_format(name, module)
            if scale_fmt is not None:
                formats[name] = scale_fmt
    return formats


def block_scaled(prefix: str, module: Any, scale_fmt: str, rank: int) -> BlockScaled:
    """The BlockScaled of FP8 layer `prefix`'s weight and weight_scale_inv, checked to hold one
    fp32 scale per 128x128 block of the weight (BlockQuantScaleParameter)."""
    rows, cols = module.weight.shape
    scales = module.weight_scale_inv
    want = ((rows + 127) // 128, (cols + 127) // 128)
    if tuple(scales.shape) != want or dtype_name(scales.dtype) != "fp32":
        raise ValueError(f"vLLM parameter {prefix}.weight_scale_inv is {scales.dtype} "
                         f"{list(scales.shape)}, not fp32 {list(want)} for its weight "
                         f"[{rows}, {cols}]")
    return BlockScaled(rank, f"{prefix}.weight", f"{prefix}.weight_scale_inv", rows, cols,
                       scale_fmt=scale_fmt)
