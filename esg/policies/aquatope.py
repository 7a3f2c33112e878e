"""Aquatope (ASPLOS'23) resource configuration: constrained Bayesian optimisation, pre-planned.

Aquatope (``docs/baselines.md``, Aquatope) searches per-stage resource configurations with constrained BO: the
objective is cost, the constraint "end-to-end latency - QoS <= 0", starting from random points and then
model-guided rounds. Here the black box is the profile-based latency model (each stage's profiled
latency times the P95 of the execution noise, longest path through the DAG) and the cost model; the
optimiser is optuna's TPE sampler with ``constraints_func`` (seeded), run **once per app and SLO level
before the workload starts** (offline: it costs no scheduling time). Aquatope's containers run one
invocation at a time, so the search space holds **batch-1 configurations only**: the cost the objective
weighs is what one invocation -- the batch the queue delivers -- costs. The best feasible trial is fixed
for every request; when no trial is feasible, the one with the smallest violation.

Pre-warming and keep-alive (Aquatope's prediction-driven warm pool), a stand-in with the original's
inputs and horizon: Aquatope predicts how many containers each function needs in the next interval with
an uncertainty-aware (Bayesian LSTM) model and keeps that many warm, over-provisioning by the
prediction's uncertainty. Here the prediction is an exponentially weighted mean and standard deviation
of each app's **peak rate** per interval (its calls in the busiest second of the interval; every
function of an app runs once per request), taken at its upper bound, mean + 1.645 sd; the pool of a
stage is the **concurrency** that rate keeps -- the 95th percentile of a Poisson number of invocations
in flight with mean rate x the stage's P95 latency (hop included), at least one while calls are
predicted. At each interval boundary the pool of each function is topped up (workers running, idle of
the planned kind, or starting count) by pre-warms placed by the platform (every node by free
capacity). The keep-alive follows the prediction: two intervals while at least one call is predicted,
else one.

Scaling beyond the pool is the platform's in the original; here it is the generic scale-out rule every
baseline without an autoscaler of its own gets (:class:`esg.policies.common.BacklogGate`).
"""

from __future__ import annotations

import functools
import math
import warnings
from collections import Counter
from collections.abc import Sequence

import optuna

from esg.cluster import ClusterSnapshot
from esg.cost import config_cost
from esg.events import Dispatch
from esg.model import App, Config
from esg.policies import register
from esg.policies.base import Choice, Policy, PolicyContext, Starting, apps_sharing
from esg.policies.common import BacklogGate, app_latency, p95_factor
from esg.policies.points import WarmUps
from esg.prewarm import WarmUp, idle_of_kind, smallest_of_kind
from esg.queues import AfwQueue

N_STARTUP = 10
N_TRIALS = 70
"""10 random initial points then 60 guided ones (Aquatope: 10 random + 20 rounds of 3)."""
NOISE_CV = 0.05
INTERVAL_MS = 10_000.0
"""The prediction interval (and horizon: one interval ahead). The original predicts per minute of its
traces; here 10 s, so that a start-up (seconds) ends within the interval it was made for and a 60 s
run sees several predictions (the shipped trace replays a minute in 5 s by default)."""
ALPHA, Z = 0.3, 1.645
"""The forecast's smoothing weight and the upper bound's z-score."""
PEAK_MS = 1000.0
"""The window of the peak rate: the original's container pool scheduler decides once a second."""
POOL_QUANTILE = 0.95
"""The pool covers this quantile of the invocations in flight (the planning percentile, P95)."""


def poisson_quantile(mean: float, q: float) -> int:
    """The smallest n with P(X <= n) >= q for X ~ Poisson(mean)."""
    if mean <= 0.0:
        return 0
    term = math.exp(-mean)
    total, n = term, 0
    while total < q and n < 10_000:
        n += 1
        term *= mean / n
        total += term
    return n


