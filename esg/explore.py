"""Exploration: running a function in a configuration its table lacks, within a budget
(docs/online-profiles.md §2).

The rule is optimism under a safety bound, a deterministic cousin of a bandit's upper confidence bound:

* **Budget.** Each job of a function earns it ``fraction`` of a token (at most ``burst`` kept); an
  exploration batch of ``b`` jobs spends ``b``. Over a run at most about ``fraction`` of a function's
  calls are explored.
* **Safety.** An untried configuration's latency is bounded from above by a measured one it dominates
  (no more vCPUs, no larger MIG slice): running ``b`` jobs as ``ceil(b / b')`` batches of the measured
  ``b'`` on fewer resources would take no less. The action's time limit bounds every configuration. A
  configuration is explored only when that bound, plus the fastest the rest of the app can run, fits
  what is left of the head job's SLO -- or, for a request already too late for any known configuration,
  when the bound is no later than the known way to run those jobs (``ceil(b / b')`` batches of the
  fastest measured ``b'``). An exploration never makes a request late that the table says would be on
  time, nor later than the table's own way.
* **Which.** Optimistically, an untried configuration is as fast as the fastest measured one (per job,
  for a smaller batch). Configurations whose optimistic cost is at most the K-th cheapest measured cost
  could enter the planner's top-K: they go first; the others only once none of those is left, so the
  table still fills in to the whole grid. Within each, a configuration already started (fewer than
  ``min_samples`` warm batches) before a new one, then the cheapest optimistic cost.
* **Only learned tables** (built by :func:`esg.online.learned_profile`, which records ``samples``) are
  explored: a plain OpenWhisk action keeps its one configuration.
* **Idle capacity.** The scheduler explores only where the configuration fits now, before the policy
  places anything else in that step; otherwise the head goes the policy's way.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from esg.cost import Prices, config_cost
from esg.defaults import is_default
from esg.mig import compute_slices
from esg.model import Config
from esg.online import BOUND_FIELD, MIN_SAMPLES, SAMPLES_FIELD, config_order, grid, samples
from esg.policies.base import FunctionSpec
from esg.profiles import Profile

EXPLORE_FRACTION = 0.05


@dataclass(frozen=True)
class Probe:
    """A configuration to explore and the latency bound it was judged safe with."""

    config: Config
    bound_ms: float


@dataclass
class Explorer:
    fraction: float = EXPLORE_FRACTION
    min_samples: int = MIN_SAMPLES
    burst: float = 8.0
    """Tokens a function may save up (enough for one batch of the grid's largest size)."""
    tokens: dict[str, float] = field(default_factory=dict)
    pending: Counter = field(default_factory=Counter)
    """Exploration batches sent and not yet answered, per (function, configuration)."""
    seen: Counter = field(default_factory=Counter)
    """Warm batches answered per (function, configuration), as the driver reported them (a table's
    ``samples`` may lag behind)."""
    grids: Mapping[str, tuple[Config, ...]] = field(default_factory=dict)
    """Per function, the configurations it may be explored in, instead of the grid (the emulator: what
    the true table has)."""
    batches: int = 0
    jobs: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.fraction <= 1:
            raise ValueError(f"the exploration fraction must be in [0, 1], got {self.fraction!r}")

    def credit(self, function: str, jobs: int = 1) -> None:
        if self.fraction > 0:
            self.tokens[function] = min(self.burst, self.tokens.get(function, 0.0) + self.fraction * jobs)

    def observed(self, function: str, config: Config, warm: bool) -> None:
        """A batch of ``function`` in ``config`` was answered (warm: its run time is a sample)."""
        key = (function, config)
        if self.pending[key] > 0:
            self.pending[key] -= 1
        if warm:
            self.seen[key] += 1

    def spent(self, function: str, config: Config) -> None:
        self.tokens[function] = self.tokens.get(function, 0.0) - config.batch
        self.pending[(function, config)] += 1
        self.batches += 1
        self.jobs += config.batch

    def probe(self, function: str, profile: Profile, spec: FunctionSpec, queued: int, budget_ms: float,
              prices: Prices, top_k: int) -> Probe | None:
        """The configuration to explore for the head of ``function``'s queue, if any is due and safe."""
        found = self.probes(function, profile, spec, queued, budget_ms, prices, top_k)
        return found[0] if found else None

    def probes(self, function: str, profile: Profile, spec: FunctionSpec, queued: int, budget_ms: float,
               prices: Prices, top_k: int) -> list[Probe]:
        """Every configuration that may be explored now for the head of ``function``'s queue, best first
        (the scheduler takes the first that fits)."""
        tokens = self.tokens.get(function, 0.0)
        if self.fraction <= 0 or tokens < 1 or SAMPLES_FIELD not in profile.extra:
            return []  # only learned tables are explored: never a plain OpenWhisk action's
        counts = samples(profile)
        known = {} if is_default(profile) else {e.config: e.latency_ms for e in profile.entries}
        bound = profile.extra.get(BOUND_FIELD)
        limit = float(bound) if isinstance(bound, int | float) else math.inf
        model = profile.gpu_model
        costs = sorted(config_cost(prices, model, c, lat) for c, lat in known.items())
        threshold = costs[top_k - 1] if len(costs) >= top_k else math.inf
        fastest = min(known.items(), key=lambda kv: kv[1] / kv[0].batch, default=None)
        found: list[tuple[tuple, Probe]] = []
        for c in self.grids.get(function) or grid(spec, model):
            if not spec.allows(c):
                continue
            if c.batch > queued or c.batch > tokens or c in known:
                continue
            n = max(counts.get(c.label(), 0), self.seen[(function, c)]) + self.pending[(function, c)]
            if n >= self.min_samples:
                continue
            upper = min([limit] + [lat * math.ceil(c.batch / d.batch) for d, lat in known.items()
                                   if _dominates(model, c, d)])
            known_way = min([limit] + [lat * math.ceil(c.batch / d.batch) for d, lat in known.items()])
            if upper > budget_ms and upper > known_way:
                continue
            optimistic = 0.0 if fastest is None else fastest[1] * min(1.0, c.batch / fastest[0].batch)
            cost = config_cost(prices, model, c, optimistic)
            found.append(((cost > threshold, 0 if n > 0 else 1, cost, c), Probe(c, upper)))
        return [p for _, p in sorted(found, key=lambda kp: (kp[0][:3], config_order(kp[0][3])))]


def _dominates(model: str, c: Config, d: Config) -> bool:
    """Whether ``c`` has at least ``d``'s resources (vCPUs, and a slice at least as large; CPU only is
    smallest)."""
    if c.vcpus < d.vcpus:
        return False
    if d.gpu is None:
        return True
    return c.gpu is not None and compute_slices(model, c.gpu) >= compute_slices(model, d.gpu)
