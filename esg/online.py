"""Profiles learned from what ran (docs/online-profiles.md §2-3): per (function, configuration) latency
statistics, the table built from them, and drift.

Every answered batch is one observation: its configuration, its measured run time (cold start
excluded) and whether it paid a cold start. A *warm* batch's run time goes into the configuration's
:class:`~esg.sketch.QuantileSketch` (a cold worker's first batch is slower for reasons the
configuration does not keep, so it counts only towards the cold start figure, as ``esg profile``
discards its warm-up batch), and into a short list of recent run times that drift is judged on.

A configuration with at least ``min_samples`` warm batches is *measured*: its table latency is the
sketch's median (``esg profile`` writes the median too). :func:`learned_profile` lays the measured
configurations over the prior (an offline table, if the function has one); with neither, the function
keeps its default table (:mod:`esg.defaults`). Every table built here records, in ``samples``, how many
warm batches each configuration has had, for :class:`esg.explore.Explorer`.

Drift (:func:`drifted`): when the median of each of the last ``windows`` windows of recent run times
lies beyond ``tolerance`` of the table's latency, on the same side, the configuration's statistics
restart from its recent run times and the table follows them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from statistics import median
from typing import Any

from esg.defaults import SOURCE_FIELD, default_profile
from esg.mig import geometry
from esg.model import Config
from esg.policies.base import FunctionSpec
from esg.profiles import Profile, ProfileEntry
from esg.sketch import QuantileSketch
from esg.tail import quantile_field

MIN_SAMPLES = 3
"""Warm batches before a configuration's latency enters the table."""
WINDOW = 10
"""Recent run times per drift window."""
DRIFT_WINDOWS = 3
"""Consecutive windows that must all lie beyond the tolerance (the sustained part)."""
RECENT = WINDOW * DRIFT_WINDOWS
DRIFT_TOLERANCE = 0.25
"""Relative distance of a window's median from the table's latency that counts as drift."""
SAMPLES_FIELD = "samples"
BOUND_FIELD = "bound_ms"
GRID_BATCHES = (1, 2, 4, 8)
GRID_VCPUS = (1, 2, 4)
"""The configuration grid learned online: ``esg profile``'s default batches and vCPUs, on CPU and, for a
GPU function, on every MIG profile of the model (media-extension variants aside)."""


@dataclass
class ConfigStats:
    """What is known of one (function, configuration)."""

    sketch: QuantileSketch = field(default_factory=QuantileSketch)
    recent: list[float] = field(default_factory=list)
    """The last :data:`RECENT` warm run times, oldest first."""
    cold: int = 0
    init_ms: float = 0.0
    """The sum of the cold starts' initialisation times."""

    @property
    def samples(self) -> int:
        return self.sketch.count

    def observe(self, run_ms: float, cold: bool, init_ms: float = 0.0) -> None:
        if cold:
            self.cold += 1
            self.init_ms += init_ms
            return
        self.sketch.add(run_ms)
        self.recent = (self.recent + [run_ms])[-RECENT:]

    def restart(self) -> None:
        """After drift: the statistics are the recent run times only."""
        self.sketch = QuantileSketch(self.sketch.accuracy, self.sketch.max_buckets)
        self.sketch.update(self.recent)

    def median(self) -> float | None:
        return self.sketch.quantile(0.5)


def drifted(recent: Sequence[float], table_ms: float, tolerance: float = DRIFT_TOLERANCE,
            window: int = WINDOW, windows: int = DRIFT_WINDOWS) -> float | None:
    """The recent median when each of the last ``windows`` windows' median lies more than ``tolerance``
    (relative) from ``table_ms``, all on the same side; else None."""
    if len(recent) < window * windows or table_ms <= 0:
        return None
    tail = list(recent)[-window * windows:]
    sides = set()
    for k in range(windows):
        m = median(tail[k * window:(k + 1) * window])
        if abs(m - table_ms) <= tolerance * table_ms:
            return None
        sides.add(m > table_ms)
    return median(tail) if len(sides) == 1 else None


def grid(spec: FunctionSpec, gpu_model: str) -> tuple[Config, ...]:
    """The configurations a function may be explored in: the grid, within its annotations."""
    gpus: list[str | None] = [None]
    if spec.gpu:
        gpus += [p.name for p in geometry(gpu_model).profiles.values() if not p.media_extensions]
    return tuple(c for g in gpus for v in GRID_VCPUS for b in GRID_BATCHES
                 if spec.allows(c := Config(b, v, g)))


def config_order(c: Config) -> tuple:
    """A total order of configurations (CPU first, then by slice name, vCPUs, batch)."""
    return (c.gpu is not None, c.gpu or "", c.vcpus, c.batch)


def samples(profile: Profile) -> dict[str, int]:
    """Warm batches per configuration label that a learned table records."""
    value = profile.extra.get(SAMPLES_FIELD)
    return {k: v for k, v in value.items() if isinstance(v, int)} if isinstance(value, Mapping) else {}