class Forecast:
    """One app's per-interval request counts and peak rates, and the prediction of the next interval's."""

    def __init__(self) -> None:
        self.interval = -1
        self.count = 0
        self.mean = 0.0
        self.var = 0.0
        self.second = -1
        self.in_second = 0
        self.peak = 0
        """Calls in the busiest second of the open interval so far."""
        self.peak_mean = 0.0
        self.peak_var = 0.0

    def add(self, now_ms: float) -> None:
        """One call at ``now_ms`` (its interval advanced to already)."""
        second = int(now_ms // PEAK_MS)
        if second != self.second:
            self.second, self.in_second = second, 0
        self.in_second += 1
        self.count += 1
        self.peak = max(self.peak, self.in_second)

    def advance(self, interval: int) -> None:
        """Close the intervals before ``interval`` (the empty ones in between count as 0 calls)."""
        if self.interval < 0:
            self.interval = interval
            return
        while self.interval < interval:
            err = self.count - self.mean
            self.mean += ALPHA * err
            self.var = (1 - ALPHA) * (self.var + ALPHA * err * err)
            perr = self.peak - self.peak_mean
            self.peak_mean += ALPHA * perr
            self.peak_var = (1 - ALPHA) * (self.peak_var + ALPHA * perr * perr)
            self.count = 0
            self.peak = 0
            self.interval += 1

    def upper(self) -> float:
        """The predicted calls in the next interval, uncertainty included."""
        return self.mean + Z * math.sqrt(self.var)

    def peak_rate_per_ms(self) -> float:
        """The predicted calls per millisecond in the next interval's busiest second, uncertainty included."""
        return max(0.0, self.peak_mean + Z * math.sqrt(self.peak_var)) / PEAK_MS


def _quiet_optuna(fn):
    """Run ``fn`` with optuna's per-trial INFO logging off, restoring the caller's verbosity after."""

    @functools.wraps(fn)
    def quiet(*args, **kwargs):
        verbosity = optuna.logging.get_verbosity()
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        try:
            return fn(*args, **kwargs)
        finally:
            optuna.logging.set_verbosity(verbosity)

    return quiet


class AquatopeProposer:
    """Aquatope's configurations: constrained BO per app, before the workload starts."""

    def __init__(self, ctx: PolicyContext, n_trials: int = N_TRIALS, noise_cv: float = NOISE_CV):
        self.ctx = ctx
        self.p95 = p95_factor(noise_cv)
        self.n_trials = n_trials
        self.evaluations = 0
        self.plans: dict[str, dict[str, Config]] = {}
        self.predicted: dict[str, tuple[float, float]] = {}
        """app -> (cost, P95 latency) of its plan."""
        for name in sorted(ctx.apps):
            self.plans[name] = self.optimise(ctx.apps[name])

    def work_units(self) -> int:
        return 0  # planned offline: no scheduling time

    def on_app_added(self, ctx: PolicyContext, app: App) -> None:
        self.ctx = ctx
        for a in apps_sharing(ctx, app):
            self.plans[a.name] = self.optimise(a)

    def _options(self, f: str) -> list[Config]:
        return sorted((e.config for e in self.ctx.profiles[f].entries
                       if e.config.batch == 1 and self.ctx.spec(f).allows(e.config)),
                      key=lambda c: (c.gpu or "", c.batch, c.vcpus))

    def evaluate(self, app: App, configs: dict[str, Config]) -> tuple[float, float]:
        """(cost per request, P95 end-to-end latency) of a configuration vector."""
        self.evaluations += 1
        lat = {f: self.ctx.profiles[f].latency(c) for f, c in configs.items()}
        cost = sum(config_cost(self.ctx.prices, self.ctx.profiles[f].gpu_model, c, lat[f])
                   for f, c in configs.items())
        return cost, app_latency(app, {f: v * self.p95 for f, v in lat.items()})

    @_quiet_optuna
    def optimise(self, app: App) -> dict[str, Config]:
        options = {f: self._options(f) for f in app.functions}

        def objective(trial: optuna.Trial) -> float:
            configs = {f: options[f][trial.suggest_int(f, 0, len(options[f]) - 1)] for f in app.functions}
            cost, lat = self.evaluate(app, configs)
            trial.set_user_attr("violation", lat - app.slo_ms)
            trial.set_user_attr("latency", lat)
            return cost

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sampler = optuna.samplers.TPESampler(
                seed=self.ctx.seed, n_startup_trials=N_STARTUP,
                constraints_func=lambda t: (t.user_attrs["violation"],))
        study = optuna.create_study(direction="minimize", sampler=sampler)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # constraints_func: deprecated in optuna 5, kept
            warnings.simplefilter("ignore", UserWarning)
            study.optimize(objective, n_trials=self.n_trials)
        feasible = [t for t in study.trials if t.user_attrs["violation"] <= 0]
        best = (min(feasible, key=lambda t: (t.value, t.number)) if feasible
                else min(study.trials, key=lambda t: (t.user_attrs["violation"], t.number)))
        self.predicted[app.name] = (best.value, best.user_attrs["latency"])
        return {f: options[f][best.params[f]] for f in app.functions}

    def choose(self, app: App, queue: AfwQueue, now_ms: float, snapshot: ClusterSnapshot) -> Choice:
        c = self.plans[app.name][queue.key[1]]
        return Choice((c,), latencies={c: self.ctx.profiles[queue.key[1]].latency(c)})



class ForecastPool:
    """Aquatope's prediction-driven warm pool and keep-alive."""

    def __init__(self, ctx: PolicyContext, proposer: AquatopeProposer, starting: Starting):
        self.ctx = ctx
        self.proposer = proposer
        self.starting = starting
        self.forecasts: dict[str, Forecast] = {}
        self.running: Counter[tuple[str, str]] = Counter()
        """Batches in flight per AFW queue (their workers count in the pool)."""
        self._next_ms: float | None = None

    def on_app_added(self, ctx: PolicyContext, app: App) -> None:
        self.ctx = ctx

    def on_dispatch(self, dispatch: Dispatch) -> None:
        self.running[(dispatch.app, dispatch.function)] += 1

    def on_done(self, dispatch: Dispatch) -> None:
        self.running[(dispatch.app, dispatch.function)] -= 1

    def on_arrival(self, request, app: App, now_ms: float) -> None:
        f = self.forecasts.setdefault(app.name, Forecast())
        f.advance(int(now_ms // INTERVAL_MS))
        f.add(now_ms)
        if self._next_ms is None:
            self._next_ms = (int(now_ms // INTERVAL_MS) + 1) * INTERVAL_MS

    def pool_size(self, app: str, function: str) -> int:
        """The workers of ``function`` the next interval's predicted peak concurrency keeps busy: the
        :data:`POOL_QUANTILE` of the invocations in flight at the predicted peak rate (Little's law: rate
        x the stage's P95 latency and hop, Poisson arrivals), at least one while calls are predicted."""
        f = self.forecasts.get(app)
        if f is None or f.upper() < 0.5:
            return 0
        c = self.proposer.plans[app][function]
        in_flight = f.peak_rate_per_ms() * (self.ctx.profiles[function].latency(c) * self.proposer.p95
                                             + self.ctx.stage_overhead_ms)
        return max(1, poisson_quantile(in_flight, POOL_QUANTILE))

    def keep_alive_ms(self, app: str, function: str, now_ms: float) -> float | None:
        f = self.forecasts.get(app)
        return 2 * INTERVAL_MS if f is not None and f.upper() >= 1.0 else INTERVAL_MS

    def prewarm(self, now_ms: float, snapshot: ClusterSnapshot, dispatched: Sequence[Dispatch],
                asked: WarmUps) -> None:
        if self._next_ms is None or now_ms < self._next_ms:
            return
        interval = int(now_ms // INTERVAL_MS)
        self._next_ms = (interval + 1) * INTERVAL_MS
        busy = False
        for name in sorted(self.forecasts):
            self.forecasts[name].advance(interval)
            app = self.ctx.apps[name]
            for g in app.topo_order:
                want = self.pool_size(name, g)
                if want <= 0:
                    continue
                busy = True
                c = self.proposer.plans[name][g]
                have = (self.running[(name, g)] + idle_of_kind(snapshot, g, c.gpu)
                        + self.starting.warming.count(g, now_ms, c.gpu))
                config = smallest_of_kind(self.ctx.profiles[g], c)
                keep = self.keep_alive_ms(name, g, now_ms)
                for _ in range(want - have):
                    asked.add(WarmUp(name, g, config, keep, ready_by_ms=now_ms + INTERVAL_MS))
        if not busy:
            self._next_ms = None  # nothing predicted: asked again at the next call

    def wake_ms(self) -> float | None:
        return self._next_ms


@register("aquatope")
def aquatope_policy(ctx: PolicyContext) -> Policy:
    """Aquatope: BO-planned configurations placed by free capacity, a prediction-driven warm pool."""
    proposer = AquatopeProposer(ctx)
    starting = Starting(ctx)
    return Policy("aquatope", ctx, proposer, [BacklogGate(), starting, ForecastPool(ctx, proposer, starting)])
