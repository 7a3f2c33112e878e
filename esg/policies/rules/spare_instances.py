"""ESG rule: a head with an on-time plan that waits for a busy worker of its function gets the function
one more worker on a spare instance.

A spare instance (:func:`esg.prewarm.spare_instance`) is an idle MIG instance of the planned profile,
already held for other functions that each keep another idle worker on the node. It is paid for
already (a MIG instance costs the same idle with one warm worker or two): the new worker costs its cold
start only -- no MIG change, no function's last idle worker taken. The node is the first with one in
ESG_Dispatch's order (the locality node, then the rest by free capacity); one such start at a time per
node (:class:`~esg.policies.rules.shared.SpareStarts`), none while one of the function's kind is
starting. No spare instance, no start: at high load, when instances are busy, the rule does nothing.
Nor for a function whose cold start fits in its apps' SLOs
(:meth:`~esg.policies.esg_policy.EsgProposer.cold_start_in_time`): its head starts a worker on demand in
time, and one started ahead would only take GPU memory other functions' starts need.
"""

from __future__ import annotations

from collections.abc import Sequence

from esg.cluster import ClusterSnapshot
from esg.dispatch import Wait, locality_order
from esg.events import Dispatch
from esg.model import App, Config, Job
from esg.placement import WAITING_FOR_A_WORKER
from esg.policies.base import Choice, PolicyContext
from esg.policies.points import WarmUps
from esg.policies.rules.shared import EsgParts
from esg.prewarm import WarmUp, spare_instance
from esg.queues import AfwQueue


class SpareInstances:
    def __init__(self, parts: EsgParts):
        self.ctx = parts.ctx
        self.parts = parts
        self._waited: dict[str, tuple[str, Job, Config]] = {}
        """Functions whose on-time head waited for a busy worker since the last pre-warms: (app, the head,
        the planned configuration)."""

    def on_app_added(self, ctx: PolicyContext, app: App) -> None:
        self.ctx = ctx

    def on_wait(self, app: App, queue: AfwQueue, choice: Choice, wait: Wait) -> None:
        if (choice.priorities and wait.reason.startswith(WAITING_FOR_A_WORKER)
                and self.parts.proposer.on_time(queue.key)):
            self._waited.setdefault(queue.key[1], (app.name, queue.head, choice.priorities[0]))

    def wake_ms(self) -> float | None:
        return None

    def prewarm(self, now_ms: float, snapshot: ClusterSnapshot, dispatched: Sequence[Dispatch],
                asked: WarmUps) -> None:
        waited, self._waited = self._waited, {}
        starts = self.parts.spare_starts
        for function, (app, head, config) in waited.items():
            if config.gpu is None or asked.has_function(function) or self.parts.proposer.cold_start_in_time(function):
                continue  # (a worker started on demand is in time: one started now saves nothing)
            if self.parts.starting.warming.count(function, now_ms, config.gpu) > 0:
                continue  # one is starting already
            for node in snapshot.route(tuple(locality_order(app, head, snapshot.nodes)), True):
                if starts.starting(node, now_ms) or node in starts.asked:
                    continue  # one start on a spare instance at a time per node
                ref = spare_instance(snapshot.nodes[node], function, config.gpu)
                if ref is not None:
                    config_ = self.parts.smallest.of(function, self.ctx.profiles[function], config)
                    asked.add(WarmUp(app, function, config_, None, preferred=(node,), only_preferred=True,
                                     instance=ref))
                    starts.asked[node] = function
                    break
