"""Host arrays as ferry sees them: numpy arrays and CPU torch tensors, by address, size and dtype.

ferry never copies a registered array: it reads and writes the caller's storage at the address
taken here, so the array must be C-contiguous host memory that stays alive and unmoved (the Refit
keeps a reference to it). torch is imported only when the object is a torch tensor.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

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

_SIZES = {"bf16": 2, "fp16": 2, "fp32": 4, "fp64": 8, "fp8_e4m3": 1, "fp8_e5m2": 1,
          "int8": 1, "int16": 2, "int32": 4, "int64": 8, "uint8": 1}


@dataclass(frozen=True)
class HostArray:
    """Where an array's elements are: address, size in bytes, ferry dtype name (None: raw)."""

    address: int
    nbytes: int
    dtype: str | None
    itemsize: int
    integer: bool  # an integer dtype (may carry bf16/fp8 bits, which numpy lacks)


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


def host_array(obj: Any, what: str) -> HostArray:
    """The storage of a numpy array or CPU torch tensor; TypeError/ValueError name `what`."""
    if _is_torch(obj):
        if obj.device.type != "cpu":
            raise ValueError(f"{what}: a {obj.device.type} tensor; this build moves host memory "
                             "only (CPU tensors and numpy arrays)")
        if not obj.is_contiguous():
            raise ValueError(f"{what}: the tensor is not contiguous (strides {tuple(obj.stride())}"
                             f" for shape {tuple(obj.shape)}); register a contiguous tensor")
        name = _TORCH_DTYPES.get(str(obj.dtype))
        return HostArray(obj.data_ptr(), obj.numel() * obj.element_size(), name,
                         obj.element_size(), not obj.is_floating_point())
    if isinstance(obj, np.ndarray):
        if not obj.flags.c_contiguous:
            raise ValueError(f"{what}: the array is not C-contiguous (strides {obj.strides} for "
                             f"shape {obj.shape}); register a contiguous array")
        if not obj.flags.writeable:
            raise ValueError(f"{what}: the array is read-only")
        return HostArray(obj.ctypes.data, obj.nbytes, _NUMPY_DTYPES.get(obj.dtype),
                         obj.dtype.itemsize, obj.dtype.kind in "iu")
    raise TypeError(f"{what}: expected a numpy array or a CPU torch tensor, got "
                    f"{type(obj).__name__}")


def dtype_matches(array: HostArray, dtype: str) -> bool:
    """Whether an array may hold elements of ferry dtype `dtype`: the same dtype, raw bytes
    (uint8), or, for dtypes numpy lacks (bf16, fp8), an integer dtype of the same width."""
    if array.dtype == dtype or array.dtype == "uint8":
        return True
    return dtype in ("bf16", "fp8_e4m3", "fp8_e5m2") and array.integer and \
        array.itemsize == _SIZES[dtype]


def item_size(dtype: str) -> int:
    """Bytes per element of ferry dtype `dtype`."""
    return _SIZES[dtype]
