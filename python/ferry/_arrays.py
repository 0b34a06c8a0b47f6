"""Arrays as ferry sees them: where their elements are (address, size, host or which CUDA device)
and their dtype, for numpy arrays, torch tensors (CPU or CUDA), objects with
`__cuda_array_interface__` (CuPy, Numba, ...) and objects with `__dlpack__` (JAX, ...).

ferry never copies a registered array: it reads and writes the caller's storage at the address
taken here, so the array must be C-contiguous, writable and stay alive and unmoved (the Refit
keeps a reference to it, and to the DLPack capsule that pins a DLPack export). torch is imported
only when the object is a torch tensor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import _ferry

# numpy dtype -> ferry dtype name. numpy has no bf16/fp8: hold those as uint8 (raw bytes) or as
# int16/uint16 of the same width (see dtype_matches).
_NUMPY_DTYPES = {
    np.dtype(np.float16): "fp16",
    np.dtype(np.float32): "fp32",
    np.dtype(np.float64): "fp64",
    np.dtype(np.int8): "int8",
    np.dtype(np.int16): "int16",
    np.dtype(np.int32): "int32",
    np.dtype(np.int64): "int64",
    np.dtype(np.uint8): "uint8",
}

_TORCH_DTYPES = {
    "torch.bfloat16": "bf16",
    "torch.float16": "fp16",
    "torch.float32": "fp32",
    "torch.float64": "fp64",
    "torch.float8_e4m3fn": "fp8_e4m3",
    "torch.float8_e5m2": "fp8_e5m2",
    "torch.int8": "int8",
    "torch.int16": "int16",
    "torch.int32": "int32",
    "torch.int64": "int64",
    "torch.uint8": "uint8",
}

# DLPack (type code, bits) -> ferry dtype name; codes from dmlc/dlpack include/dlpack/dlpack.h
# (kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4, kDLFloat8_e4m3fn 10, kDLFloat8_e5m2 12).
_DLPACK_DTYPES = {(0, 8): "int8", (0, 16): "int16", (0, 32): "int32", (0, 64): "int64",
                  (1, 8): "uint8", (2, 16): "fp16", (2, 32): "fp32", (2, 64): "fp64",
                  (4, 16): "bf16", (10, 8): "fp8_e4m3", (12, 8): "fp8_e5m2"}
# DLPack device types (same header): kDLCPU 1, kDLCUDA 2, kDLCUDAHost 3 (pinned host memory).
_DL_CPU, _DL_CUDA, _DL_CUDA_HOST = 1, 2, 3

_SIZES = {"bf16": 2, "fp16": 2, "fp32": 4, "fp64": 8, "fp8_e4m3": 1, "fp8_e5m2": 1,
          "int8": 1, "int16": 2, "int32": 4, "int64": 8, "uint8": 1}


@dataclass(frozen=True)
class ArrayMemory:
    """Where an array's elements are: address, size in bytes, the CUDA device holding them (-1:
    host memory), ferry dtype name (None: none ferry knows), and the array's element kind."""

    address: int
    nbytes: int
    device: int
    dtype: str | None
    itemsize: int
    integer: bool  # an integer dtype (may carry bf16/fp8 bits, which numpy lacks)
    keepalive: Any = None  # what must live as long as the registration (a DLPack capsule)


def _is_torch(obj: Any) -> bool:
    return type(obj).__module__.startswith("torch") and hasattr(obj, "data_ptr")


def dtype_name(dtype: Any) -> str:
    """ferry's name for a numpy dtype, a torch dtype or a ferry name ("bf16", "float32", ...)."""
    if isinstance(dtype, str):
        return dtype
    if str(dtype) in _TORCH_DTYPES:
        return _TORCH_DTYPES[str(dtype)]
    try:
        return _NUMPY_DTYPES[np.dtype(dtype)]
    except (TypeError, KeyError):
        raise TypeError(f"ferry has no dtype for {dtype!r}") from None


def _c_contiguous(shape, strides) -> bool:
    """Whether `strides` (in elements) lay `shape` out in C order; extents of 0 or 1 take any
    stride."""
    expected = 1
    for extent, stride in zip(reversed(shape), reversed(strides)):
        if extent > 1 and stride != expected:
            return False
        expected *= extent
    return True


def _torch_memory(obj: Any, what: str) -> ArrayMemory:
    if obj.device.type not in ("cpu", "cuda"):
        raise ValueError(f"{what}: a {obj.device.type} tensor; ferry moves CPU and CUDA memory")
    if not obj.is_contiguous():
        raise ValueError(f"{what}: the tensor is not contiguous (strides {tuple(obj.stride())}"
                         f" for shape {tuple(obj.shape)}); register a contiguous tensor")
    device = -1
    if obj.device.type == "cuda":
        device = obj.device.index if obj.device.index is not None else _ferry.cuda_pointer_device(
            obj.data_ptr())
    return ArrayMemory(obj.data_ptr(), obj.numel() * obj.element_size(), device,
                       _TORCH_DTYPES.get(str(obj.dtype)), obj.element_size(),
                       not obj.is_floating_point())


