"""ESG: ESG_1Q (A* with dual-blade pruning and dominator-based SLO distribution) per AFW queue.

For the head job of a queue the budget is what is left of its request's SLO; the search covers the
job's function and every function after it in the app, with batch sizes capped at the jobs waiting in
the queue (ESG batches what has arrived, it does not hold jobs back to fill a batch). The distinct
configurations of the queue's function across the K cheapest paths form the priority list that
ESG_Dispatch walks. When no path meets the budget (the request is already late), the function's
fastest configurations are tried, fastest first, to lose as little time as possible.

Plans are cached per (app, function, batch cap, budget floored to 1 ms): the budget only shrinks as a
job waits, and flooring keeps the plan on the safe side.

ESG_Dispatch is locality- and warm-start-aware. Where the driver tracks warm workers
(``ClusterSnapshot.tracks_workers``), a placement's *start-up* -- MIG instances created or destroyed
(``mig_reconfig_ms`` each) plus a cold start when no idle worker of the function waits on that slice --
is weighed against the head job's budget, in three passes over the priority list:

1. a warm worker with no MIG change, in priority then locality order;
2. otherwise any placement whose start-up, run time and the fastest rest of the app still fit the budget;
3. otherwise scale out (take the placement that starts soonest) only when no batch of this queue is
   running or more jobs wait than the running batches can take next; else wait for a worker to free up.

Without worker tracking (the live service today) the first placement that fits is taken.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from collections.abc import Set as AbstractSet

from esg.cluster import ClusterSnapshot, Fit
from esg.dispatch import Placement, candidate_fits, dispatch, node_order
from esg.model import App, Config
from esg.planner import Planner
from esg.policies import register
from esg.policies.base import Choice, Policy, PolicyContext
from esg.queues import AfwQueue
from esg.slo_split import group_latency

FALLBACK_OPTIONS = 4


@register("esg")
class EsgPolicy(Policy):
    name = "esg"

    def __init__(self, ctx: PolicyContext, exact: bool = False):
        super().__init__(ctx)
        self.exact = exact
        self.planners = {name: self._planner(app) for name, app in ctx.apps.items()}
        self._cache: dict[tuple, Choice] = {}
        self._rest_ms: dict[tuple[str, str], float] = {}
        self._running: Counter[tuple[str, str]] = Counter()
        self.searches = 0
        self.expanded = 0

    def _planner(self, app: App) -> Planner:
        return Planner(app, {f: self.ctx.profiles[f] for f in app.functions}, self.ctx.prices,
                       self.ctx.max_group, self.exact)

    def on_app_added(self, app: App) -> None:
        self.planners[app.name] = self._planner(app)
        self._cache = {k: v for k, v in self._cache.items() if k[0] != app.name}
        self._rest_ms = {k: v for k, v in self._rest_ms.items() if k[0] != app.name}

    def on_dispatch(self, dispatch) -> None:
        self._running[(dispatch.app, dispatch.function)] += 1

    def on_done(self, dispatch) -> None:
        self._running[(dispatch.app, dispatch.function)] -= 1

    # -- ESG_Dispatch ------------------------------------------------------------------------------
    def place(self, app: App, queue: AfwQueue, choice: Choice, snapshot: ClusterSnapshot,
              preferred: Sequence[str], now_ms: float, no_fit: set[Config]) -> Placement | str:
        if not snapshot.tracks_workers:
            return dispatch(snapshot, choice.priorities, preferred, no_fit)
        function = queue.key[1]
        budget = queue.head.deadline_ms - now_ms - self._rest(app, function)
        cold_ms = self.ctx.profiles[function].cold_start_ms * self.ctx.cold_start_scale
        warm_nodes = snapshot.nodes_with_warm(function)
        warm = _first_warm(snapshot, choice.priorities, preferred, no_fit, function, warm_nodes)
        if warm is not None:  # pass 1
            snapshot.reserve(*warm)
            return Placement(*warm)
        in_time: tuple[Config, Fit] | None = None
        soonest: tuple[float, Config, Fit] | None = None
        for config, fit in candidate_fits(snapshot, choice.priorities, preferred, no_fit, function, warm_nodes):
            t = self._startup(fit, cold_ms) + self._latency(choice, config, function)
            if in_time is None and t <= budget:
                in_time = (config, fit)
            if soonest is None or t < soonest[0]:
                soonest = (t, config, fit)
        chosen = in_time
        if chosen is None and soonest is not None and self._may_scale_out(queue, choice):
            chosen = soonest[1:]
        if chosen is None:
            if soonest is None:
                return f"none of {len(choice.priorities)} configurations fits on any of {len(snapshot.nodes)} nodes"
            return f"waiting for a warm worker of {function}: starting another would take longer"
        snapshot.reserve(*chosen)
        return Placement(*chosen)

    def _startup(self, fit: Fit, cold_ms: float) -> float:
        cold = 0.0 if fit.warm_worker is not None else cold_ms
        return fit.changed_instances * self.ctx.mig_reconfig_ms + cold

    def _latency(self, choice: Choice, config: Config, function: str) -> float:
        lat = choice.latency_of(config)
        return lat if lat is not None else self.ctx.profiles[function].latency(config)

    def _may_scale_out(self, queue: AfwQueue, choice: Choice) -> bool:
        running = self._running[queue.key]
        return running == 0 or len(queue) > running * max(c.batch for c in choice.priorities)

    def _rest(self, app: App, function: str) -> float:
        """The fastest the functions after ``function`` can run (what the head must leave them)."""
        key = (app.name, function)
        if key not in self._rest_ms:
            after = tuple(f for f in app.descendants(function) if f != function)
            planner = self.planners[app.name]
            fastest = {f: min(o.latency_ms for o in planner.options(f)) for f in after}
            self._rest_ms[key] = group_latency(app, after, fastest) if after else 0.0
        return self._rest_ms[key]

    def choose(self, app: App, queue: AfwQueue, now_ms: float, snapshot: ClusterSnapshot) -> Choice:
        function = queue.key[1]
        cap = len(queue)
        budget = max(0, math.floor(queue.head.deadline_ms - now_ms))  # every late job gets the fastest
        key = (app.name, function, cap, budget)
        choice = self._cache.get(key)
        if choice is None:
            choice = self._plan(app, function, cap, budget)
            if len(self._cache) > 200_000:
                self._cache.clear()
            self._cache[key] = choice
        return choice

    def _plan(self, app: App, function: str, cap: int, budget: float) -> Choice:
        planner = self.planners[app.name]

        def allow(f: str, c: Config) -> bool:
            return c.batch <= cap and self.ctx.spec(f).allows(c)

        if budget > 0:
            result = planner.plan(budget, self.ctx.top_k, start=function, allow=allow, allow_key=cap)
            self.searches += 1
            self.expanded += result.stats.expanded
            if result.feasible:
                prios = result.priority_list(function)
                lat = {c: planner.profiles[function].latency(c) for c in prios}
                return Choice(tuple(prios), latencies=lat)
        fastest = sorted(planner.options(function, allow, cap), key=lambda o: (o.latency_ms, o.cost))
        prios = tuple(o.config for o in fastest[:FALLBACK_OPTIONS])
        return Choice(prios, reason=None if prios else "no allowed configuration",
                      latencies={o.config: o.latency_ms for o in fastest[:FALLBACK_OPTIONS]})


def _first_warm(snapshot: ClusterSnapshot, priorities: Sequence[Config], preferred: Sequence[str],
                no_fit: set[Config], function: str, warm_nodes: AbstractSet[str]) -> tuple[Config, Fit] | None:
    """The first placement, in priority then locality order, that takes an idle warm worker of
    ``function`` (such a placement never changes the MIG layout: the worker's slice exists and is idle).
    Only nodes with such a worker are looked at."""
    if not warm_nodes:
        return None
    routes: dict[bool, list[str]] = {}
    for config in priorities:
        if config in no_fit:
            continue
        gpu = config.gpu is not None
        if gpu not in routes:
            routes[gpu] = [n for n in node_order(snapshot, preferred, config) if n in warm_nodes]
        for name in routes[gpu]:
            fit = snapshot.fit(name, config, function)
            if fit is not None and fit.warm_worker is not None:
                return config, fit
    return None
