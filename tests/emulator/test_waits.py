"""A waiting head is placed again only after an event its wait names (:mod:`esg.waits`,
``Scheduler.reuse_waits``): every step must decide exactly what placing every waiting head again
decides."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import pytest

from esg.emulator import ClusterSpec, Emulation, EmulatorParams
from esg.emulator.levels import load_rate_rps
from esg.emulator.online import OnlineLearning
from esg.emulator.workload import generate
from esg.policies import make_policy
from esg.policies.base import Policy, PolicyContext
from tests.core.helpers import with_worker_memory

POLICIES = ["esg", "infless", "fastgshare", "orion", "aquatope"]
PARAMS = [
    EmulatorParams(warmup_ms=0.0),
    # workers expire and MIG instances change often: nodes change in every way between steps
    EmulatorParams(warmup_ms=0.0, keep_alive_ms=300.0, mig_reconfig_ms=20.0, cold_start_scale=0.2),
]


class _Recorded:
    """The scheduler with each step's result logged (a wrapper: the compiled core's Scheduler does not
    let a method be replaced on an instance)."""

    def __init__(self, scheduler, log: list):
        self._scheduler, self._log = scheduler, log

    def __getattr__(self, name):
        return getattr(self._scheduler, name)

    def step(self, now, snapshot, events=()):
        r = self._scheduler.step(now, snapshot, events)
        self._log.append((now, [(d.batch_id, d.function, tuple(j.job_id for j in d.jobs), d.config, d.fit)
                                for d in r.dispatches], dict(r.waiting), r.wake_at_ms))
        return r


def _decisions(apps, profiles, policy: str | Callable[[PolicyContext], Policy], reuse_waits: bool, seed: int, nodes: int, params: EmulatorParams,
               load: str = "heavy", seconds: float = 3.0, online: bool = False):
    """Every step's full result: (time, dispatches, why each queue waits, wake-up), and the summary."""
    rng = np.random.default_rng(seed)
    requests = generate(list(apps), load_rate_rps(load, apps, nodes), seconds, rng)
    learning = OnlineLearning(profiles, apps, explore_fraction=0.1) if online else None
    tables = learning.tables if learning is not None else profiles
    ctx = PolicyContext(apps, tables)
    em = Emulation(apps, profiles, make_policy(policy, ctx) if isinstance(policy, str) else policy(ctx), requests, rng,
                   ClusterSpec(nodes=nodes, vcpus=16), params, online=learning)
    em.scheduler.reuse_waits = reuse_waits
    log = []
    em.scheduler = _Recorded(em.scheduler, log)
    result = em.run()
    return log, result.summary


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("params", range(len(PARAMS)))
def test_waits_decide_as_placing_every_head_again(policy, params, apps, profiles):
    for seed in (0, 1):
        full = _decisions(apps, profiles, policy, False, seed, 2, PARAMS[params])
        kept = _decisions(apps, profiles, policy, True, seed, 2, PARAMS[params])
        assert len(full[0]) > 100
        assert kept[0] == full[0]
        assert str(kept[1]) == str(full[1])  # str: nan == nan


@pytest.mark.parametrize("policy", ["esg", "infless"])
def test_waits_on_more_nodes_and_lighter_load(policy, apps, profiles):
    for load in ("light", "heavy"):
        full = _decisions(apps, profiles, policy, False, 4, 5, PARAMS[1], load=load, seconds=1.5)
        kept = _decisions(apps, profiles, policy, True, 4, 5, PARAMS[1], load=load, seconds=1.5)
        assert kept == full


def test_waits_with_online_profiles(apps, profiles):
    """Unprofiled functions (the default rule places them), exploration and tables replaced mid-run."""
    sub = {a: dataclasses.replace(apps[a], slo_ms=apps[a].slo_ms * 4) for a in ("image-classification",)}
    truth = {f: profiles[f] for a in sub.values() for f in a.functions}
    full = _decisions(sub, truth, "esg", False, 2, 2, PARAMS[1], seconds=3.0, online=True)
    kept = _decisions(sub, truth, "esg", True, 2, 2, PARAMS[1], seconds=3.0, online=True)
    assert kept == full


def test_a_waiting_head_is_placed_again_only_after_a_change(apps, profiles):
    """What the waits are for: far fewer placements of waiting heads than queue visits."""
    calls = {"place": 0}

    class Counted(Policy):
        """ESG's composition, its placements counted (a compiled policy's methods cannot be replaced)."""

        def place(self, *args, **kwargs):
            calls["place"] += 1
            return super().place(*args, **kwargs)

    def counted(ctx: PolicyContext) -> Policy:
        esg = make_policy("esg", ctx)
        return Counted(esg.name, ctx, esg.proposer, esg.plugins[1:])

    _decisions(apps, profiles, counted, False, 0, 4, PARAMS[0], seconds=1.0)
    every = calls["place"]
    calls["place"] = 0
    _decisions(apps, profiles, counted, True, 0, 4, PARAMS[0], seconds=1.0)
    assert calls["place"] < every / 2


@pytest.mark.parametrize("policy", ["esg", "fastgshare"])
def test_waits_with_gpu_memory_limits(policy, apps, profiles):
    """Two GPU workers to a 1g.5gb instance: new workers' fits move to instances with room or stop idle
    workers (``Fit.evict``), and a kept wait must still decide as placing again."""
    tables = with_worker_memory(profiles, 1968)
    for seed in (0, 1):
        full = _decisions(apps, tables, policy, False, seed, 2, PARAMS[1])
        kept = _decisions(apps, tables, policy, True, seed, 2, PARAMS[1])
        assert kept == full
