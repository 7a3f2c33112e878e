"""The ESG policy's plan cache gives, at every budget, the choice a fresh plan gives."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from esg.model import Job
from esg.policies import PolicyContext, make_policy
from esg.policies.base import Choice
from esg.policies.plan_cache import PlanCache
from esg.queues import AfwQueue
from esg_files import load_app, load_profiles

from .helpers import nodes

ROOT = Path(__file__).resolve().parents[2]
APPS = {p.stem: load_app(p) for p in sorted((ROOT / "apps").glob("*.json"))}


def _policy(app):
    ctx = PolicyContext({app.name: app}, load_profiles(ROOT / "profiles/tables/a100", app.functions))
    return make_policy("esg", ctx)


def _queue(app, function: str, length: int, deadline_ms: float) -> AfwQueue:
    queue = AfwQueue((app.name, function))
    for i in range(length):
        queue.push(Job(f"j{i}", f"r{i}", app.name, function, 0.0, deadline_ms, 0.0))
    return queue


@pytest.mark.parametrize("name", sorted(APPS))
def test_cached_choices_equal_fresh_ones_as_budgets_shrink_and_grow(name):
    app = APPS[name]
    kept = _policy(app)
    snapshot = nodes(2)
    rng = random.Random(name)
    budgets = [rng.uniform(0, 2.5 * app.slo_ms) for _ in range(60)]
    budgets += [app.slo_ms - t for t in range(0, int(app.slo_ms) + 5, 3)]  # one job waiting
    searches = 0
    for budget in budgets:
        function = rng.choice(app.functions)
        length = rng.choice((1, 2, 4))
        queue = _queue(app, function, length, 1000.0 + budget)
        fresh = _policy(app).choose(app, queue, 1000.0, snapshot)
        before = kept.proposer.searches
        assert kept.choose(app, queue, 1000.0, snapshot) == fresh, (function, length, budget)
        searches += kept.proposer.searches - before
    assert searches < len(budgets)  # the cache did answer some of them


@given(st.lists(st.tuples(st.integers(0, 60), st.integers(0, 60)), max_size=40), st.integers(0, 60))
def test_a_budget_gets_a_choice_whose_range_holds_it(puts, probe):
    """A look-up answers with a choice whose range holds the budget, and every planned budget is
    answered afterwards (ranges are clipped to stay disjoint, so a clipped part is only a miss)."""
    cache = PlanCache()
    ranges = {}
    for low, high in puts:
        low = min(low, high)
        if cache.get(("a", "f", 1), high) is not None:
            continue  # the policy plans only budgets the cache does not answer
        choice = Choice(reason=f"{low}-{high}")
        cache.put(("a", "f", 1), high, choice, float(low))
        ranges[choice.reason] = (low, high)
    for _, high in puts:
        assert cache.get(("a", "f", 1), high) is not None
    got = cache.get(("a", "f", 1), probe)
    if got is not None:
        lo, hi = ranges[got.reason]
        assert lo <= probe <= hi


@pytest.mark.parametrize("name", sorted(APPS))
def test_queues_longer_than_the_largest_batch_share_one_plan(name):
    """A burst's queue lengths all differ; past the app's largest batch they plan as one, and the choice
    is the one a fresh policy plans for that very length."""
    app = APPS[name]
    kept = _policy(app)
    snapshot = nodes(2)
    function = app.functions[0]
    largest = kept.proposer.planners[app.name].largest_batch
    for length in range(largest, largest + 12):
        queue = _queue(app, function, length, 1000.0 + app.slo_ms)
        assert kept.choose(app, queue, 1000.0, snapshot) == _policy(app).choose(app, queue, 1000.0, snapshot)
    assert kept.proposer.searches == 1
