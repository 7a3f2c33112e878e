"""vote: the expanded image-classification app's sink — ensemble of the classifiers (CPU only).

Parameters: an object keyed by predecessor name, e.g. ``{"resnet50": {...}, "densenet121": {...},
"inceptionv3": {...}}``, each a classifier's result (``probs``: 1000 float16, ``top5``).
Result: ``{"top5": [...] by mean probability, "majority": {"class", "label", "votes"},
"agreement": fraction of models whose top-1 is the ensemble's top-1, "models": {name: top-1}}``.
Ties in the majority go to the class with the higher mean probability.
"""

from __future__ import annotations

import numpy as np

from actions.common.classify import label, top_k
from actions.common.codec import decode_array
from actions.common.runtime import ActionError, guarded, run_single


def vote_one(args: dict) -> dict:
    members = {k: v for k, v in args.items() if isinstance(v, dict) and "probs" in v}
    if not members:
        raise ActionError("vote takes an object keyed by predecessor name, each a classifier result "
                          "with 'probs'; got keys " + ", ".join(sorted(map(str, args))))
    probs = {}
    for name, result in sorted(members.items()):
        try:
            p = decode_array(result["probs"], f"{name}.probs").astype(np.float64)
        except ValueError as e:
            raise ActionError(str(e)) from e
        if p.ndim != 1:
            raise ActionError(f"{name}.probs must be 1-D, got shape {list(p.shape)}")
        probs[name] = p
    sizes = {p.size for p in probs.values()}
    if len(sizes) != 1:
        raise ActionError(f"the classifiers disagree on the number of classes: {sorted(sizes)}")
    mean = np.mean(list(probs.values()), axis=0)
    top1 = {name: int(np.argmax(p)) for name, p in probs.items()}
    votes = np.bincount(list(top1.values()), minlength=mean.size)
    winner = int(max(np.flatnonzero(votes == votes.max()), key=lambda c: (mean[c], -c)))
    ensemble_top = int(np.argmax(mean))
    return {"top5": top_k(mean),
            "majority": {"class": winner, "label": label(winner), "votes": int(votes[winner])},
            "agreement": round(sum(c == ensemble_top for c in top1.values()) / len(top1), 6),
            "models": {name: {"class": c, "label": label(c), "prob": round(float(probs[name][c]), 6)}
                       for name, c in top1.items()}}


@guarded
def main_batch(batch: list[dict]) -> list[dict]:
    """Vote for each element (pure CPU work)."""
    return [vote_one(a) for a in batch]


def main(args: dict) -> dict:
    return run_single(main_batch, args)
