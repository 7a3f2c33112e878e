"""What ESG's rules share: the parts :func:`esg.policies.esg_policy.esg_policy` builds once and hands
to every rule (:class:`EsgParts`).

* :class:`InFlight` (a plugin): ESG's batches in flight per function, per kind of instance and per
  node, with a count of moves per function that a rule keys what it worked out from them on;
* :class:`SpareStarts` (a plugin): the starts on spare instances per node -- the spare-instance and the
  pool rules take turns on a node: one start asked per node per step, and a node starting as many as it
  may is left alone;
* :class:`SmallestOfKind`: :func:`esg.prewarm.smallest_of_kind` kept per (function, kind) while the
  function's profile stays (asked for every pre-warm);
* :class:`PlannedChoice`: ESG_1Q's choices, which carry the rest of their cheapest path;
* the ESG proposer (its plans, budgets and start-up figures) and the workers pre-warms are starting
  (:class:`esg.policies.base.Starting`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, Protocol

from esg.cluster import ClusterSnapshot
from esg.events import Dispatch, Prewarm
from esg.model import App, Config
from esg.policies.base import Starting, prewarm_takes_ms
from esg.policies.context import Choice, PolicyContext
from esg.policies.points import WarmUps
from esg.prewarm import smallest_of_kind
from esg.profiles import Profile

_NONE: Final[dict[str | None, int]] = {}


class InFlight:
    """Plugin: ESG's batches in flight per function and kind of instance (MIG profile, None for CPU),
    and per (function, kind, node)."""

    def __init__(self) -> None:
        self._by_kind: dict[str, dict[str | None, int]] = {}
        self._on: dict[tuple[str, str | None, str], int] = {}
        self._moves: dict[str, int] = {}

    def _count(self, dispatch: Dispatch, moved: int) -> None:
        function, kind = dispatch.function, dispatch.config.gpu
        busy = self._by_kind.setdefault(function, {})
        busy[kind] = busy.get(kind, 0) + moved
        self._moves[function] = self._moves.get(function, 0) + 1
        on = (function, kind, dispatch.node)
        self._on[on] = self._on.get(on, 0) + moved

    def on_dispatch(self, dispatch: Dispatch) -> None:
        self._count(dispatch, 1)

    def on_done(self, dispatch: Dispatch) -> None:
        self._count(dispatch, -1)

    def by_kind(self, function: str) -> dict[str | None, int]:
        """``function``'s batches in flight per kind (the caller must not change it)."""
        return self._by_kind.get(function, _NONE)

    def on_node(self, function: str, kind: str | None, node: str) -> int:
        return self._on.get((function, kind, node), 0)

    def moves(self, function: str) -> int:
        """How many times ``function``'s count moved: what was worked out from it holds while this stays."""
        return self._moves.get(function, 0)


class SpareStarts:
    """Plugin: the workers started on spare instances, per node, and the one asked this step."""

    def __init__(self, ctx: PolicyContext):
        self.ctx = ctx
        self.asked: dict[str, str] = {}
        """Node -> function of the spare-instance start asked for there this step (one a node)."""
        self._until: dict[str, float] = {}
        self._ends: dict[str, list[float]] = {}

    def on_app_added(self, ctx: PolicyContext, app: App) -> None:
        self.ctx = ctx

    def prewarm(self, now_ms: float, snapshot: ClusterSnapshot, dispatched, asked: WarmUps) -> None:
        self.asked = {}  # a new step

    def wake_ms(self) -> float | None:
        return None

    def on_prewarm(self, prewarm: Prewarm, now_ms: float) -> None:
        if self.asked.get(prewarm.node) == prewarm.function:
            end = now_ms + prewarm_takes_ms(self.ctx, prewarm.function, False)
            ends = [t for t in self._ends.get(prewarm.node, ()) if t >= now_ms]
            ends.append(end)
            self._ends[prewarm.node] = ends
            self._until[prewarm.node] = end

    def starting(self, node: str, now_ms: float) -> bool:
        """Whether the last spare-instance start placed on ``node`` is still starting."""
        return self._until.get(node, -math.inf) >= now_ms

    def full(self, node: str, now_ms: float, slots: int) -> bool:
        """Whether no more may start on ``node`` now: ``slots`` are still starting there, or one was asked
        for there this step."""
        if node in self.asked:
            return True
        return sum(1 for end in self._ends.get(node, ()) if end >= now_ms) >= slots


class SmallestOfKind:
    """:func:`esg.prewarm.smallest_of_kind`, kept per (function, kind of instance) while the profile stays."""

    def __init__(self) -> None:
        self._found: dict[tuple[str, str | None], tuple[Profile, Config]] = {}

    def of(self, function: str, profile: Profile, config: Config) -> Config:
        key = (function, config.gpu)
        hit = self._found.get(key)
        if hit is not None and hit[0] is profile:
            return hit[1]
        found = smallest_of_kind(profile, config)
        if any(e.config.gpu == config.gpu for e in profile.entries):  # (else ``config`` itself: not kept)
            self._found[key] = (profile, found)
        return found


@dataclass(frozen=True)
class PlannedChoice(Choice):
    """ESG_1Q's choice, with the configuration of every later function on the cheapest path (what JIT
    pre-warming starts for the successors)."""

    downstream: Mapping[str, Config] = field(default_factory=dict)
    app: str = ""


class EsgPlans(Protocol):
    """What the rules ask of ESG's proposer (:class:`esg.policies.esg_policy.EsgProposer`)."""

    def on_time(self, key: tuple[str, str]) -> bool:
        """Whether queue ``key``'s head had an on-time plan at its last choice."""
        ...

    def plan(self, app: App, function: str, cap: int, budget: int, kinds: frozenset[str | None] | None,
             padded: bool) -> Choice | None:
        """ESG_1Q's (cached) choice for ``budget``, or None when no path meets it."""
        ...

    def before_ms(self, app: App, function: str, padded: bool) -> float: ...

    def rest_ms(self, app: App, function: str, padded: bool = False) -> float: ...

    def startup_ms(self, function: str) -> tuple[float, float]: ...

    def gpu_kinds(self, function: str) -> tuple[str, ...]: ...

    def cold_start_in_time(self, function: str) -> bool:
        """Whether a worker of ``function`` started on demand still meets every app's SLO (then one started
        ahead of the jobs saves them nothing)."""
        ...


@dataclass(frozen=True)
class EsgParts:
    """What every ESG rule is built from (a rule that keeps ``ctx`` takes the new one in
    ``on_app_added``)."""

    ctx: PolicyContext
    proposer: EsgPlans
    in_flight: InFlight
    starting: Starting
    spare_starts: SpareStarts
    smallest: SmallestOfKind
