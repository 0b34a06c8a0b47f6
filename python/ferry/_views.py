"""ferry.fragment_view: a fragment of a layout seen inside the array that backs its buffer.

Returns a view (no copy) shaped like the fragment's box, with the fragment's strides, into a
numpy array or CPU torch tensor registered (or to be registered) for that buffer: how a rank
fills its source buffers from its model and reads its destination buffers back.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._arrays import _is_torch, item_size
from ._layout import FragmentInfo

_NUMPY_VIEW_DTYPES = {"bf16": np.uint16, "fp16": np.float16, "fp32": np.float32,
                      "fp64": np.float64, "fp8_e4m3": np.uint8, "fp8_e5m2": np.uint8,
                      "int8": np.int8, "int16": np.int16, "int32": np.int32,
                      "int64": np.int64, "uint8": np.uint8}


def fragment_view(buffer: Any, fragment: FragmentInfo, dtype: str) -> Any:
    """The elements of `fragment` (of ferry dtype `dtype`) inside `buffer`, a contiguous array
    backing the fragment's buffer. numpy holds bf16 and fp8 as uint16 / uint8 bit patterns,
    torch holds fp8 as uint8. Raises ValueError for a dtype ferry does not know, or for an
    array too small to hold the fragment (naming its tensor, buffer and sizes)."""
    if dtype not in _NUMPY_VIEW_DTYPES:
        raise ValueError(f"{fragment.tensor}: unknown dtype {dtype!r} (expected one of "
                         f"{', '.join(_NUMPY_VIEW_DTYPES)})")
    size = item_size(dtype)
    shape = [h - l for l, h in zip(fragment.lo, fragment.hi)]
    if fragment.byte_offset % size:
        raise ValueError(f"{fragment.tensor}: byte offset {fragment.byte_offset} is not a "
                         f"multiple of {dtype}'s size {size}")
    _check_holds(buffer, fragment, shape, size)
    if _is_torch(buffer):
        import torch
        torch_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32,
                       "fp64": torch.float64, "fp8_e4m3": torch.uint8, "fp8_e5m2": torch.uint8,
                       "int8": torch.int8, "int16": torch.int16, "int32": torch.int32,
                       "int64": torch.int64, "uint8": torch.uint8}[dtype]
        raw = buffer.reshape(-1).view(torch.uint8)
        flat = raw[: raw.numel() // size * size].view(torch_dtype)
        return flat.as_strided(shape, list(fragment.strides), fragment.byte_offset // size)
    raw = buffer.reshape(-1).view(np.uint8)
    return np.ndarray(shape, dtype=_NUMPY_VIEW_DTYPES[dtype], buffer=raw,
                      offset=fragment.byte_offset, strides=[s * size for s in fragment.strides])


def _check_holds(buffer: Any, fragment: FragmentInfo, shape: list[int], size: int) -> None:
    """The fragment's last element lies inside `buffer`."""
    end = fragment.byte_offset + (sum((n - 1) * st for n, st in zip(shape, fragment.strides))
                                  + 1) * size
    nbytes = buffer.numel() * buffer.element_size() if _is_torch(buffer) else buffer.nbytes
    if end > nbytes:
        raise ValueError(f"{fragment.tensor} [{fragment.lo}, {fragment.hi}) in buffer "
                         f"{fragment.buffer!r} ends at byte {end}, but the array holds {nbytes} "
                         "bytes: pass the array that backs the whole buffer")
