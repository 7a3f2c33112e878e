"""INFless (ASPLOS'22) adapted to MIG slices: per function, not DAG-aware, with batching.

Faithful to INFless's estimator and scheduler (``docs/baselines.md``, INFless; ``gpu/controller/estimator.go``
and ``scheduler.go``):

* each function gets a share S of the app SLO (proportional to its fastest latency);
* a configuration with batch b > 1 must execute within **S / 2** (the other half is for filling the
  batch), with b = 1 within S;
* each feasible configuration has a throughput window [rps_min, rps_max] with rps_max = 1000 b / T and
  rps_min = 1000 b / (S - T); the configurations whose window holds the function's observed arrival rate
  are preferred, best CRE (requests/s per weighted resource: 64 per vCPU, 142 per GPU-SM percent) first;
* a batch waits for b jobs at most the **batch timeout S - T** after its first job arrived;
* placement maximises packing (fullest node that fits first).
"""

from __future__ import annotations

from collections import deque

from esg.cluster import ClusterSnapshot
from esg.model import App, Config
from esg.policies import register
from esg.policies.base import Choice, Policy, PolicyContext
from esg.policies.common import packing_order, stage_shares, weighted_resource
from esg.queues import AfwQueue

RATE_WINDOW_MS = 10_000.0


@register("infless")
class InflessPolicy(Policy):
    name = "infless"

    def __init__(self, ctx: PolicyContext):
        super().__init__(ctx)
        self.expanded = 0
        self.shares = {a: stage_shares(app, ctx.profiles, app.slo_ms) for a, app in ctx.apps.items()}
        self._arrivals: dict[str, deque[float]] = {a: deque() for a in ctx.apps}
        self._candidates = {(a, f): self.candidates(a, f) for a, app in ctx.apps.items() for f in app.functions}

    def candidates(self, app: str, function: str) -> list[tuple[float, float, float, Config]]:
        """(CRE, T, timeout, config) of every config meeting its execution budget, best CRE first."""
        s = self.shares[app][function]
        prof = self.ctx.profiles[function]
        out = []
        for e in prof.entries:
            c, t = e.config, e.latency_ms
            if not self.ctx.spec(function).allows(c):
                continue
            budget = s / 2 if c.batch > 1 else s
            if t > budget:
                continue
            cre = (1000.0 * c.batch / t) / weighted_resource(prof.gpu_model, c)
            out.append((cre, t, s - t, c))
        out.sort(key=lambda x: (-x[0], x[1], x[3]))
        return out

    def on_arrival(self, request, app: App, now_ms: float) -> None:
        q = self._arrivals[app.name]
        q.append(now_ms)
        while q and q[0] < now_ms - RATE_WINDOW_MS:
            q.popleft()

    def rate_rps(self, app: str, now_ms: float) -> float:
        q = self._arrivals[app]
        span = min(RATE_WINDOW_MS, max(now_ms, 1000.0))
        return 1000.0 * len(q) / span

    def choose(self, app: App, queue: AfwQueue, now_ms: float, snapshot: ClusterSnapshot) -> Choice:
        function = queue.key[1]
        cands = self._candidates[(app.name, function)]
        self.expanded += 1
        if not cands:  # no config meets even the share: run the fastest (INFless would reject)
            prof = self.ctx.profiles[function]
            fastest = min(prof.entries, key=lambda e: (e.latency_ms, e.config))
            return Choice((fastest.config,), latencies={fastest.config: fastest.latency_ms})
        rate = self.rate_rps(app.name, now_ms)
        s = self.shares[app.name][function]
        in_window = [x for x in cands if 1000.0 * x[3].batch / (s - x[1]) <= rate <= 1000.0 * x[3].batch / x[1]
                     or x[3].batch == 1 and rate <= 1000.0 / x[1]]
        ordered = in_window + [x for x in cands if x not in in_window]
        best = ordered[0]
        cfg, timeout = best[3], best[2]
        waited = now_ms - queue.head.enqueued_ms
        if len(queue) < cfg.batch and waited < timeout:
            return Choice((), reason=f"filling a batch of {cfg.batch}", retry_at_ms=queue.head.enqueued_ms + timeout)
        prios = [x for x in ordered if x[3].batch <= max(len(queue), 1)] or ordered
        return Choice(tuple(x[3] for x in prios[:8]), latencies={x[3]: x[1] for x in prios[:8]})

    def node_preference(self, app: App, function: str, snapshot: ClusterSnapshot) -> list[str]:
        return packing_order(snapshot, gpu=True)
