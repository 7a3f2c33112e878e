"""The policy interface every scheduler policy implements (ESG and the baselines)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from esg import placement
from esg.cluster import ClusterSnapshot
from esg.cost import Prices
from esg.dispatch import Placement
from esg.events import Dispatch, Request
from esg.model import App, Config
from esg.profiles import Profile
from esg.queues import AfwQueue
from esg.slo_split import group_latency
from esg.timing import cold_start_ms


@dataclass(frozen=True)
class FunctionSpec:
    """Per-function limits from annotations: ``esg-max-batch`` and ``esg-gpu``."""

    max_batch: int | None = None
    gpu: bool = True

    def allows(self, config: Config) -> bool:
        if self.max_batch is not None and config.batch > self.max_batch:
            return False
        return self.gpu or config.gpu is None


@dataclass(frozen=True)
class PolicyContext:
    """What every policy is built from."""

    apps: Mapping[str, App]
    profiles: Mapping[str, Profile]
    prices: Prices = field(default_factory=Prices)
    specs: Mapping[str, FunctionSpec] = field(default_factory=dict)
    top_k: int = 8
    max_group: int = 3
    seed: int = 0
    mig_reconfig_ms: float = 2000.0
    """What one MIG instance created or destroyed costs (the driver's figure; ``docs/mig.md``)."""
    cold_start_scale: float = 1.0
    """Multiplies the profiles' ``cold_start_ms`` (as the driver does)."""

    def spec(self, function: str) -> FunctionSpec:
        return self.specs.get(function, FunctionSpec())


@dataclass(frozen=True)
class Choice:
    """The configurations to try for the head of a queue, best first (empty: the queue waits)."""

    priorities: tuple[Config, ...] = ()
    reason: str | None = None
    latencies: Mapping[Config, float] = field(default_factory=dict)
    retry_at_ms: float | None = None
    """When the queue is held on purpose (e.g. a batch still filling), the time to ask again."""

    def latency_of(self, config: Config) -> float | None:
        return self.latencies.get(config)


class Policy(ABC):
    """A policy chooses configurations (:meth:`choose`) and the nodes to try first
    (:meth:`node_preference`); where a batch runs is decided by the machinery every policy shares
    (:mod:`esg.placement`)."""

    name: str = "policy"

    def __init__(self, ctx: PolicyContext):
        self.ctx = ctx
        self.running: Counter[tuple[str, str]] = Counter()
        """Batches in flight per AFW queue (the scale-out rule looks at them)."""
        self._rest_ms: dict[tuple[str, str], float] = {}
        self._fastest: dict[str, tuple[Config, ...]] = {}
        self._groups: dict[tuple, tuple[object, tuple]] = {}
        """(function, configurations, id of the latencies) -> (those latencies, their profile groups)."""

    def add_app(self, app: App, profiles: Mapping[str, Profile], specs: Mapping[str, FunctionSpec]) -> None:
        """Learn (or replace) an app at run time; subclasses with per-app state override
        :meth:`on_app_added`."""
        self.ctx = replace(self.ctx, apps={**self.ctx.apps, app.name: app},
                           profiles={**self.ctx.profiles, **profiles}, specs={**self.ctx.specs, **specs})
        self._rest_ms = {k: v for k, v in self._rest_ms.items() if k[0] != app.name}
        self._fastest = {}
        self._groups = {}
        self.on_app_added(app)

    def on_app_added(self, app: App) -> None:
        """Per-app state for ``app`` must be (re)built."""
        return None

    def on_arrival(self, request: Request, app: App, now_ms: float) -> None:
        """A request arrived (pre-planning policies fix its configurations here)."""
        return None

    def on_dispatch(self, dispatch: Dispatch) -> None:
        """A batch was placed (subclasses that override this call it)."""
        self.running[(dispatch.app, dispatch.function)] += 1

    def on_done(self, dispatch: Dispatch) -> None:
        """A placed batch finished or was lost (subclasses that override this call it)."""
        self.running[(dispatch.app, dispatch.function)] -= 1

    def place(self, app: App, queue: AfwQueue, choice: Choice, snapshot: ClusterSnapshot,
              preferred: Sequence[str], now_ms: float, no_fit: set[Config],
              holds: list[placement.Hold] | None = None) -> Placement | str:
        """Where the head batch runs: the shared machinery of :mod:`esg.placement` (whole batches,
        warm workers first, start-up against the budget, the scale-out rule), then a fallback to the
        function's fastest configurations when none of the policy's own fits on any node. When it waits
        and ``holds`` is given, the :class:`~esg.placement.Hold` that tells when that may change is
        appended to it."""
        function = queue.key[1]
        profile = self.ctx.profiles[function]
        queued = len(queue)
        own = placement.cap_batches(choice.priorities, queued, profile)
        if not own:
            return choice.reason or "no configuration meets the remaining budget"
        startup = placement.StartupCosts(self.ctx.mig_reconfig_ms, cold_start_ms(profile, self.ctx.cold_start_scale))
        rest = self.rest_ms(app, function)
        budget = queue.head.deadline_ms - now_ms - rest
        latency_of = placement.latency_lookup(choice.latencies, profile)
        running = self.running[queue.key]
        head = placement.HeadBatch(function, own, latency_of, preferred, budget, startup,
                                   self.may_scale_out(running, queued, own, latency_of, startup))
        seen: set[str] | None = set() if holds is not None else None
        placed = placement.place(snapshot, head, no_fit, seen)
        if not isinstance(placed, str) or not all(c in no_fit for c in own):
            if isinstance(placed, str) and holds is not None and seen:
                holds.append(self._hold(placed, head, [(own, True)], snapshot, queue.head.deadline_ms, rest,
                                        choice.latencies, running, queued))
            return placed
        spare = placement.fallback(self._fastest_first(function), queued, set(own))
        if not spare:
            if holds is not None:
                holds.append(self._hold(placed, head, [(own, False)], snapshot, queue.head.deadline_ms, rest,
                                        choice.latencies, running, queued))
            return placed
        head = replace(head, priorities=spare,
                       may_scale_out=self.may_scale_out(running, queued, spare, latency_of, startup))
        seen2: set[str] | None = set() if holds is not None else None
        placed = placement.place(snapshot, head, no_fit, seen2)
        if isinstance(placed, str) and holds is not None:
            holds.append(self._hold(placed, head, [(own, False), (spare, bool(seen2))], snapshot,
                                    queue.head.deadline_ms, rest, choice.latencies, running, queued))
        return placed

    def _hold(self, reason: str, head: placement.HeadBatch, lists, snapshot: ClusterSnapshot, deadline_ms: float,
              rest_ms: float, latencies: Mapping[Config, float], running: int, queued: int) -> placement.Hold:
        made = []
        for configs, fits in lists:
            if not snapshot.tracks_workers:
                groups = placement.profile_groups(configs, None)  # untracked: any fit places
            else:
                key = (head.function, configs, id(latencies))
                hit = self._groups.get(key)
                if hit is None or hit[0] is not latencies:  # (kept, the latencies' id is not reused)
                    if len(self._groups) >= 4096:
                        self._groups.clear()
                    hit = self._groups[key] = (latencies, placement.profile_groups(configs, head.latency_of))
                groups = hit[1]
            made.append((configs, groups, fits))
        # from the table's largest batch on, a longer queue caps and falls back to the same lists
        deep = max(e.config.batch for e in self.ctx.profiles[head.function].entries)
        lists_ = tuple(configs for configs, _ in lists)

        def scale_out(r: int, q: int) -> tuple[bool, ...]:
            """This policy's scale-out answer for each list the walk used, with these counts."""
            return tuple(self.may_scale_out(r, q, configs, head.latency_of, head.startup) for configs in lists_)
        return placement.Hold.of(reason, head.function, deadline_ms, rest_ms, head.startup, made, snapshot, deep,
                                 scale_out, scale_out(running, queued))

    def may_scale_out(self, running: int, queued: int, priorities: Sequence[Config],
                      latency_of: Callable[[Config], float], startup: placement.StartupCosts) -> bool:
        """Whether the head batch may start a new worker when no idle one takes it: the shared scale-out
        rule (:func:`esg.placement.may_scale_out`)."""
        return placement.may_scale_out(running, queued, priorities)

    def _fastest_first(self, function: str) -> tuple[Config, ...]:
        """The function's allowed configurations, fastest first (remembered until an app is added)."""
        found = self._fastest.get(function)
        if found is None:
            found = self._fastest[function] = placement.fastest_first(
                self.ctx.profiles[function], self.ctx.spec(function).allows)
        return found

    def rest_ms(self, app: App, function: str) -> float:
        """The fastest the functions after ``function`` can run (what the head must leave them)."""
        key = (app.name, function)
        if key not in self._rest_ms:
            after = tuple(f for f in app.descendants(function) if f != function)
            fastest = {f: min(e.latency_ms for e in self.ctx.profiles[f].entries
                              if self.ctx.spec(f).allows(e.config)) for f in after}
            self._rest_ms[key] = group_latency(app, after, fastest) if after else 0.0
        return self._rest_ms[key]

    def node_preference(self, app: App, function: str, snapshot: ClusterSnapshot) -> list[str] | None:
        """Nodes to try first for a batch: by default none (every node by free capacity, as a
        load-balancing platform does); None: ESG_Dispatch's locality order, home or predecessor."""
        return []

    def work_units(self) -> int:
        """Search work done so far (e.g. A* nodes expanded); drivers model decision time from it."""
        return int(getattr(self, "expanded", 0))

    @abstractmethod
    def choose(self, app: App, queue: AfwQueue, now_ms: float, snapshot: ClusterSnapshot) -> Choice:
        """Configurations to try for the head of ``queue`` (at most ``len(queue)`` jobs per batch)."""
