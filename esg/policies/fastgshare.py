"""FaST-GShare (ICPP'23) adapted to MIG slices: per function, not DAG-aware, no batching.

FaST-Scheduler's rule (``docs/baselines.md``, FaST-GShare): among the configurations that meet the function's
latency target, take the one with the **highest throughput per resource** (requests/s per weighted
resource, ties to the cheaper), and place it to **pack GPU nodes** (fullest node that fits first). The
original design does not batch, so every configuration has batch 1. The function's latency target is
its share of the app SLO (proportional to its fastest latency), as for INFless.
"""

from __future__ import annotations

from esg.cluster import ClusterSnapshot
from esg.cost import config_cost
from esg.model import App, Config
from esg.policies import register
from esg.policies.base import Choice, Policy, PolicyContext, apps_sharing
from esg.policies.common import BacklogGate, PackingOrder, stage_shares, weighted_resource
from esg.queues import AfwQueue


class FastGShareProposer:
    """FaST-Scheduler's configuration rule per function."""

    def __init__(self, ctx: PolicyContext, overhead_ms: float = 0.0):
        self.ctx = ctx
        self.expanded = 0
        self.overhead_ms = overhead_ms
        """Taken off the SLO per function on the app's longest path before it is shared out (0: the
        shares on run times alone, as INFless's)."""
        self._ranked = {(a, f): self.ranked(app, f) for a, app in ctx.apps.items() for f in app.functions}

    def work_units(self) -> int:
        return self.expanded

    def on_app_added(self, ctx: PolicyContext, app: App) -> None:
        self.ctx = ctx
        for a in apps_sharing(ctx, app):
            self._ranked = {k: v for k, v in self._ranked.items() if k[0] != a.name}
            self._ranked.update({(a.name, f): self.ranked(a, f) for f in a.functions})

    def ranked(self, app: App, function: str) -> list[tuple[Config, float]]:
        """Batch-1 configs meeting the stage target, best throughput per resource first; if none meets
        it, the fastest ones."""
        target = stage_shares(app, self.ctx.profiles, app.slo_ms, self.overhead_ms)[function]
        prof = self.ctx.profiles[function]
        ones = [e for e in prof.entries if e.config.batch == 1 and self.ctx.spec(function).allows(e.config)]

        def key(e):
            tput = 1000.0 / e.latency_ms
            return (-tput / weighted_resource(prof.gpu_model, e.config),
                    config_cost(self.ctx.prices, prof.gpu_model, e.config, e.latency_ms), e.config)

        ok = sorted((e for e in ones if e.latency_ms <= target), key=key)
        if not ok:
            ok = sorted(ones, key=lambda e: (e.latency_ms, e.config))
        return [(e.config, e.latency_ms) for e in ok[:8]]

    def choose(self, app: App, queue: AfwQueue, now_ms: float, snapshot: ClusterSnapshot) -> Choice:
        self.expanded += 1
        ranked = self._ranked[(app.name, queue.key[1])]
        return Choice(tuple(c for c, _ in ranked), latencies=dict(ranked))


@register("fastgshare")
def fastgshare_policy(ctx: PolicyContext) -> Policy:
    """FaST-GShare: its configuration rule, placed to pack GPU nodes; the generic backlog scale-out gate
    (its autoscaler is not ported: docs/baselines.md)."""
    return Policy("fastgshare", ctx, FastGShareProposer(ctx), [PackingOrder(), BacklogGate()])


@register("fastgshare-hop-shares")
def fastgshare_hop_shares_policy(ctx: PolicyContext) -> Policy:
    """FaST-GShare with its latency targets taken from the SLO less the per-batch overhead of every
    function on the app's longest path (as ``infless-hop-shares``)."""
    return Policy("fastgshare-hop-shares", ctx, FastGShareProposer(ctx, ctx.stage_overhead_ms),
                  [PackingOrder(), BacklogGate()])
