"""Apps learnt at run time (the live service learns them from action metadata): every policy schedules
an app it was not built with, and a replaced profile is what every app sharing the function plans with."""

from __future__ import annotations

import pytest

from esg.events import Arrival, Request
from esg.model import App
from esg.policies import PolicyContext, make_policy
from esg.scheduler import Scheduler

from .helpers import nodes, profile

CHAIN = App("chain", 500.0, ("a", "b"), (("a", "b"),))
OTHER = App("other", 500.0, ("b",), ())
FAST_B = [(1, 1, "1g.5gb", 5.0), (1, 2, None, 8.0)]
SLOW_B = [(1, 1, "1g.5gb", 50.0), (1, 2, None, 80.0)]


@pytest.mark.parametrize("policy", ["esg", "infless", "fastgshare", "orion", "aquatope"])
def test_every_policy_schedules_an_app_it_learnt_at_run_time(policy):
    s = Scheduler({}, make_policy(policy, PolicyContext(apps={}, profiles={})), prewarm=True)
    s.add_app(CHAIN, {"a": profile("a", [(1, 1, None, 10.0)]), "b": profile("b", FAST_B)})
    snap = nodes(2)
    out = s.step(0.0, snap, [Arrival(Request("r0", "chain", 0.0))])
    assert [d.function for d in out.dispatches] == ["a"]


@pytest.mark.parametrize("policy", ["esg", "infless", "fastgshare", "orion", "aquatope"])
def test_a_profile_replaced_with_another_app_is_the_one_every_app_sharing_it_uses(policy):
    profiles = {"a": profile("a", [(1, 1, None, 10.0)]), "b": profile("b", FAST_B)}
    s = Scheduler({"chain": CHAIN}, make_policy(policy, PolicyContext({"chain": CHAIN}, profiles)))
    pol = s.policy
    assert pol.rest_ms(CHAIN, "a") == pytest.approx(5.0)
    s.step(0.0, nodes(2), [Arrival(Request("r0", "chain", 0.0))])  # fills whatever the policy caches
    s.add_app(OTHER, {"b": profile("b", SLOW_B)})
    assert pol.rest_ms(CHAIN, "a") == pytest.approx(50.0), "b's new table, for chain too"
    assert s._rest_ms(CHAIN, "a") == pytest.approx(50.0)
    fresh = make_policy(policy, PolicyContext({"chain": CHAIN, "other": OTHER},
                                              {**profiles, "b": profile("b", SLOW_B)}))
    mine, theirs = pol.proposer, fresh.proposer
    if policy == "infless":
        assert mine.shares == theirs.shares and mine._candidates == theirs._candidates
    elif policy == "fastgshare":
        assert mine._ranked == theirs._ranked
    elif policy == "orion":
        assert mine.ladders == theirs.ladders and not mine._plans
    elif policy == "aquatope":
        assert mine.plans == theirs.plans
    else:
        assert mine.planners["chain"].profiles["b"] is pol.ctx.profiles["b"]
        assert all(getattr(p, "ctx", pol.ctx) is pol.ctx for p in pol.plugins), "every plugin has the new context"
