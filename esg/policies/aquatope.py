"""Aquatope (ASPLOS'23) resource configuration: constrained Bayesian optimisation, pre-planned.

Aquatope (``docs/baselines.md``, Aquatope) searches per-stage resource configurations with constrained BO: the
objective is cost, the constraint "end-to-end latency - QoS <= 0", starting from random points and then
model-guided rounds. Here the black box is the profile-based latency model (each stage's profiled
latency times the P95 of the execution noise, longest path through the DAG) and the cost model; the
optimiser is optuna's TPE sampler with ``constraints_func`` (seeded), run **once per app and SLO level
before the workload starts** (offline: it costs no scheduling time). The best feasible trial is fixed
for every request; when no trial is feasible, the one with the smallest violation.
"""

from __future__ import annotations

import functools
import warnings

import optuna

from esg.cluster import ClusterSnapshot
from esg.cost import config_cost
from esg.model import App, Config
from esg.policies import register
from esg.policies.base import Choice, Policy, PolicyContext
from esg.policies.common import app_latency, p95_factor
from esg.queues import AfwQueue

N_STARTUP = 10
N_TRIALS = 70
"""10 random initial points then 60 guided ones (Aquatope: 10 random + 20 rounds of 3)."""
NOISE_CV = 0.05


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


@register("aquatope")
class AquatopePolicy(Policy):
    name = "aquatope"

    def __init__(self, ctx: PolicyContext, n_trials: int = N_TRIALS, noise_cv: float = NOISE_CV):
        super().__init__(ctx)
        self.p95 = p95_factor(noise_cv)
        self.n_trials = n_trials
        self.evaluations = 0
        self.plans: dict[str, dict[str, Config]] = {}
        self.predicted: dict[str, tuple[float, float]] = {}
        """app -> (cost, P95 latency) of its plan."""
        for name in sorted(ctx.apps):
            self.plans[name] = self.optimise(ctx.apps[name])

    def _options(self, f: str) -> list[Config]:
        return sorted((e.config for e in self.ctx.profiles[f].entries if self.ctx.spec(f).allows(e.config)),
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
