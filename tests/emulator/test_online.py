"""``esg emulate --profiles-online``: the scheduler starts unprofiled and learns, as the live service."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from esg.emulator.config import ClusterSpec, EmulatorParams
from esg.emulator.online import OnlineLearning, perturbed
from esg.emulator.runner import Emulation
from esg.events import Request
from esg.policies import make_policy
from esg.policies.base import PolicyContext


def run(apps, truth, online: OnlineLearning | None, seconds: float = 40.0, rps: float = 40.0):
    rng = np.random.default_rng(1)
    names = sorted(apps)
    t, reqs = 0.0, []
    while t < seconds * 1000:
        t += rng.exponential(1000 / rps)
        reqs.append(Request(f"r{len(reqs)}", names[len(reqs) % len(names)], t))
    tables = online.tables if online is not None else truth
    policy = make_policy("esg", PolicyContext(apps, tables))
    em = Emulation(apps, truth, policy, reqs, np.random.default_rng(2), ClusterSpec(4, 16),
                   EmulatorParams(warmup_ms=0.0), online=online)
    return em, em.run()


def test_every_request_of_unprofiled_apps_finishes_and_tables_follow_the_truth(apps, profiles):
    sub = {a: dataclasses.replace(apps[a], slo_ms=apps[a].slo_ms * 4) for a in ("image-classification",)}
    truth = {f: profiles[f] for a in sub.values() for f in a.functions}
    online = OnlineLearning(truth, sub, explore_fraction=0.1)
    assert all(t.extra["source"] == "default" for t in online.tables.values())
    em, result = run(sub, truth, online)
    assert result.unfinished == 0 and result.metrics.failed == 0
    assert result.metrics.completed == len(em.requests)
    for f, table in online.tables.items():
        assert table.extra["source"] == "online" and len(table.entries) >= 3, f
        for e in table.entries:   # learned medians: the true latency times mean-1 noise of CV 0.05
            assert e.latency_ms == pytest.approx(truth[f].latency(e.config), rel=0.15), (f, e.config)
    calls = sum(len(a.functions) for a in sub.values()) * len(em.requests)
    assert 0 < online.explorer.jobs <= 0.1 * calls + online.explorer.burst * len(truth)


def test_a_perturbed_prior_is_corrected_where_the_scheduler_runs(apps, profiles):
    sub = {a: dataclasses.replace(apps[a], slo_ms=apps[a].slo_ms * 4) for a in ("image-classification",)}
    truth = {f: profiles[f] for a in sub.values() for f in a.functions}
    priors = {f: perturbed(p, 1.0, np.random.default_rng(3)) for f, p in truth.items()}
    online = OnlineLearning(truth, sub, priors=priors, explore_fraction=0.0)
    run(sub, truth, online)
    for f, table in online.tables.items():
        measured = [e for e in table.entries if "samples" in e.extra and isinstance(e.extra["samples"], int)
                    and "p95_ms" in e.extra]
        assert measured, f
        for e in measured:
            assert e.latency_ms == pytest.approx(truth[f].latency(e.config), rel=0.15)
