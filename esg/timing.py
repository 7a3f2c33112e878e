"""How long a batch takes to start and to run, as the emulator models it and the agent's timing twin
waits it: the profiled latency of its configuration times a log-normal factor of mean 1, and the
function's cold start when no idle worker of its kind waits."""

from __future__ import annotations

import math

from esg.profiles import Profile


def lognormal_params(noise_cv: float) -> tuple[float, float]:
    """(mu, sigma) of the execution-time factor: log-normal with mean 1 and coefficient of variation
    ``noise_cv``."""
    sigma = math.sqrt(math.log1p(noise_cv ** 2))
    return -sigma * sigma / 2, sigma


def cold_start_ms(profile: Profile, scale: float) -> float:
    """A new worker's start-up before its first batch runs."""
    return profile.cold_start_ms * scale
