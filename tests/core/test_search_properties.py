"""ESG_1Q's A* search pinned to the brute-force reference on random groups (``docs/architecture.md`` §7).

Latencies and costs are drawn from small integer ranges so that equal costs, equal latencies and
budgets exactly at a path's latency are common: ties may pick different paths of equal cost, so paths
are compared by cost only, and each returned path is checked independently.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from esg.model import Config
from esg.search import Group, Option, astar_top_k, brute_force_top_k
from tests.core._helpers import dag_latency

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def shapes(draw) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    """A DAG of 1 to 5 functions, functions listed in topological order."""
    kind = draw(st.sampled_from(["chain", "fork", "join", "diamond", "random"]))
    if kind == "diamond":
        width = draw(st.integers(1, 3))
        fs = tuple(f"f{i}" for i in range(width + 2))
        mid = fs[1:-1]
        edges = [(fs[0], m) for m in mid] + [(m, fs[-1]) for m in mid]
        return fs, tuple(edges)
    n = draw(st.integers(1, 5))
    fs = tuple(f"f{i}" for i in range(n))
    if kind == "chain":
        edges = list(zip(fs, fs[1:]))
    elif kind == "fork":
        edges = [(fs[0], f) for f in fs[1:]]
    elif kind == "join":
        edges = [(f, fs[-1]) for f in fs[:-1]]
    else:
        pairs = list(itertools.combinations(fs, 2))
        edges = [p for p, keep in zip(pairs, draw(st.lists(st.booleans(), min_size=len(pairs),
                                                             max_size=len(pairs)))) if keep]
    return fs, tuple(edges)


@st.composite
def groups(draw) -> Group:
    fs, edges = draw(shapes())
    options = {}
    for f in fs:
        m = draw(st.integers(1, 12))
        cost = st.integers(1, 8).map(float) | st.sampled_from([0.5, 2.25, 3.0])
        lat = st.integers(1, 12).map(float) | st.sampled_from([2.5, 7.0])
        pairs = draw(st.lists(st.tuples(cost, lat), min_size=m, max_size=m))
        # configurations are unique per function (batch = position), so a path maps back to its options
        options[f] = tuple(Option(c, lt, Config(i + 1, 1)) for i, (c, lt) in enumerate(pairs))
    return Group(fs, edges, options)


def _extremes(group: Group) -> tuple[float, float]:
    fast = {f: min(o.latency_ms for o in group.options[f]) for f in group.functions}
    slow = {f: max(o.latency_ms for o in group.options[f]) for f in group.functions}
    return (dag_latency(group.functions, group.edges, fast),
            dag_latency(group.functions, group.edges, slow))


@st.composite
def instances(draw) -> tuple[Group, float, int]:
    group = draw(groups())
    fast, slow = _extremes(group)
    # from infeasible (below the fastest path) to loose (above the slowest), integers hit ties exactly
    budget = draw(st.integers(max(0, int(fast) - 3), int(slow) + 3).map(float)
                  | st.floats(fast * 0.5, slow * 1.5))
    k = draw(st.integers(1, 6))
    return group, budget, k


def _check_path(group: Group, path, budget: float) -> None:
    by_config = {f: {o.config: o for o in group.options[f]} for f in group.functions}
    assert set(path.configs) == set(group.functions)
    chosen = {f: by_config[f][c] for f, c in path.configs.items()}
    latency = dag_latency(group.functions, group.edges, {f: o.latency_ms for f, o in chosen.items()})
    assert latency <= budget
    assert path.latency_ms == pytest.approx(latency)
    assert path.cost == pytest.approx(sum(o.cost for o in chosen.values()))


@SETTINGS
@given(instances())
def test_astar_costs_equal_brute_force(inst):
    group, budget, k = inst
    fast = astar_top_k(group, budget, k)
    ref = brute_force_top_k(group, budget, k)
    assert [p.cost for p in fast] == pytest.approx([p.cost for p in ref])
    n_paths = 1
    for f in group.functions:
        n_paths *= len(group.options[f])
    assert len(ref) <= min(k, n_paths)


@SETTINGS
@given(instances())
def test_astar_paths_are_feasible_sorted_and_distinct(inst):
    group, budget, k = inst
    paths = astar_top_k(group, budget, k)
    assert len(paths) <= k
    for p in paths:
        _check_path(group, p, budget)
    costs = [p.cost for p in paths]
    assert costs == sorted(costs)
    keys = [tuple(sorted(p.configs.items())) for p in paths]
    assert len(set(keys)) == len(keys)


@SETTINGS
@given(instances())
def test_brute_force_paths_are_feasible_and_sorted(inst):
    group, budget, k = inst
    paths = brute_force_top_k(group, budget, k)
    for p in paths:
        _check_path(group, p, budget)
    assert [p.cost for p in paths] == sorted(p.cost for p in paths)


@SETTINGS
@given(groups(), st.floats(0.0, 0.999), st.integers(1, 6))
def test_infeasible_budget_returns_nothing(group, frac, k):
    fast, _ = _extremes(group)
    budget = fast * frac
    assert astar_top_k(group, budget, k) == []
    assert brute_force_top_k(group, budget, k) == []


@SETTINGS
@given(groups(), st.integers(1, 6))
def test_loose_budget_returns_the_k_cheapest_paths(group, k):
    _, slow = _extremes(group)
    costs = sorted(sum(c) for c in itertools.product(*[[o.cost for o in group.options[f]]
                                                        for f in group.functions]))
    paths = astar_top_k(group, slow, k)
    assert [p.cost for p in paths] == pytest.approx(costs[:k])


def test_empty_or_zero_k():
    g = Group(("a",), (), {"a": (Option(1.0, 1.0, Config(1, 1)),)})
    assert astar_top_k(g, 10.0, 0) == []
    assert brute_force_top_k(g, 10.0, 0) == []
    empty = Group(("a",), (), {"a": ()})
    assert astar_top_k(empty, 10.0, 3) == []
    assert brute_force_top_k(empty, 10.0, 3) == []


@SETTINGS
@given(instances(), st.floats(0.0, 1.0))
def test_a_lower_budget_that_keeps_every_path_feasible_returns_the_same_paths(inst, frac):
    """What the plan cache relies on (``PlanResult.valid_from_ms``), ties included: equal costs are
    common here, and the same paths must come back, not only the same costs."""
    group, budget, k = inst
    paths = astar_top_k(group, budget, k)
    low = max((p.latency_ms for p in paths), default=0.0)
    lower = low + (budget - low) * frac
    again = astar_top_k(group, lower, k)
    assert [(p.cost, p.configs) for p in again] == [(p.cost, p.configs) for p in paths]
