"""Request arrivals: replayed from Azure Functions 2019 per-minute counts, or synthetic with the same
burstiness.

Pure: per-minute counts come in as numbers (``esg_cli`` reads the CSV); randomness comes from the one
``numpy.random.Generator`` of the run. Within a minute, arrivals are Poisson (the count is a Poisson
draw around the minute's rate and the times are uniform), as InVitro spreads trace minutes.

The synthetic generator modulates each app's rate per minute by a log-normal AR(1) factor (mean 1)
whose log standard deviation and lag-1 autocorrelation are those of the per-minute aggregate
invocation counts of InVitro's Azure 2019 sample (``invitro/azure2019_sample_100/invocations.csv``,
100 functions, minutes 480..959: mean 707.6 invocations/min, CV 0.112; log sd 0.105, lag-1
autocorrelation of the log 0.594), computed once and recorded below.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence

import numpy as np

from esg.events import Request

AZURE_SAMPLE_LOG_SD = 0.1051
"""Std. dev. of log(per-minute count / mean) of the sample's aggregate series."""
AZURE_SAMPLE_LOG_LAG1 = 0.5936
"""Lag-1 autocorrelation of that log series (bursts last a few minutes)."""
AZURE_SAMPLE_CV = 0.1116
"""CV of the aggregate per-minute counts (for reference; the log-normal matches it)."""


def minute_factors(n_minutes: int, rng: np.random.Generator, log_sd: float = AZURE_SAMPLE_LOG_SD,
                   lag1: float = AZURE_SAMPLE_LOG_LAG1) -> np.ndarray:
    """A stationary log-normal AR(1) series with mean 1 and the given log sd and autocorrelation."""
    z = np.empty(n_minutes)
    innovation = log_sd * np.sqrt(1.0 - lag1 ** 2)
    z[0] = rng.normal(0.0, log_sd)
    for i in range(1, n_minutes):
        z[i] = lag1 * z[i - 1] + rng.normal(0.0, innovation)
    return np.exp(z - log_sd ** 2 / 2)


def map_trace_functions(rows: Sequence[tuple[str, Sequence[float]]], apps: Sequence[str]
                        ) -> dict[str, list[float]]:
    """Sum trace functions' per-minute counts into apps: function ``h`` goes to app crc32(h) mod n."""
    ordered = sorted(apps)
    width = max((len(c) for _, c in rows), default=0)
    out = {a: [0.0] * width for a in ordered}
    for hash_function, counts in rows:
        series = out[ordered[zlib.crc32(hash_function.encode()) % len(ordered)]]
        for i, c in enumerate(counts):
            series[i] += float(c)
    return out


def generate(apps: Sequence[str], rate_rps: float, duration_s: float, rng: np.random.Generator,
             minute_counts: Mapping[str, Sequence[float]] | None = None, minute_s: float = 60.0) -> list[Request]:
    """Arrivals of ``apps`` at a mean total of ``rate_rps`` over ``duration_s``, sorted by time.

    With ``minute_counts`` (per app, per minute) each app's series is replayed with its own shape,
    scaled so its mean over the whole trace is an equal share of ``rate_rps`` (minutes repeat if the
    run is longer than the trace); one trace minute lasts ``minute_s`` seconds of the run (60: real
    time; less replays more of the trace in a short run, time-compressed). Without, each app gets an
    equal share of the rate modulated by :func:`minute_factors` (``minute_s`` is then 60).
    """
    if rate_rps < 0 or duration_s <= 0:
        raise ValueError("rate must be non-negative and duration positive")
    if not minute_s > 0:
        raise ValueError("a trace minute must last a positive time")
    if minute_counts is None:
        minute_s = 60.0
    apps = sorted(apps)
    n_min = int(np.ceil(duration_s / minute_s))
    rates = _per_minute_rates(apps, rate_rps, n_min, rng, minute_counts)
    times: list[np.ndarray] = []
    labels: list[np.ndarray] = []
    for i, app in enumerate(apps):
        for m in range(n_min):
            start = m * minute_s
            span = min(minute_s, duration_s - start)
            n = rng.poisson(rates[app][m] * span)
            times.append(np.sort(start + rng.uniform(0.0, span, n)) * 1e3)
            labels.append(np.full(n, i))
    t = np.concatenate(times) if times else np.empty(0)
    a = np.concatenate(labels) if labels else np.empty(0, dtype=int)
    order = np.lexsort((a, t))
    return [Request(f"r{k}", apps[int(a[j])], float(t[j])) for k, j in enumerate(order)]


def _per_minute_rates(apps, rate_rps, n_min, rng, minute_counts) -> dict[str, np.ndarray]:
    if minute_counts is None:
        share = rate_rps / len(apps)
        return {a: share * minute_factors(n_min, rng) for a in apps}
    series = {a: np.asarray(minute_counts.get(a, ()), dtype=float) for a in apps}
    width = max(len(s) for s in series.values())
    if width == 0:
        raise ValueError("the trace has no minute columns")
    padded = {a: np.pad(s, (0, width - len(s))) for a, s in series.items()}
    if sum(s.sum() for s in padded.values()) <= 0:
        raise ValueError("the trace has no invocations")
    share = rate_rps / len(apps)
    idx = np.arange(n_min) % width
    return {a: (s[idx] / s.mean() * share if s.mean() > 0 else np.zeros(n_min)) for a, s in padded.items()}
