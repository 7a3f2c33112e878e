"""preprocess: decode an image, resize and centre-crop it, normalise it for the DNN stages (CPU only).

Parameters: ``image`` (base64 PNG/JPEG), or ``seed`` (int) for a deterministic synthetic picture;
optional ``size`` (multiple of 32, 32..512, default 224).
Result: ``{"tensor": {"dtype": "float16", "shape": [3, S, S], "data": b64}, "source": {...}}``,
the ImageNet-normalised image (about 400 KB of JSON at S = 224).
"""

from __future__ import annotations

import base64
import binascii
import io

import numpy as np

from actions.common.codec import encode_array
from actions.common.runtime import ActionError, guarded, run_single
from actions.common.vision import normalize, synthetic_image

DEFAULT_SIZE = 224
MAX_IMAGE_BYTES = 8 * 1024 * 1024


def _load(args: dict) -> tuple[np.ndarray, str]:
    from PIL import Image, UnidentifiedImageError

    if "image" in args:
        if not isinstance(args["image"], str):
            raise ActionError("'image' must be a base64 string of a PNG or JPEG file")
        try:
            raw = base64.b64decode(args["image"], validate=True)
        except (binascii.Error, ValueError) as e:
            raise ActionError("'image' is not valid base64") from e
        if len(raw) > MAX_IMAGE_BYTES:
            raise ActionError(f"'image' is {len(raw)} bytes, more than {MAX_IMAGE_BYTES}")
        try:
            img = Image.open(io.BytesIO(raw))
            fmt = img.format or "unknown"
            return np.asarray(img.convert("RGB")), fmt
        except (UnidentifiedImageError, OSError) as e:
            raise ActionError(f"'image' could not be decoded: {e}") from e
    if "seed" in args:
        seed = args["seed"]
        if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
            raise ActionError("'seed' must be a non-negative integer")
        return synthetic_image(seed), "synthetic"
    raise ActionError("give 'image' (base64 PNG/JPEG) or 'seed' (int, for a synthetic test image)")


def _size(args: dict) -> int:
    size = args.get("size", DEFAULT_SIZE)
    if not isinstance(size, int) or isinstance(size, bool) or size % 32 or not 32 <= size <= 512:
        raise ActionError("'size' must be a multiple of 32 between 32 and 512")
    return size


def resize_crop(rgb: np.ndarray, size: int) -> np.ndarray:
    """Resize the shorter side to `size` (bilinear), then centre-crop size x size."""
    from PIL import Image

    h, w = rgb.shape[:2]
    scale = size / min(h, w)
    nw, nh = max(size, round(w * scale)), max(size, round(h * scale))
    img = Image.fromarray(rgb).resize((nw, nh), Image.BILINEAR)
    left, top = (nw - size) // 2, (nh - size) // 2
    return np.asarray(img.crop((left, top, left + size, top + size)))


def preprocess_one(args: dict) -> dict:
    rgb, fmt = _load(args)
    size = _size(args)
    x = normalize(resize_crop(rgb, size))
    return {"tensor": encode_array(x, "float16"),
            "source": {"format": fmt, "width": int(rgb.shape[1]), "height": int(rgb.shape[0])}}


@guarded
def main_batch(batch: list[dict]) -> list[dict]:
    """Preprocess each element (pure CPU work: one image at a time)."""
    return [preprocess_one(a) for a in batch]


def main(args: dict) -> dict:
    return run_single(main_batch, args)
