"""Compact, JSON-safe encoding of numpy arrays passed between the functions of an app.

An encoded array is ``{"dtype": "float16", "shape": [3, 224, 224], "data": "<base64 of C-order bytes>"}``.
Only a few dtypes are allowed, so a malformed payload is rejected with a clear message instead of
being reinterpreted.
"""

from __future__ import annotations

import base64
import io

import numpy as np

DTYPES = {"float16", "float32", "uint8", "int32"}


def encode_array(array: np.ndarray, dtype: str) -> dict:
    if dtype not in DTYPES:
        raise ValueError(f"unsupported dtype {dtype!r}; use one of {sorted(DTYPES)}")
    a = np.ascontiguousarray(array, dtype=np.dtype(dtype))
    return {"dtype": dtype, "shape": list(a.shape), "data": base64.b64encode(a.tobytes()).decode("ascii")}


def decode_array(obj: object, what: str = "tensor") -> np.ndarray:
    if not isinstance(obj, dict) or not {"dtype", "shape", "data"} <= obj.keys():
        raise ValueError(f"{what} must be an object with dtype, shape and data")
    if obj["dtype"] not in DTYPES:
        raise ValueError(f"{what}.dtype {obj['dtype']!r} is not one of {sorted(DTYPES)}")
    shape = obj["shape"]
    if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
        raise ValueError(f"{what}.shape must be a list of non-negative integers")
    try:
        raw = base64.b64decode(obj["data"], validate=True)
    except (ValueError, TypeError) as e:
        raise ValueError(f"{what}.data is not valid base64") from e
    dtype = np.dtype(obj["dtype"])
    if len(raw) != int(np.prod(shape, dtype=np.int64)) * dtype.itemsize:
        raise ValueError(f"{what}.data has {len(raw)} bytes, shape {shape} of {dtype} needs "
                         f"{int(np.prod(shape, dtype=np.int64)) * dtype.itemsize}")
    return np.frombuffer(raw, dtype=dtype).reshape(shape)


def encode_png(rgb: np.ndarray) -> str:
    """Base64 PNG of an (H, W, 3|4) uint8 array."""
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(rgb, dtype=np.uint8)).save(buf, format="PNG", compress_level=6)
    return base64.b64encode(buf.getvalue()).decode("ascii")
