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
* placement maximises packing (fullest node that fits first);
* pre-warming and keep-alive by LSTH (long-short-term histograms), a stand-in with its inputs and
  horizon: the idle times of a function (here the gaps between its app's requests: every function of
  an app runs once per request) go into a long-term histogram (every gap seen) and a short-term one
  (the last 64 gaps), both in one-minute bins. Each gives a pre-warm window (its 5th percentile) and a keep-alive
  window (99th percentile less the pre-warm window); the two are combined the cautious way (the
  earlier pre-warm, the longer keep-alive), each with a 10 % margin. After a batch, a worker whose
  pre-warm window is shorter than a re-warm is kept for both windows; otherwise it is released after
  the batch and a new one is pre-warmed to be ready at the pre-warm window, kept for the keep-alive
  window (the histogram policy INFless builds on).
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Sequence
from typing import Final

from esg.cluster import ClusterSnapshot
from esg.events import Dispatch
from esg.model import App, Config
from esg.policies import register
from esg.policies.base import (
    Choice,
    Policy,
    PolicyContext,
    Starting,
    apps_sharing,
    prewarm_start_ms,
    rewarm_ms,
)
from esg.policies.common import BacklogGate, PackingOrder, packing_order, stage_shares, weighted_resource
from esg.policies.points import WarmUps
from esg.prewarm import Timed, WarmUp, idle_of_kind, smallest_of_kind
from esg.queues import AfwQueue

RATE_WINDOW_MS: Final = 10_000.0
BIN_MS: Final = 60_000.0
"""The histograms' bin width: one minute, as in the original (whose windows are whole minutes, so a kept
worker is never released sooner than a minute after its last call)."""
SHORT_TERM: Final = 64
HEAD: Final = 0.05
TAIL: Final = 0.99
MARGIN: Final = 0.10
MIN_GAPS: Final = 16
"""Fewer idle times than this: no windows yet (the platform's keep-alive, no pre-warm)."""


