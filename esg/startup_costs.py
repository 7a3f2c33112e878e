"""What a MIG change takes, learned from what the agents measure (docs/live-path.md, "Start-up costs").

The policies weigh a batch's start-up: a cold start, from its function's latency table (which online
profiles re-learn, :mod:`esg.online`), and one MIG change per GPU instance created or destroyed
(:attr:`PolicyContext.mig_reconfig_ms <esg.policies.context.PolicyContext.mig_reconfig_ms>`). The
emulator charges the figure its parameters give; the live service starts from the same default
(:data:`esg.defaults.MIG_RECONFIG_MS`) and follows the hardware: each agent times the MIG changes it
makes for a batch or a pre-warm (instances changed, wall milliseconds) and :class:`MigChangeTimes`
learns, per GPU model, the time per changed instance.

The estimate is robust: the median of the last :data:`WINDOW` per-instance figures, so one change
slowed by something else (a driver hiccup, a wait behind another batch's change) moves it little. Until
a model has :data:`MIN_SAMPLES` observations it is the prior -- the configured figure. Observations that
cannot be one (no instance changed; a negative, NaN or infinite time) are ignored.

:func:`cluster_ms` gives the one figure a policy plans with for a cluster of several GPU models, and
:func:`moved` says when a new figure differs enough from the planned one to hand it to the policy
(:meth:`esg.scheduler.Scheduler.use_startup_costs`). No I/O and no clock here: the driver brings the
observations and the cluster's models in.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from statistics import median
from typing import Final

from esg.defaults import MIG_RECONFIG_MS

WINDOW: Final = 32
"""The per-instance figures the estimate is the median of (the latest ones)."""
MIN_SAMPLES: Final = 3
"""Observations of a GPU model before its estimate replaces the prior."""
MOVE_TOLERANCE: Final = 0.10
"""How far (relative) an estimate must move from the figure a policy plans with before it is handed on."""


class MigChangeTimes:
    """Per GPU model, the time one MIG instance created or destroyed takes, learned from the agents'
    measurements and starting from ``prior_ms``."""

    def __init__(self, prior_ms: float = MIG_RECONFIG_MS, window: int = WINDOW, min_samples: int = MIN_SAMPLES):
        if not math.isfinite(prior_ms) or prior_ms < 0:
            raise ValueError(f"the prior MIG change time must be a finite number of ms >= 0, got {prior_ms}")
        if window < 1 or min_samples < 1:
            raise ValueError("window and min_samples must be >= 1")
        self.prior_ms = float(prior_ms)
        self.window = window
        self.min_samples = min_samples
        self._seen: dict[str, deque[float]] = {}
        self._counts: dict[str, int] = {}

    def observe(self, gpu_model: str | None, instances: int, ms: float) -> bool:
        """One measured MIG change on a GPU of ``gpu_model``: ``instances`` created or destroyed in ``ms``
        wall milliseconds. Whether it was taken (a change that cannot be one is ignored)."""
        if not gpu_model or isinstance(instances, bool) or not isinstance(instances, int) or instances < 1:
            return False
        if isinstance(ms, bool) or not isinstance(ms, int | float) or not math.isfinite(ms) or ms < 0:
            return False
        seen = self._seen.get(gpu_model)
        if seen is None:
            seen = self._seen[gpu_model] = deque(maxlen=self.window)
        seen.append(float(ms) / instances)
        self._counts[gpu_model] = self._counts.get(gpu_model, 0) + 1
        return True

    def samples(self, gpu_model: str) -> int:
        """The observations of ``gpu_model`` taken so far (all of them, not only the window's)."""
        return self._counts.get(gpu_model, 0)

    def learned(self, gpu_model: str) -> float | None:
        """The learned time per changed instance of ``gpu_model`` (ms), or None while it has fewer than
        ``min_samples`` observations."""
        seen = self._seen.get(gpu_model)
        if seen is None or self._counts.get(gpu_model, 0) < self.min_samples:
            return None
        return float(median(seen))

    def estimate(self, gpu_model: str) -> float:
        """The time per changed instance of ``gpu_model`` (ms): learned, else the prior."""
        found = self.learned(gpu_model)
        return self.prior_ms if found is None else found

    def models(self) -> list[str]:
        """The GPU models with a learned figure, sorted."""
        return sorted(m for m in self._seen if self.learned(m) is not None)

    def cluster_ms(self, gpu_models: Iterable[str | None]) -> float:
        """The one figure to plan with for a cluster of ``gpu_models`` (ms): the slowest learned figure
        among them -- a policy weighs a carve with one figure whatever node it lands on, and the slowest
        keeps it from promising a start-up the slowest GPUs cannot keep -- or the prior when none of
        them has one yet (a model not learned yet is taken to be like those that are)."""
        found = [x for m in set(gpu_models) if m and (x := self.learned(m)) is not None]
        return max(found) if found else self.prior_ms


def moved(planned_ms: float, estimate_ms: float, tolerance: float = MOVE_TOLERANCE) -> bool:
    """Whether ``estimate_ms`` differs from ``planned_ms`` by more than ``tolerance`` of it (a figure of
    0 moves with any change)."""
    return abs(estimate_ms - planned_ms) > tolerance * planned_ms
