"""depth-post: normalise and colourise midas's depth map; summary statistics + a small PNG (CPU only).

Parameters: midas's result (``{"depth": {"dtype", "shape": [H, W], "data"}}``).
Result: ``{"stats": {min, max, mean, median, p05, p95}, "near_fraction", "preview":
{"width", "height", "png": b64}}``; the preview is the min-max normalised map (near = bright)
through a magma-like colour ramp, at most 128 px on a side (a few KB).
"""

from __future__ import annotations

import numpy as np

from actions.common.codec import decode_array, encode_png
from actions.common.runtime import ActionError, guarded, run_single

PREVIEW = 128
# (position, RGB) anchors of a dark-purple -> red -> yellow ramp (magma-like)
RAMP = np.array([[0.00, 0, 0, 4], [0.25, 81, 18, 124], [0.50, 183, 55, 121], [0.75, 252, 137, 97],
                 [1.00, 252, 253, 191]], np.float32)


def colorize(unit: np.ndarray) -> np.ndarray:
    """(H, W) values in [0, 1] -> (H, W, 3) uint8 through RAMP."""
    u = np.clip(unit, 0.0, 1.0)
    rgb = np.stack([np.interp(u, RAMP[:, 0], RAMP[:, ch]) for ch in (1, 2, 3)], axis=-1)
    return np.rint(rgb).astype(np.uint8)


def normalize_depth(depth: np.ndarray) -> np.ndarray:
    lo, hi = float(depth.min()), float(depth.max())
    return np.zeros_like(depth) if hi - lo < 1e-12 else (depth - lo) / (hi - lo)


def thumbnail(rgb: np.ndarray, limit: int = PREVIEW) -> np.ndarray:
    from PIL import Image

    h, w = rgb.shape[:2]
    scale = min(1.0, limit / max(h, w))
    size = (max(1, round(w * scale)), max(1, round(h * scale)))
    return np.asarray(Image.fromarray(rgb).resize(size, Image.BILINEAR))


def depth_post_one(args: dict) -> dict:
    if "depth" not in args:
        raise ActionError("missing 'depth': this function takes midas's result as its parameters")
    try:
        depth = decode_array(args["depth"], "depth").astype(np.float32)
    except ValueError as e:
        raise ActionError(str(e)) from e
    if depth.ndim != 2 or depth.size == 0:
        raise ActionError(f"'depth' must be a non-empty [H, W] map, got {list(depth.shape)}")
    if not np.all(np.isfinite(depth)):
        raise ActionError("'depth' has non-finite values")
    unit = normalize_depth(depth)
    preview = thumbnail(colorize(unit))
    p05, median, p95 = np.percentile(depth, [5, 50, 95])
    stats = {"min": float(depth.min()), "max": float(depth.max()), "mean": float(depth.mean()),
             "median": float(median), "p05": float(p05), "p95": float(p95)}
    return {"stats": {k: round(v, 6) for k, v in stats.items()},
            "near_fraction": round(float((unit > 0.5).mean()), 6),  # inverse depth: high = near
            "preview": {"width": int(preview.shape[1]), "height": int(preview.shape[0]),
                        "png": encode_png(preview)}}


@guarded
def main_batch(batch: list[dict]) -> list[dict]:
    """Post-process each depth map (pure CPU work)."""
    return [depth_post_one(a) for a in batch]


def main(args: dict) -> dict:
    return run_single(main_batch, args)