def _numpy_memory(obj: np.ndarray, what: str) -> ArrayMemory:
    if not obj.flags.c_contiguous:
        raise ValueError(f"{what}: the array is not C-contiguous (strides {obj.strides} for "
                         f"shape {obj.shape}); register a contiguous array")
    if not obj.flags.writeable:
        raise ValueError(f"{what}: the array is read-only")
    return ArrayMemory(obj.ctypes.data, obj.nbytes, -1, _NUMPY_DTYPES.get(obj.dtype),
                       obj.dtype.itemsize, obj.dtype.kind in "iu")


def _cuda_interface_memory(obj: Any, what: str) -> ArrayMemory:
    """An object exporting __cuda_array_interface__ (version 2 or 3: shape, typestr, data =
    (pointer, read-only), strides in bytes or None, mask)."""
    cai = obj.__cuda_array_interface__
    shape = tuple(int(n) for n in cai["shape"])
    pointer, readonly = cai["data"]
    if readonly:
        raise ValueError(f"{what}: the array is read-only")
    if cai.get("mask") is not None:
        raise ValueError(f"{what}: a masked array; ferry moves plain arrays")
    try:
        dtype = np.dtype(cai["typestr"])
    except TypeError:
        raise TypeError(f"{what}: unknown element type {cai['typestr']!r}") from None
    strides = cai.get("strides")
    if strides is not None and (any(b % dtype.itemsize for b in strides) or not _c_contiguous(
            shape, [b // dtype.itemsize for b in strides])):
        raise ValueError(f"{what}: the array is not C-contiguous (strides {tuple(strides)} for "
                         f"shape {shape}); register a contiguous array")
    nbytes = math.prod(shape) * dtype.itemsize
    try:
        device = _ferry.cuda_pointer_device(pointer)
    except _ferry.FerryError as e:
        raise ValueError(f"{what}: __cuda_array_interface__ memory: {e}") from None
    return ArrayMemory(pointer, nbytes, device, _NUMPY_DTYPES.get(dtype), dtype.itemsize,
                       dtype.kind in "iu")


def _dlpack_memory(obj: Any, what: str) -> ArrayMemory:
    """An object exporting __dlpack__/__dlpack_device__ (the legacy 'dltensor' capsule)."""
    device_type, device_id = (int(v) for v in obj.__dlpack_device__())
    if device_type not in (_DL_CPU, _DL_CUDA, _DL_CUDA_HOST):
        raise ValueError(f"{what}: DLPack device type {device_type}; ferry moves host memory "
                         f"(CPU {_DL_CPU}, pinned {_DL_CUDA_HOST}) and CUDA memory ({_DL_CUDA})")
    capsule = obj.__dlpack__()
    t = _ferry.dlpack_tensor(capsule)
    if t["strides"] is not None and not _c_contiguous(t["shape"], t["strides"]):
        raise ValueError(f"{what}: the array is not C-contiguous (element strides "
                         f"{tuple(t['strides'])} for shape {tuple(t['shape'])}); register a "
                         "contiguous array")
    device = t["device_id"] if device_type == _DL_CUDA else -1
    return ArrayMemory(t["address"], t["nbytes"], device,
                       _DLPACK_DTYPES.get((t["code"], t["bits"])), t["bits"] // 8,
                       t["code"] in (0, 1), keepalive=capsule)


def array_memory(obj: Any, what: str) -> ArrayMemory:
    """The storage of a numpy array, a torch tensor (CPU or CUDA), a __cuda_array_interface__
    object or a DLPack object; TypeError/ValueError name `what`."""
    if _is_torch(obj):
        return _torch_memory(obj, what)
    if isinstance(obj, np.ndarray):
        return _numpy_memory(obj, what)
    if hasattr(obj, "__cuda_array_interface__"):
        return _cuda_interface_memory(obj, what)
    if hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__"):
        return _dlpack_memory(obj, what)
    raise TypeError(f"{what}: expected a numpy array, a torch tensor, or an array with "
                    f"__cuda_array_interface__ or __dlpack__, got {type(obj).__name__}")


def dtype_matches(array: ArrayMemory, dtype: str) -> bool:
    """Whether an array may hold elements of ferry dtype `dtype`: the same dtype, raw bytes
    (uint8), or, for dtypes numpy lacks (bf16, fp8), an integer dtype of the same width."""
    if array.dtype == dtype or array.dtype == "uint8":
        return True
    return dtype in ("bf16", "fp8_e4m3", "fp8_e5m2") and array.integer and \
        array.itemsize == _SIZES[dtype]


def item_size(dtype: str) -> int:
    """Bytes per element of ferry dtype `dtype`."""
    return _SIZES[dtype]


def param_storage(param: Any) -> tuple:
    """Where a torch parameter's data lies and how: (address, shape, strides, dtype). An
    engine that rebinds or reallocates a parameter after ferry registered it changes this."""
    data = param.data
    return data.data_ptr(), tuple(data.shape), data.stride(), data.dtype


def moved_parameters(bound: list[tuple[str, Any, tuple]]) -> list[str]:
    """The names of `bound`'s (name, parameter, param_storage at registration) entries whose
    parameter no longer lies where it did."""
    return [name for name, param, storage in bound if param_storage(param) != storage]
