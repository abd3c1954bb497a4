"""Turning user buffers (numpy arrays, torch tensors) into what a transport can move."""

from __future__ import annotations

from typing import Any

import numpy as np


def host_array(buf: Any) -> np.ndarray:
    """A numpy view of a contiguous host buffer (no copy); raises for device tensors."""
    if isinstance(buf, np.ndarray):
        arr = buf
    elif hasattr(buf, "detach") and hasattr(buf, "is_cuda"):
        if buf.is_cuda:
            raise TypeError("a CUDA tensor cannot be viewed as host memory; stage it first")
        arr = buf.detach().numpy()
    else:
        arr = np.asarray(buf)
    if not arr.flags.c_contiguous:
        raise ValueError("communication buffers must be contiguous")
    return arr
