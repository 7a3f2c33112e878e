"""Online profiles in the emulator (``esg emulate --profiles-online``): the scheduler starts with every
function unprofiled (or with a perturbed prior) and learns as the live service does.

The runner keeps the true tables for the model (what a batch really takes); the scheduler plans with
the tables :class:`OnlineLearning` builds from the batches it has seen, by the rules of
:mod:`esg.online` and :mod:`esg.explore` -- the same rules the service applies to the agents' reports:
warm batches are samples, a cold batch counts towards the cold start only, a configuration is measured
after ``min_samples`` warm batches, drift restarts a configuration's statistics, and when a table changes
the apps using it are registered again with the new tables. The explorer may only choose configurations
the true table has (what the emulated hardware was profiled in); the default rule's batch sizes that the
true table lacks take the time of the next larger batch it has (at most ``b / b'`` times the largest).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from esg.defaults import is_default
from esg.explore import Explorer
from esg.model import App, Config
from esg.online import Learner, Observation, config_order, learned_profile
from esg.policies.base import FunctionSpec
from esg.profiles import Profile, ProfileEntry

DEFAULT_BOUND_MS = 60_000.0
"""An emulated action's time limit (OpenWhisk's default): the default table's latency bound."""


def perturbed(profile: Profile, spread: float, rng: np.random.Generator) -> Profile:
    """``profile`` with each latency multiplied by a log-uniform factor in [1/(1+spread), 1+spread]."""
    k = math.log1p(spread)
    entries = tuple(ProfileEntry(e.config, round(e.latency_ms * math.exp(rng.uniform(-k, k)), 3), e.extra)
                    for e in profile.entries)
    return Profile(profile.function, profile.gpu_model, entries, profile.cold_start_ms, profile.output_bytes,
                   profile.extra, profile.gpu_memory_mb)


@dataclass
class OnlineLearning:
    truth: Mapping[str, Profile]
    apps: Mapping[str, App]
    specs: Mapping[str, FunctionSpec] = field(default_factory=dict)
    priors: Mapping[str, Profile] = field(default_factory=dict)
    explore_fraction: float = 0.05
    bound_ms: float = DEFAULT_BOUND_MS
    percentile: float | None = None
    """The scheduler's planning percentile (``--slo-percentile``): the learned tables record their sketches
    at it (:func:`esg.online.learned_profile`)."""
    learner: Learner = field(default_factory=Learner)
    explorer: Explorer = field(init=False)
    tables: dict[str, Profile] = field(init=False)
    changes: int = 0

    def __post_init__(self) -> None:
        self.explorer = Explorer(self.explore_fraction,
                                 grids={f: tuple(sorted(p.configs, key=config_order)) for f, p in self.truth.items()})
        self.tables = {f: self._table(f) for f in self.truth}

    def spec(self, function: str) -> FunctionSpec:
        """The function's annotations: given, else what its true table implies (``esg-gpu`` false for a
        function profiled on CPU only; ``esg-max-batch`` its largest profiled batch)."""
        if function in self.specs:
            return self.specs[function]
        truth = self.truth[function]
        return FunctionSpec(max_batch=max(c.batch for c in truth.configs),
                            gpu=any(c.gpu is not None for c in truth.configs))

    def _table(self, function: str) -> Profile:
        prior = self.priors.get(function)
        model = self.truth[function].gpu_model
        stats = self.learner.table_stats(function)
        return learned_profile(function, stats, prior, self.spec(function), self.bound_ms, model,
                               self.learner.min_samples, self.percentile)

    def latency(self, function: str, config: Config) -> float:
        """The true latency of ``config`` (see the module's note for batch sizes the table lacks)."""
        truth = self.truth[function]
        same = sorted((e.config.batch, e.latency_ms) for e in truth.entries
                      if (e.config.vcpus, e.config.gpu) == (config.vcpus, config.gpu))
        if not same:
            raise KeyError(f"{function}: no {config.vcpus}c/{config.gpu or 'cpu'} configuration in its table")
        for b, lat in same:
            if b >= config.batch:
                return lat
        b, lat = same[-1]
        return lat * config.batch / b

    def observe(self, d, run_ms: float, cold: bool, init_ms: float) -> list[str]:
        """A batch finished: learn from it; the functions whose tables changed."""
        self.explorer.observed(d.function, d.config, warm=not cold)
        table = self.tables[d.function]
        table_ms = table.latency(d.config) if not is_default(table) and d.config in table.configs else None
        learned = self.learner.observe(Observation(d.function, d.config, run_ms, cold, init_ms), table_ms)
        if learned is None:
            return []
        self.tables[d.function] = self._table(d.function)
        self.changes += 1
        return [d.function]

    def apps_using(self, functions: list[str]) -> list[App]:
        return [a for a in self.apps.values() if any(f in a.functions for f in functions)]