def learned_profile(function: str, stats: Mapping[Config, ConfigStats], prior: Profile | None,
                    spec: FunctionSpec, bound_ms: float, gpu_model: str,
                    min_samples: int = MIN_SAMPLES, percentile: float | None = None) -> Profile:
    """The table the planner uses: measured configurations over the prior; the default without either.

    Each measured configuration records its sketch's ``p95_ms`` and warm ``samples``; with
    ``percentile`` (the planner's, :mod:`esg.tail`) its sketch at that percentile too, ``p<percentile>_ms``,
    which the planner uses once the samples suffice to have seen it."""
    ordered = sorted(stats.items(), key=lambda cs: config_order(cs[0]))
    counts = {c.label(): s.samples for c, s in ordered if s.samples or s.cold}
    extra: dict[str, Any] = {SAMPLES_FIELD: counts, BOUND_FIELD: float(bound_ms)}
    entries: dict[Config, ProfileEntry] = {e.config: e for e in prior.entries} if prior is not None else {}
    learned = 0
    for c, s in ordered:
        p50 = s.median()
        if s.samples >= min_samples and p50 is not None:
            p95 = s.sketch.quantile(0.95)
            row: dict[str, Any] = {"p95_ms": round(p95 or p50, 3), "samples": s.samples}
            if percentile is not None:
                at = s.sketch.quantile(percentile / 100.0)
                row[quantile_field(percentile)] = round(at or p50, 3)
            entries[c] = ProfileEntry(c, round(p50, 3), row)
            learned += 1
    model = prior.gpu_model if prior is not None else geometry(gpu_model).model
    if not entries:
        base = default_profile(function, spec, bound_ms, model)
        return replace(base, extra={**base.extra, **extra})
    colds = [(s.cold, s.init_ms) for s in stats.values() if s.cold]
    cold_ms = prior.cold_start_ms if prior is not None else 0.0
    if colds:
        cold_ms = round(sum(t for _, t in colds) / sum(n for n, _ in colds), 1)
    base_extra = dict(prior.extra) if prior is not None else {}
    if learned:
        base_extra[SOURCE_FIELD] = "online"
    return Profile(function, model, tuple(entries[c] for c in sorted(entries, key=config_order)), cold_ms,
                   prior.output_bytes if prior is not None else 0, {**base_extra, **extra},
                   prior.gpu_memory_mb if prior is not None else 0)


@dataclass(frozen=True)
class Observation:
    """One answered batch, as the learner sees it."""

    table: str
    config: Config
    run_ms: float
    cold: bool = False
    init_ms: float = 0.0


@dataclass(frozen=True)
class Learned:
    """What an observation changed: a configuration newly measured, or a drift (with the new median)."""

    table: str
    config: Config
    measured: bool = False
    drift_ms: float | None = None
    was_ms: float | None = None


@dataclass
class Learner:
    """The statistics of every table in memory (the emulator's store; the live service keeps the same
    statistics in Redis and applies the same rules)."""

    min_samples: int = MIN_SAMPLES
    tolerance: float = DRIFT_TOLERANCE
    stats: dict[str, dict[Config, ConfigStats]] = field(default_factory=dict)

    def observe(self, obs: Observation, table_ms: float | None) -> Learned | None:
        """Fold one batch in; ``table_ms`` is the configuration's latency in the table in use (None if it
        has none)."""
        s = self.stats.setdefault(obs.table, {}).setdefault(obs.config, ConfigStats())
        s.observe(obs.run_ms, obs.cold, obs.init_ms)
        return judge(obs, s, table_ms, self.min_samples, self.tolerance)

    def table_stats(self, table: str) -> dict[Config, ConfigStats]:
        return self.stats.get(table, {})

    def observe_all(self, observations: Iterable[tuple[Observation, float | None]]) -> list[Learned]:
        return [x for o, t in observations if (x := self.observe(o, t)) is not None]


def judge(obs: Observation, s: ConfigStats, table_ms: float | None, min_samples: int = MIN_SAMPLES,
          tolerance: float = DRIFT_TOLERANCE) -> Learned | None:
    """After ``s`` took ``obs``: whether the configuration just became measured, or drifted from
    ``table_ms`` (then ``s`` restarts from its recent run times, and forgets them)."""
    verdict = verdict_of(obs, s.samples, s.recent, table_ms, min_samples, tolerance)
    if verdict is not None and verdict.drift_ms is not None:
        s.restart()
        s.recent = []
    return verdict


def verdict_of(obs: Observation, samples: int, recent: Sequence[float], table_ms: float | None,
               min_samples: int = MIN_SAMPLES, tolerance: float = DRIFT_TOLERANCE) -> Learned | None:
    """The rule of :func:`judge` on a configuration's warm sample count and recent run times, wherever
    they are kept."""
    if obs.cold:
        return None
    if samples == min_samples:
        return Learned(obs.table, obs.config, measured=True)
    if table_ms is not None:
        moved = drifted(recent, table_ms, tolerance)
        if moved is not None:
            return Learned(obs.table, obs.config, drift_ms=moved, was_ms=table_ms)
    return None
