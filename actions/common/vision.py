"""Image helpers: the ImageNet normalisation, test images, and batching of encoded tensors."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from actions.common.codec import decode_array
from actions.common.runtime import ActionError

MEAN = np.array([0.485, 0.456, 0.406], np.float32)
STD = np.array([0.229, 0.224, 0.225], np.float32)


def normalize(rgb: np.ndarray) -> np.ndarray:
    """(H, W, 3) uint8 -> (3, H, W) float32, ImageNet mean/std."""
    x = rgb.astype(np.float32) / 255.0
    return ((x - MEAN) / STD).transpose(2, 0, 1)


def denormalize(chw: np.ndarray) -> np.ndarray:
    """(3, H, W) normalised -> (H, W, 3) uint8."""
    x = chw.astype(np.float32).transpose(1, 2, 0) * STD + MEAN
    return np.clip(np.rint(x * 255.0), 0, 255).astype(np.uint8)


def synthetic_image(seed: int, width: int = 320, height: int = 240) -> np.ndarray:
    """A deterministic (H, W, 3) uint8 picture: a gradient background and a few filled ellipses."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    c0, c1 = rng.uniform(0, 255, 3), rng.uniform(0, 255, 3)
    t = (xx / max(width - 1, 1))[..., None]
    img = (1 - t) * c0 + t * c1
    for _ in range(int(rng.integers(2, 5))):
        cx, cy = rng.uniform(0.2, 0.8) * width, rng.uniform(0.2, 0.8) * height
        rx, ry = rng.uniform(0.08, 0.3) * width, rng.uniform(0.08, 0.3) * height
        inside = ((xx - cx) / rx) ** 2 + ((yy - cy) / ry) ** 2 <= 1.0
        img[inside] = rng.uniform(0, 255, 3)
    img += rng.normal(0, 4, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


def input_tensor(args: dict, key: str = "tensor") -> np.ndarray:
    """The (3, H, W) float32 image tensor an upstream function sent (preprocess's output)."""
    if key not in args:
        raise ActionError(f"missing '{key}': this function takes preprocess's result as its parameters")
    try:
        x = decode_array(args[key], key)
    except ValueError as e:
        raise ActionError(str(e)) from e
    if x.ndim != 3 or x.shape[0] != 3:
        raise ActionError(f"'{key}' must have shape [3, H, W], got {list(x.shape)}")
    return x.astype(np.float32)


def run_batched(batch: list[dict], model: Callable[[np.ndarray], np.ndarray],
                finish: Callable[[dict, np.ndarray, np.ndarray], dict]) -> list[dict]:
    """Decode every element's tensor, run `model` once per group of equal shapes (one group in the
    usual case: all from the same preprocess), and `finish(args, input, output)` each element."""
    inputs = [input_tensor(a) for a in batch]
    results: list[dict | None] = [None] * len(batch)
    groups: dict[tuple, list[int]] = {}
    for i, x in enumerate(inputs):
        groups.setdefault(x.shape, []).append(i)
    for idx in groups.values():
        out = model(np.stack([inputs[i] for i in idx]))
        for j, i in enumerate(idx):
            results[i] = finish(batch[i], inputs[i], out[j])
    return results  # type: ignore[return-value]
