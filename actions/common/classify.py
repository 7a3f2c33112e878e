"""Shared output of the three ImageNet-style classifiers (resnet50, densenet121, inceptionv3)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from actions.common.codec import encode_array
from actions.common.runtime import infer
from actions.common.vision import run_batched

CLASSES = 1000
TOP_K = 5


def label(index: int) -> str:
    """Class names: weights are not ImageNet-trained, so classes are named by index."""
    return f"class-{index:03d}"


def top_k(probs: np.ndarray, k: int = TOP_K) -> list[dict]:
    order = np.argsort(-probs, kind="stable")[:k]
    return [{"class": int(i), "label": label(int(i)), "prob": round(float(probs[i]), 6)} for i in order]


def classify_batch(name: str, build: Callable, batch: list[dict], threads: int | None = None) -> list[dict]:
    """One inference over the batch; each result has the top-5 classes and all probabilities."""

    def finish(_args: dict, _x: np.ndarray, probs: np.ndarray) -> dict:
        return {"model": name, "top5": top_k(probs), "probs": encode_array(probs, "float16")}

    return run_batched(batch, lambda x: infer(name, build, x, threads), finish)
