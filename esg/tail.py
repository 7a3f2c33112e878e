"""Latency percentiles: a configuration's run time at the p-th percentile, from what its table knows of
its spread -- what ESG_1Q plans with under ``--slo-percentile p`` instead of the table's one figure.

A table's ``latency_ms`` is one figure per configuration (the median ``esg profile`` measures; the
figure the emulator and the timing twin draw run times around, times a log-normal factor of mean 1).
Run times spread around it, so a path planned just under the SLO on that figure misses whenever its
batches run a little slow. Planning at percentile p (50 < p < 100) counts each configuration at its
p-th percentile instead, taken from the first of:

1. the row's measured percentile ``p<p>_ms`` (``p95_ms``, ``p99_ms``; :func:`quantile_field`): learned
   tables carry their sketches' ``p95_ms`` (and ``p<p>_ms`` when planning at p), ``esg profile`` writes
   ``p99_ms`` -- used when the row's ``samples``, if it records them, are enough to have seen it: at
   least 100 / (100 - p) (:func:`samples_for`; 20 for p95), else the rows below;
2. the row's ``latency_cv`` (``esg profile`` writes the coefficient of variation it measured);
3. the table's ``latency_cv``;
4. :data:`DEFAULT_LATENCY_CV`.

With a spread c the percentile is ``latency_ms`` times the p-th percentile of a log-normal factor of
mean 1 and coefficient of variation c (:func:`spread_factor`): the model the emulator draws run times
from. A measured percentile below ``latency_ms`` counts as ``latency_ms``: planning at a tail never
plans faster than the central figure.

A path's latency is then its longest path over the functions' percentiles. For a chain of run times that
vary independently that bounds the path's own p-th percentile from above (the spreads add in quadrature,
the percentiles add linearly); parallel branches each at their percentile are an approximation.
The cost model keeps ``latency_ms``: a batch's resource-time is paid on average, not at its tail.
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Any, Final

from esg.profiles import ROW_SAMPLES_FIELD, SPREAD_FIELD, Profile, ProfileEntry

DEFAULT_LATENCY_CV: Final = 0.05
"""The spread of a configuration whose table records none: the coefficient of variation of run time the
emulator draws by default (``EmulatorParams.noise_cv``) and Orion's and Aquatope's ports plan their P95
with. Measured tables record their own (``esg profile``: ``latency_cv`` per configuration)."""
LOWEST: Final = 50.0
HIGHEST: Final = 100.0


def check_percentile(value: Any) -> float:
    """``value`` as a percentile to plan at, strictly between 50 and 100; ``ValueError`` otherwise."""
    if isinstance(value, bool):
        raise ValueError(f"must be a number strictly between {LOWEST:g} and {HIGHEST:g}, got {value!r}")
    try:
        p = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"must be a number strictly between {LOWEST:g} and {HIGHEST:g} "
                         f"(e.g. 95 for p95), got {value!r}") from None
    if not math.isfinite(p) or not LOWEST < p < HIGHEST:
        raise ValueError(f"must be a number strictly between {LOWEST:g} and {HIGHEST:g} "
                         f"(e.g. 95 for p95), got {value!r}")
    return p


def quantile_field(percentile: float) -> str:
    """The row field that holds a measured ``percentile``: ``p95_ms`` for 95, ``p99.9_ms`` for 99.9."""
    return f"p{percentile:g}_ms"


def samples_for(percentile: float) -> int:
    """The fewest samples a measured ``percentile`` is trusted from: enough that one of them is expected
    above it (20 for p95, 100 for p99)."""
    return math.ceil(100.0 / (100.0 - percentile) - 1e-9)


def spread_factor(cv: float, percentile: float) -> float:
    """The ``percentile``-th percentile of a log-normal factor of mean 1 and coefficient of variation ``cv``."""
    if cv <= 0:
        return 1.0
    sigma = math.sqrt(math.log1p(cv * cv))
    return math.exp(-sigma * sigma / 2 + NormalDist().inv_cdf(percentile / 100.0) * sigma)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def entry_spread(profile: Profile, entry: ProfileEntry) -> float:
    """The coefficient of variation a row's run time is planned with: its own, else its table's, else
    :data:`DEFAULT_LATENCY_CV`."""
    for where in (entry.extra, profile.extra):
        cv = _number(where.get(SPREAD_FIELD))
        if cv is not None and cv >= 0:
            return cv
    return DEFAULT_LATENCY_CV


def entry_latency_at(profile: Profile, entry: ProfileEntry, percentile: float) -> float:
    """A row's run time at ``percentile`` (the module docstring's order of sources)."""
    measured = _number(entry.extra.get(quantile_field(percentile)))
    if measured is not None:
        samples = entry.extra.get(ROW_SAMPLES_FIELD)
        if not isinstance(samples, int) or isinstance(samples, bool) or samples >= samples_for(percentile):
            return max(measured, entry.latency_ms)
    return entry.latency_ms * spread_factor(entry_spread(profile, entry), percentile)


def latencies_at(profile: Profile, percentile: float) -> dict[Any, float]:
    """Every configuration of ``profile`` with its run time at ``percentile``."""
    out: dict[Any, float] = {}
    for e in profile.entries:
        out.setdefault(e.config, entry_latency_at(profile, e, percentile))
    return out
