"""A policy told a new MIG change time (the live service's learned figure, esg/startup_costs.py) plans
with it everywhere at once: its context, the placer's start-up costs, ESG's start-ups, the rules'
windows -- as a policy built with that figure would -- and the scheduler places kept waits again."""

from __future__ import annotations

import math

import pytest

from esg.events import Arrival, Request
from esg.model import App
from esg.policies import PolicyContext, make_policy
from esg.policies.base import rewarm_ms, startup_ms
from esg.policies.rules.pool_sizing import PoolSizing
from esg.scheduler import Scheduler

from .helpers import nodes, profile

CHAIN = App("chain", 3000.0, ("a", "b"), (("a", "b"),))
OTHER = App("other", 3000.0, ("b",), ())
ROWS = [(1, 1, "1g.5gb", 5.0), (1, 2, None, 8.0)]
POLICIES = ["esg", "esg-paper", "infless", "fastgshare", "orion", "aquatope"]


def scheduler(policy: str, mig_reconfig_ms: float = 2000.0) -> Scheduler:
    profiles = {"a": profile("a", ROWS, cold_start_ms=300.0), "b": profile("b", ROWS, cold_start_ms=500.0)}
    apps = {"chain": CHAIN, "other": OTHER}
    return Scheduler(apps, make_policy(policy, PolicyContext(apps, profiles, mig_reconfig_ms=mig_reconfig_ms)),
                     prewarm=True)


@pytest.mark.parametrize("policy", POLICIES)
def test_a_new_mig_change_time_reaches_every_part_of_the_policy(policy):
    s = scheduler(policy)
    pol = s.policy
    s.step(0.0, nodes(2), [Arrival(Request("r0", "chain", 0.0)), Arrival(Request("r1", "other", 0.0))])
    before = pol.placer._startup_of("b", pol.ctx.profiles["b"])
    assert before.mig_reconfig_ms == 2000.0
    s.use_startup_costs(450.0)
    assert pol.ctx.mig_reconfig_ms == 450.0
    assert pol.placer.ctx is pol.ctx and all(getattr(p, "ctx", pol.ctx) is pol.ctx for p in pol.plugins), \
        "the placer and every plugin have the new context"
    fresh = scheduler(policy, 450.0).policy
    for f in ("a", "b"):
        mine = pol.placer._startup_of(f, pol.ctx.profiles[f])
        assert mine == fresh.placer._startup_of(f, fresh.ctx.profiles[f]) and mine.mig_reconfig_ms == 450.0
        assert startup_ms(pol.ctx, f, True) == startup_ms(fresh.ctx, f, True)
        assert rewarm_ms(pol.ctx, f) == rewarm_ms(fresh.ctx, f)
    if policy.startswith("esg"):
        assert pol.proposer.startup_ms("b") == (500.0, 950.0) == fresh.proposer.startup_ms("b")
    if policy == "esg":
        pool = pol.rule(PoolSizing)
        assert pool.window_ms("b") == 950.0 == fresh.rule(PoolSizing).window_ms("b")
    # it goes on scheduling
    out = s.step(10.0, nodes(2), [Arrival(Request("r2", "chain", 10.0))])
    assert out.dispatches or out.waiting


def test_the_same_figure_again_changes_nothing_and_a_bad_one_is_refused():
    s = scheduler("esg")
    pol = s.policy
    s.step(0.0, nodes(2), [Arrival(Request("r0", "chain", 0.0))])
    ctx, kept = pol.ctx, pol.proposer._startups
    s.use_startup_costs(2000.0)
    assert pol.ctx is ctx and pol.proposer._startups is kept
    for bad in (-1.0, math.nan, math.inf):
        with pytest.raises(ValueError, match="MIG change time"):
            pol.use_startup_costs(bad)
    assert pol.ctx is ctx


def test_a_policy_with_no_app_yet_plans_with_the_new_figure_once_it_learns_one():
    s = Scheduler({}, make_policy("esg", PolicyContext(apps={}, profiles={})))
    s.use_startup_costs(300.0)
    s.add_app(CHAIN, {"a": profile("a", ROWS, cold_start_ms=300.0), "b": profile("b", ROWS, cold_start_ms=500.0)})
    pol = s.policy
    assert pol.ctx.mig_reconfig_ms == 300.0 and pol.placer.ctx is pol.ctx
    assert pol.proposer.startup_ms("a") == (300.0, 600.0)
    assert pol.placer._startup_of("a", pol.ctx.profiles["a"]).mig_reconfig_ms == 300.0


def test_a_start_up_that_fits_the_budget_only_with_the_learned_figure_is_planned_on_a_new_instance():
    """A head whose budget covers a cold start but not a new MIG instance at the default 2 s runs on CPU;
    once MIG changes are learned to take 0.2 s, the same head is planned on a new MIG instance."""
    one = App("one", 1000.0, ("f",), ())
    rows = [(1, 1, "1g.5gb", 5.0), (1, 1, None, 400.0)]

    def place(figure: float | None):
        s = Scheduler({"one": one}, make_policy("esg", PolicyContext({"one": one},
                                                                    {"f": profile("f", rows, cold_start_ms=300.0)})))
        s.step(0.0, nodes(1), [])
        if figure is not None:
            s.use_startup_costs(figure)
        (d,) = s.step(0.0, nodes(1), [Arrival(Request("r0", "one", 0.0))]).dispatches
        return d.config.gpu

    assert place(None) is None and place(200.0) == "1g.5gb"


def test_a_kept_wait_is_placed_again_with_the_new_figure():
    s = scheduler("esg")
    s._waiting[("chain", "a")] = object()     # a wait kept from the last step, worked out with 2 s
    s.use_startup_costs(500.0)
    assert s._waiting == {}
