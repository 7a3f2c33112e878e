"""ESG: ESG_1Q (A* with dual-blade pruning and dominator-based SLO distribution) per AFW queue.

For the head job of a queue the budget is what is left of its request's SLO; the search covers the
job's function and every function after it in the app, with batch sizes capped at the jobs waiting in
the queue (ESG batches what has arrived, it does not hold jobs back to fill a batch). The distinct
configurations of the queue's function across the K cheapest paths form the priority list that
ESG_Dispatch walks. When no path meets the budget (the request is already late), the function's
fastest configurations are tried, fastest first, to lose as little time as possible.

Plans are cached per (app, function, batch cap, budget floored to 1 ms): the budget only shrinks as a
job waits, and flooring keeps the plan on the safe side.
"""

from __future__ import annotations

import math

from esg.cluster import ClusterSnapshot
from esg.model import App, Config
from esg.planner import Planner
from esg.policies import register
from esg.policies.base import Choice, Policy, PolicyContext
from esg.queues import AfwQueue

FALLBACK_OPTIONS = 4


@register("esg")
class EsgPolicy(Policy):
    name = "esg"

    def __init__(self, ctx: PolicyContext, exact: bool = False):
        super().__init__(ctx)
        self.exact = exact
        self.planners = {name: self._planner(app) for name, app in ctx.apps.items()}
        self._cache: dict[tuple, Choice] = {}
        self.searches = 0
        self.expanded = 0

    def _planner(self, app: App) -> Planner:
        return Planner(app, {f: self.ctx.profiles[f] for f in app.functions}, self.ctx.prices,
                       self.ctx.max_group, self.exact)

    def on_app_added(self, app: App) -> None:
        self.planners[app.name] = self._planner(app)
        self._cache = {k: v for k, v in self._cache.items() if k[0] != app.name}

    def choose(self, app: App, queue: AfwQueue, now_ms: float, snapshot: ClusterSnapshot) -> Choice:
        function = queue.key[1]
        cap = len(queue)
        budget = math.floor(queue.head.deadline_ms - now_ms)
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
            result = planner.plan(budget, self.ctx.top_k, start=function, allow=allow)
            self.searches += 1
            self.expanded += result.stats.expanded
            if result.feasible:
                prios = result.priority_list(function)
                lat = {c: planner.profiles[function].latency(c) for c in prios}
                return Choice(tuple(prios), latencies=lat)
        fastest = sorted(planner.options(function, allow), key=lambda o: (o.latency_ms, o.cost))
        prios = tuple(o.config for o in fastest[:FALLBACK_OPTIONS])
        return Choice(prios, reason=None if prios else "no allowed configuration",
                      latencies={o.config: o.latency_ms for o in fastest[:FALLBACK_OPTIONS]})
