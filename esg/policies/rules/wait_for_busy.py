"""ESG rule: a head with an on-time plan waits for a worker of its function that frees in time.

Workers belong to functions, not to queues. A head with an on-time plan counts, as running for its queue
(:class:`~esg.policies.points.AlsoRunning`), the workers of its function on a MIG profile of its plan
that free early enough for its batch to run within its budget (less the per-batch overhead and
:attr:`WaitForBusy.slack_ms`): those running a batch of the function for another queue, and idle ones on
an instance busy with another function's batch (the pool and spare-instance rules put several functions'
workers on one instance), each by its batch's planned end. ESG's scale-out gate then starts no worker
unless the backlog would outlast a cold start: the head waits milliseconds instead of binding to a cold
start of seconds on an instance another function's next burst then lacks.
"""

from __future__ import annotations

import math
from typing import Final

from esg.cluster import ClusterSnapshot, SliceRef
from esg.events import Dispatch
from esg.model import App
from esg.policies.base import Choice, PolicyContext
from esg.policies.points import QueueKey, WarmUps
from esg.policies.rules.shared import EsgParts
from esg.queues import AfwQueue

WAIT_SLACK_MS: Final = 10.0
"""A worker frees in time only when the head's batch would still end this much before its budget runs
out (room for the queueing of other heads that wait for the same worker)."""


class WaitForBusy:
    def __init__(self, parts: EsgParts, slack_ms: float = WAIT_SLACK_MS):
        self.ctx = parts.ctx
        self.proposer = parts.proposer
        self.slack_ms = slack_ms
        self._now = 0.0
        """The time of the current step (the last choice or pre-warm seen): when a batch placed now
        started."""
        self._ends: dict[str, dict[str, tuple[QueueKey, str | None, float]]] = {}
        """Per function, its batches in flight by id: (their queue, MIG profile or None, planned end)."""
        self._slice_end: dict[tuple[str, SliceRef], float] = {}
        """Per (node, MIG instance) running a batch of this policy, the batch's planned end."""
        self._soon: dict[QueueKey, int] = {}
        """Per queue whose head is on time, the workers that free in time for it (at its last choice)."""

    def on_app_added(self, ctx: PolicyContext, app: App) -> None:
        self.ctx = ctx

    def also_running(self, key: QueueKey) -> int:
        return self._soon.get(key, 0)

    def on_choice(self, app: App, queue: AfwQueue, choice: Choice, now_ms: float, snapshot: ClusterSnapshot) -> None:
        self._now = now_ms
        self._soon.pop(queue.key, None)
        if choice.priorities and self.proposer.on_time(queue.key):
            soon = self._frees_in_time(app, queue, choice, now_ms, snapshot)
            if soon:
                self._soon[queue.key] = soon

    def prewarm(self, now_ms: float, snapshot: ClusterSnapshot, dispatched, asked: WarmUps) -> None:
        self._now = now_ms

    def wake_ms(self) -> float | None:
        return None

    def on_dispatch(self, dispatch: Dispatch) -> None:
        fit = dispatch.fit
        start = 0.0
        if fit.warm_worker is None:
            start = self.proposer.startup_ms(dispatch.function)[0] + fit.changed_instances * self.ctx.mig_reconfig_ms
        end = self._now + start + (dispatch.planned_latency_ms or 0.0) + self.ctx.stage_overhead_ms
        ends = self._ends.setdefault(dispatch.function, {})
        ends[dispatch.batch_id] = ((dispatch.app, dispatch.function), dispatch.config.gpu, end)
        if fit.slice is not None:
            self._slice_end[(dispatch.node, fit.slice)] = end

    def on_done(self, dispatch: Dispatch) -> None:
        ends = self._ends.get(dispatch.function)
        if ends is not None:
            ends.pop(dispatch.batch_id, None)
        if dispatch.fit.slice is not None:
            self._slice_end.pop((dispatch.node, dispatch.fit.slice), None)

    def _frees_in_time(self, app: App, queue: AfwQueue, choice: Choice, now_ms: float,
                       snapshot: ClusterSnapshot) -> int:
        """The workers of the head's function, on a MIG profile of ``choice``, that free early enough for
        the head's batch to run on them within its budget."""
        function = queue.key[1]
        budget = queue.head.deadline_ms - now_ms - self.proposer.rest_ms(app, function)
        profile = self.ctx.profiles[function]
        until: dict[str, float] = {}
        for c in choice.priorities:
            if c.gpu is not None:
                latency = choice.latencies.get(c)
                run = profile.latency(c) if latency is None else latency
                t = now_ms + budget - run - self.ctx.stage_overhead_ms - self.slack_ms
                if t > until.get(c.gpu, -math.inf):
                    until[c.gpu] = t
        if not until:
            return 0
        soon = 0
        for key, gpu, end in self._ends.get(function, {}).values():
            if key != queue.key and gpu is not None and end <= until.get(gpu, -math.inf):
                soon += 1
        idle = snapshot.idle_totals(function)
        if not any(kind in idle for kind in until):
            return soon  # no idle worker of the function on any of the profiles
        for name in snapshot.nodes_with_warm(function):
            state = snapshot.nodes[name]
            for s in state.slices:
                if s.busy and s.ref.profile in until and state.idle_workers.get((function, s.ref), 0) > 0:
                    frees = self._slice_end.get((name, s.ref))
                    if frees is not None and frees <= until[s.ref.profile]:
                        soon += 1
        return soon