class Lsth:
    """One function's long- and short-term histograms of idle times, and the windows they give."""

    def __init__(self) -> None:
        self.long: Counter[int] = Counter()
        self.short: deque[int] = deque(maxlen=SHORT_TERM)
        self.n = 0
        self._last: float | None = None
        self._windows: tuple[float, float] | None = None

    def add(self, t_ms: float) -> None:
        if self._last is not None and t_ms >= self._last:
            gap = t_ms - self._last
            self.long[int(gap // BIN_MS)] += 1
            self.short.append(int(gap // BIN_MS))
            self.n += 1
            self._windows = None
        self._last = t_ms

    def windows(self) -> tuple[float, float] | None:
        """(pre-warm window, keep-alive window) in ms, or None with too few idle times seen."""
        if self.n < MIN_GAPS:
            return None
        if self._windows is None:
            head_l, tail_l = self._long_q(HEAD) * BIN_MS, (self._long_q(TAIL) + 1) * BIN_MS
            short = sorted(self.short)
            head_s = short[int(HEAD * len(short))] * BIN_MS
            tail_s = (short[min(len(short) - 1, int(TAIL * len(short)))] + 1) * BIN_MS
            head = min(head_l, head_s) * (1 - MARGIN)
            tail = max(tail_l, tail_s) * (1 + MARGIN)
            self._windows = (head, max(tail - head, 0.0))
        return self._windows

    def _long_q(self, q: float) -> int:
        """The bin of the ``q`` quantile of the long-term histogram."""
        target, seen = q * self.n, 0
        for b in sorted(self.long):
            seen += self.long[b]
            if seen > target:
                return b
        return max(self.long)


class InflessProposer:
    """INFless's estimator: configurations by CRE within the function's throughput window, batches that
    wait at most their timeout."""

    def __init__(self, ctx: PolicyContext, overhead_ms: float = 0.0):
        self.ctx = ctx
        self.expanded = 0
        self.overhead_ms = overhead_ms
        """Taken off the SLO per function on the app's longest path before it is shared out (0: INFless's
        own shares, on run times alone)."""
        self.shares = {a: stage_shares(app, ctx.profiles, app.slo_ms, overhead_ms) for a, app in ctx.apps.items()}
        self._arrivals: dict[str, deque[float]] = {a: deque() for a in ctx.apps}
        self._candidates = {(a, f): self.candidates(a, f) for a, app in ctx.apps.items() for f in app.functions}

    def work_units(self) -> int:
        return self.expanded

    def on_app_added(self, ctx: PolicyContext, app: App) -> None:
        self.ctx = ctx
        self._arrivals.setdefault(app.name, deque())
        for a in apps_sharing(ctx, app):
            self.shares[a.name] = stage_shares(a, ctx.profiles, a.slo_ms, self.overhead_ms)
            self._candidates = {k: v for k, v in self._candidates.items() if k[0] != a.name}
            self._candidates.update({(a.name, f): self.candidates(a.name, f) for f in a.functions})
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



class LsthWarmPool:
    """INFless's LSTH pre-warming and keep-alive, per app."""

    def __init__(self, ctx: PolicyContext, starting: Starting):
        self.ctx = ctx
        self.starting = starting
        self.lsth: dict[str, Lsth] = {}
        self.running: Counter[tuple[str, str]] = Counter()
        """Batches in flight per AFW queue (a running worker needs no pre-warm)."""
        self._pending = Timed()

    def on_app_added(self, ctx: PolicyContext, app: App) -> None:
        self.ctx = ctx

    def on_arrival(self, request, app: App, now_ms: float) -> None:
        self.lsth.setdefault(app.name, Lsth()).add(request.arrival_ms)

    def on_dispatch(self, dispatch: Dispatch) -> None:
        self.running[(dispatch.app, dispatch.function)] += 1

    def on_done(self, dispatch: Dispatch) -> None:
        self.running[(dispatch.app, dispatch.function)] -= 1

    def _windows(self, app: str) -> tuple[float, float] | None:
        h = self.lsth.get(app)
        return None if h is None else h.windows()

    def _unloads(self, app: str, function: str) -> bool:
        """Whether a worker of ``function`` is released after its batch and pre-warmed again: its
        pre-warm window leaves time for a re-warm."""
        w = self._windows(app)
        return w is not None and w[0] > rewarm_ms(self.ctx, function)

    def keep_alive_ms(self, app: str, function: str, now_ms: float) -> float | None:
        w = self._windows(app)
        if w is None:
            return None
        return 0.0 if self._unloads(app, function) else w[0] + w[1]

    def wake_ms(self) -> float | None:
        return self._pending.next_ms()

    def prewarm(self, now_ms: float, snapshot: ClusterSnapshot, dispatched: Sequence[Dispatch],
                asked: WarmUps) -> None:
        """A released worker comes back at its pre-warm window after its batch (planned end), ready for
        the next call, and waits for the keep-alive window."""
        for d in dispatched:
            if not self._unloads(d.app, d.function):
                continue
            head, keep = self._windows(d.app)  # type: ignore[misc]
            end = now_ms + (d.planned_latency_ms or 0.0)
            start = max(now_ms, prewarm_start_ms(self.ctx, d.function, d.config.gpu is not None, end + head))
            config = smallest_of_kind(self.ctx.profiles[d.function], d.config)
            self._pending.add(start, WarmUp(d.app, d.function, config, keep, ready_by_ms=end + head))
        out: list[WarmUp] = []
        for want in self._pending.due(now_ms):
            kind = want.config.gpu
            if (self.running[(want.app, want.function)] + idle_of_kind(snapshot, want.function, kind)
                    + self.starting.warming.count(want.function, now_ms, kind)
                    + sum(1 for w in out if w.function == want.function and w.config.gpu == kind)) > 0:
                continue  # a worker runs, or one of that kind waits (or starts) already
            out.append(WarmUp(want.app, want.function, want.config, want.keep_alive_ms,
                              preferred=tuple(packing_order(snapshot, gpu=True)), ready_by_ms=want.ready_by_ms))
        for want in out:
            asked.add(want)


@register("infless")
def infless_policy(ctx: PolicyContext) -> Policy:
    """INFless: its estimator, bin-packing, LSTH pre-warming and keep-alive; the generic backlog
    scale-out gate (its rate-based autoscaler is not ported: docs/baselines.md)."""
    return _infless("infless", ctx, 0.0)


@register("infless-hop-shares")
def infless_hop_shares_policy(ctx: PolicyContext) -> Policy:
    """INFless with its SLO shares taken from the SLO less the per-batch overhead of every function on
    the app's longest path (``PolicyContext.stage_overhead_ms``, which ESG and Aquatope plan with): the
    comparison's second port of INFless, so that ESG is measured against the stronger of the two."""
    return _infless("infless-hop-shares", ctx, ctx.stage_overhead_ms)


def _infless(name: str, ctx: PolicyContext, overhead_ms: float) -> Policy:
    starting = Starting(ctx)
    return Policy(name, ctx, InflessProposer(ctx, overhead_ms),
                  [PackingOrder(), BacklogGate(), starting, LsthWarmPool(ctx, starting)])
