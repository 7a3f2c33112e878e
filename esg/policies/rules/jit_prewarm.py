"""ESG rule: JIT pre-warming along the DAG (after Xanadu).

When a batch of f is dispatched, each successor g whose configuration on the cheapest path of the plan
the batch was placed from is of a kind of instance with no worker of g near f's batch -- running,
idle or starting on f's node, where ESG_Dispatch looks first for g's batch -- gets one started there,
timed to be ready when f's batch ends: at max(now, f's planned end - the hop to g's worker - g's
start-up). With start-ups of seconds against batches of milliseconds that is mostly at once: the
worker serves g's later batches.

Contract: a batch is pre-warmed for from the plan it was placed from -- the queue's choice of the same
step (a batch placed from no choice of this step, e.g. an explorer's probe, pre-warms nothing).
"""

from __future__ import annotations

from collections.abc import Sequence

from esg.cluster import ClusterSnapshot
from esg.events import Dispatch
from esg.model import App
from esg.policies.base import Choice, PolicyContext, apps_sharing, prewarm_start_ms
from esg.policies.points import QueueKey, WarmUps
from esg.policies.rules.shared import EsgParts, PlannedChoice
from esg.prewarm import Timed, WarmUp, idle_of_kind
from esg.queues import AfwQueue


class JitPrewarm:
    def __init__(self, parts: EsgParts):
        self.ctx = parts.ctx
        self.parts = parts
        self._pending = Timed()
        """Pre-warms timed for later."""
        self._chosen: dict[QueueKey, Choice] = {}
        """The last choice per queue this step not yet dispatched from."""
        self._placed_from: dict[str, PlannedChoice] = {}
        """The plan each batch in flight was placed from, by batch id, until its pre-warms are asked for
        (several batches of one queue dispatched in one step each pre-warm their own plan's successors)."""

    def on_app_added(self, ctx: PolicyContext, app: App) -> None:
        self.ctx = ctx
        changed = {a.name for a in apps_sharing(ctx, app)}
        self._chosen = {k: v for k, v in self._chosen.items() if k[0] not in changed}
        self._placed_from = {b: c for b, c in self._placed_from.items() if c.app not in changed}

    def on_choice(self, app: App, queue: AfwQueue, choice: Choice, now_ms: float, snapshot: ClusterSnapshot) -> None:
        self._chosen[queue.key] = choice

    def on_dispatch(self, dispatch: Dispatch) -> None:
        choice = self._chosen.pop((dispatch.app, dispatch.function), None)
        if isinstance(choice, PlannedChoice):  # (not the fastest-first rule's)
            self._placed_from[dispatch.batch_id] = choice

    def on_done(self, dispatch: Dispatch) -> None:
        self._placed_from.pop(dispatch.batch_id, None)

    def wake_ms(self) -> float | None:
        return self._pending.next_ms()

    def prewarm(self, now_ms: float, snapshot: ClusterSnapshot, dispatched: Sequence[Dispatch],
                asked: WarmUps) -> None:
        for want in self._pending.due(now_ms):
            node = want.preferred[0]
            if not asked.has(want.function, want.config.gpu, node) and not self.warm_near(
                    want.function, want.config.gpu, node, snapshot, now_ms):
                asked.add(want)
        self._chosen.clear()  # the step is over: a choice none of its batches was placed from is stale
        for d in dispatched:
            choice = self._placed_from.pop(d.batch_id, None)
            if choice is None:
                continue
            end = now_ms + (d.planned_latency_ms or 0.0)
            for g in self.ctx.apps[d.app].successors(d.function):
                planned = choice.downstream.get(g)
                if planned is None or asked.has(g, planned.gpu, d.node) or self.warm_near(
                        g, planned.gpu, d.node, snapshot, now_ms):
                    continue
                want = WarmUp(d.app, g, self.parts.smallest.of(g, self.ctx.profiles[g], planned), None,
                              preferred=(d.node,), only_preferred=True, ready_by_ms=end)
                start = prewarm_start_ms(self.ctx, g, planned.gpu is not None, end)
                if start > now_ms:
                    self._pending.add(start, want)
                else:
                    asked.add(want)

    def warm_near(self, function: str, kind: str | None, node: str, snapshot: ClusterSnapshot, now_ms: float) -> bool:
        """Whether a worker of ``function`` on ``kind`` is on ``node``: running, idle or starting."""
        return (self.parts.in_flight.on_node(function, kind, node) > 0
                or idle_of_kind(snapshot, function, kind, (node,)) > 0
                or self.parts.starting.warming.count(function, now_ms, kind, (node,)) > 0)
