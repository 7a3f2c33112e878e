"""composite: background elimination — apply deeplabv3's mask to the image (CPU only).

Parameters: deeplabv3's result (``mask`` [H, W] uint8 classes, ``tensor`` the normalised image).
Pixels of class 0 (background) become transparent. Result: ``{"foreground_fraction", "bbox":
[x0, y0, x1, y1] | null, "image": {"width", "height", "png": b64 RGBA}}``, the cut-out at most
128 px on a side (tens of KB).
"""

from __future__ import annotations

import numpy as np

from actions.common.codec import decode_array, encode_png
from actions.common.runtime import ActionError, guarded, run_single
from actions.common.vision import denormalize, input_tensor

PREVIEW = 128
BACKGROUND = 0


def cut_out(rgb: np.ndarray, foreground: np.ndarray) -> np.ndarray:
    """(H, W, 3) uint8 + (H, W) bool -> (H, W, 4) uint8 RGBA, background transparent and black."""
    alpha = foreground.astype(np.uint8) * 255
    return np.dstack([rgb * foreground[..., None], alpha]).astype(np.uint8)


def bbox(foreground: np.ndarray) -> list[int] | None:
    ys, xs = np.nonzero(foreground)
    if ys.size == 0:
        return None
    return [int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1]


def composite_one(args: dict) -> dict:
    from PIL import Image

    if "mask" not in args:
        raise ActionError("missing 'mask': this function takes deeplabv3's result as its parameters")
    try:
        mask = decode_array(args["mask"], "mask")
    except ValueError as e:
        raise ActionError(str(e)) from e
    rgb = denormalize(input_tensor(args))
    if mask.shape != rgb.shape[:2]:
        raise ActionError(f"'mask' shape {list(mask.shape)} does not match the image {list(rgb.shape[:2])}")
    foreground = mask != BACKGROUND
    rgba = cut_out(rgb, foreground)
    h, w = rgba.shape[:2]
    scale = min(1.0, PREVIEW / max(h, w))
    size = (max(1, round(w * scale)), max(1, round(h * scale)))
    small = np.asarray(Image.fromarray(rgba, "RGBA").resize(size, Image.BILINEAR))
    return {"foreground_fraction": round(float(foreground.mean()), 6), "bbox": bbox(foreground),
            "image": {"width": size[0], "height": size[1], "png": encode_png(small)}}


@guarded
def main_batch(batch: list[dict]) -> list[dict]:
    """Composite each element (pure CPU work)."""
    return [composite_one(a) for a in batch]


def main(args: dict) -> dict:
    return run_single(main_batch, args)
