"""ESG: ESG_1Q (A* with dual-blade pruning and dominator-based SLO distribution) per AFW queue.

For the head job of a queue the budget is what is left of its request's SLO; the search covers the
job's function and every function after it in the app, with batch sizes capped at the jobs waiting in
the queue (ESG batches what has arrived, it does not hold jobs back to fill a batch). The distinct
configurations of the queue's function across the K cheapest paths form the priority list that
ESG_Dispatch walks. When no path meets the budget (the request is already late), every configuration
of the function is tried, fastest first, to lose as little time as possible: the first that fits the
cluster now runs (a list cut to the few fastest names only the largest MIG instances, which rarely fit
beside busy ones, and the backlog never drains).

Plans are cached (:mod:`esg.policies.plan_cache`) per (app, function, batch cap) over the budgets,
floored to 1 ms (which keeps the plan on the safe side), for which planning again would give the same
paths: from the planned budget down to the slowest returned path's latency when the search covered the
whole (sub-)app at once, and for exactly the planned budget when the budget was split into group
shares. A plain action's queue is then planned once, not once per millisecond of its budget.

ESG_Dispatch walks that priority list with locality: the app's home node for entry functions, the
predecessor's node for the others, then the rest by free capacity. Warm workers, start-up against the
budget, the scale-out rule and the fallback are the machinery every policy shares
(:mod:`esg.placement`); what is ESG's own is the priority list and the locality order.
"""

from __future__ import annotations

import math

from esg.cluster import ClusterSnapshot
from esg.model import App, Config
from esg.planner import Planner
from esg.policies import register
from esg.policies.base import Choice, Policy, PolicyContext
from esg.policies.plan_cache import PlanCache
from esg.queues import AfwQueue


@register("esg")
class EsgPolicy(Policy):
    name = "esg"

    def __init__(self, ctx: PolicyContext, exact: bool = False):
        super().__init__(ctx)
        self.exact = exact
        self.planners = {name: self._planner(app) for name, app in ctx.apps.items()}
        self._plans = PlanCache()
        self.searches = 0
        self.expanded = 0

    def _planner(self, app: App) -> Planner:
        return Planner(app, {f: self.ctx.profiles[f] for f in app.functions}, self.ctx.prices,
                       self.ctx.max_group, self.exact)

    def on_app_added(self, app: App) -> None:
        self.planners[app.name] = self._planner(app)
        self._plans.drop_app(app.name)

    def node_preference(self, app: App, function: str, snapshot: ClusterSnapshot) -> None:
        """ESG_Dispatch's locality order: the app's home node for entry functions, the predecessor's
        node for the others."""
        return None

    def choose(self, app: App, queue: AfwQueue, now_ms: float, snapshot: ClusterSnapshot) -> Choice:
        function = queue.key[1]
        cap = len(queue)
        budget = max(0, math.floor(queue.head.deadline_ms - now_ms))  # every late job gets the fastest
        key = (app.name, function, cap)
        choice = self._plans.get(key, budget)
        if choice is None:
            choice, valid_from = self._plan(app, function, cap, budget)
            self._plans.put(key, budget, choice, valid_from)
        return choice

    def _plan(self, app: App, function: str, cap: int, budget: float) -> tuple[Choice, float | None]:
        """The choice for a budget, and the lowest budget for which it is the same (None: unknown)."""
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
                return Choice(tuple(prios), latencies=lat), result.valid_from_ms
        # no path meets the budget: every configuration, fastest first, the same for every lower budget
        fastest = sorted(planner.options(function, allow, cap), key=lambda o: (o.latency_ms, o.cost))
        prios = tuple(o.config for o in fastest)
        return Choice(prios, reason=None if prios else "no allowed configuration",
                      latencies={o.config: o.latency_ms for o in fastest}), 0.0

