"""The planner over whole apps: grouping, exactness, ordering of functions."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from esg.cost import Prices
from esg.model import App
from esg.planner import Planner
from esg.slo_split import groups as split_groups
from esg_files import load_app, load_profiles
from tests.core._helpers import SLICES_A100, dag_latency, grid_rows, make_profile

ROOT = Path(__file__).resolve().parents[2]


def test_functions_listed_out_of_topological_order():
    # an app file may list a sink before its predecessor
    app = App("rev", 100, ("b", "a"), (("a", "b"),))
    profiles = {f: make_profile(f, [(1, 1, None, 10.0), (1, 2, None, 6.0)]) for f in ("a", "b")}
    for kw in ({}, {"exact": True}, {"brute_force": True}):
        result = Planner(app, profiles, **kw).plan(100, 2)
        assert result.feasible
        assert [p.cost for p in result.paths] == [20.0, 22.0]
        assert result.paths[0].latency_ms == 20.0

SEVEN = App("seven", 200, ("a", "b", "c", "d", "e", "f", "g"),
            (("a", "b"), ("a", "c"), ("b", "d"), ("c", "d"), ("d", "e"), ("e", "f"), ("e", "g")))


def _profiles(app: App, seed: int = 1, **grid) -> dict:
    return {f: make_profile(f, grid_rows(seed + i, 10.0 + 7 * i, **grid)) for i, f in enumerate(app.functions)}


def _recheck(app: App, profiles, prices: Prices, path, slo: float) -> None:
    assert set(path.configs) == set(app.functions)
    lat = {f: profiles[f].latency(c) for f, c in path.configs.items()}
    latency = dag_latency(app.functions, app.edges, lat)
    assert latency <= slo + 1e-9
    assert path.latency_ms == pytest.approx(latency)
    cost = sum((prices.vcpu * c.vcpus + prices.gpu_slice * SLICES_A100[c.gpu]) * lat[f] / c.batch
               for f, c in path.configs.items())
    assert path.cost == pytest.approx(cost)


def _group_fastest_sum(app: App, profiles, max_group: int) -> float:
    fast = {f: min(e.latency_ms for e in profiles[f].entries) for f in app.functions}
    total = 0.0
    for g in split_groups(app, max_group):
        inside = [(a, b) for a, b in app.edges if a in g and b in g]
        total += dag_latency(g, inside, fast)
    return total


def test_grouped_plan_is_feasible_and_no_cheaper_than_exact():
    profiles = _profiles(SEVEN)
    prices = Prices()
    fastest = Planner(SEVEN, profiles).fastest_latency()
    grouped_fastest = _group_fastest_sum(SEVEN, profiles, 3)
    checked = 0
    for slo in [fastest * x for x in (0.9, 1.0, 1.2, 1.5, 2.0, 3.0, 5.0, 10.0)]:
        exact = Planner(SEVEN, profiles, exact=True).plan(slo, 3)
        grouped = Planner(SEVEN, profiles, max_group=3).plan(slo, 3)
        assert len(grouped.groups) > 1
        assert exact.feasible == (slo >= fastest)
        if slo >= grouped_fastest:
            assert grouped.feasible
        if grouped.feasible:
            checked += 1
            assert exact.feasible
            assert grouped.paths[0].cost >= exact.paths[0].cost - 1e-9
            for p in grouped.paths:
                _recheck(SEVEN, profiles, prices, p, slo)
            assert [p.cost for p in grouped.paths] == sorted(p.cost for p in grouped.paths)
        for p in exact.paths:
            _recheck(SEVEN, profiles, prices, p, slo)
    assert checked >= 5


@st.composite
def planning_cases(draw):
    n = draw(st.integers(5, 7))
    fs = [f"f{i}" for i in range(n)]
    pairs = [(fs[i], fs[j]) for i in range(n) for j in range(i + 1, n)]
    edges = tuple(p for p in pairs if draw(st.booleans()) and draw(st.booleans()))
    app = App("rand", 100, tuple(fs), edges)
    profiles = {}
    for f in fs:
        m = draw(st.integers(2, 5))
        cells = draw(st.lists(st.tuples(st.sampled_from([1, 2, 4]), st.sampled_from([1, 2]),
                                        st.sampled_from([None, "1g.5gb", "3g.20gb"])),
                              min_size=m, max_size=m, unique=True))
        lats = draw(st.lists(st.integers(1, 30), min_size=m, max_size=m))
        profiles[f] = make_profile(f, [(b, v, g, float(lt)) for (b, v, g), lt in zip(cells, lats)])
    slo = float(draw(st.integers(1, 150)))
    return app, profiles, slo, draw(st.integers(1, 3)), draw(st.integers(1, 4))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(planning_cases())
def test_grouped_planning_is_a_feasible_approximation(case):
    app, profiles, slo, max_group, k = case
    prices = Prices()
    exact = Planner(app, profiles, exact=True).plan(slo, k)
    brute = Planner(app, profiles, brute_force=True).plan(slo, k)
    assert [p.cost for p in exact.paths] == pytest.approx([p.cost for p in brute.paths])
    grouped = Planner(app, profiles, max_group=max_group).plan(slo, k)
    assert len(grouped.paths) <= k
    if slo >= _group_fastest_sum(app, profiles, max_group):
        assert grouped.feasible
    if grouped.feasible:
        assert exact.feasible
        assert grouped.paths[0].cost >= exact.paths[0].cost - 1e-9
    for p in (*grouped.paths, *exact.paths):
        _recheck(app, profiles, prices, p, slo)


def test_plan_from_a_function_covers_its_descendants_only():
    profiles = _profiles(SEVEN)
    result = Planner(SEVEN, profiles).plan(1000, 2, start="e")
    assert result.feasible
    for p in result.paths:
        assert set(p.configs) == {"e", "f", "g"}
    assert result.priority_list("e")


def test_option_filter_is_respected():
    profiles = _profiles(SEVEN)
    cpu_only = Planner(SEVEN, profiles, exact=True).plan(10_000, 3, allow=lambda f, c: c.gpu is None)
    assert cpu_only.feasible
    assert all(c.gpu is None for p in cpu_only.paths for c in p.configs.values())


def test_prices_change_costs_by_the_formula():
    app = App("one", 100, ("a", "b"), (("a", "b"),))
    profiles = {f: make_profile(f, grid_rows(i, 20.0)) for i, f in enumerate(app.functions)}
    for prices in (Prices(), Prices(1.0, 0.0), Prices(0.0, 1.0), Prices(2.5, 30.0)):
        result = Planner(app, profiles, prices, exact=True).plan(1000, 5)
        for p in result.paths:
            _recheck(app, profiles, prices, p, 1000)
    # with free GPUs the cheapest path uses them; with free vCPUs it stays on CPU
    free_gpu = Planner(app, profiles, Prices(1.0, 0.0), exact=True).plan(1000, 1).paths[0]
    free_cpu = Planner(app, profiles, Prices(0.0, 1.0), exact=True).plan(1000, 1).paths[0]
    assert all(c.gpu is not None for c in free_gpu.configs.values())
    assert all(c.gpu is None for c in free_cpu.configs.values())


def test_missing_profile_is_named():
    from esg.errors import ProfileError

    with pytest.raises(ProfileError, match="'g'"):
        Planner(SEVEN, {f: v for f, v in _profiles(SEVEN).items() if f != "g"})


def test_grouped_planning_falls_back_to_the_whole_app_when_the_cut_overstates_latency():
    """A fan-out of four cut into groups of three looks sequential; a budget only the parallel
    schedule meets must still get a plan."""
    from esg.model import App
    from esg.planner import Planner

    from .helpers import profile

    app = App("fan", 100.0, ("p", "a", "b", "c", "v"),
              (("p", "a"), ("p", "b"), ("p", "c"), ("a", "v"), ("b", "v"), ("c", "v")))
    profs = {f: profile(f, [(1, 1, None, 10.0), (1, 2, None, 12.0)]) for f in app.functions}
    planner = Planner(app, profs)
    assert planner.fastest_latency() == 30.0
    result = planner.plan(31.0, 2)
    assert result.feasible
    assert all(p.latency_ms <= 31.0 for p in result.paths)


@pytest.mark.parametrize("app_file", sorted((ROOT / "apps").glob("*.json")), ids=lambda p: p.stem)
def test_a_plan_holds_over_its_valid_budget_range(app_file):
    """Planning again at any budget from ``valid_from_ms`` up to the planned one gives the same paths;
    a plan made in groups (even when it fell back to the whole app) claims no range."""
    app = load_app(app_file)
    planner = Planner(app, load_profiles(ROOT / "profiles/tables/a100", app.functions))
    checked = 0
    for function in app.functions:
        for budget in range(5, 300, 7):
            result = planner.plan(budget, 5, start=function)
            if result.valid_from_ms is None:
                assert len(app.descendants(function)) > planner.max_group  # planned in groups
                continue
            assert result.valid_from_ms <= budget
            for lower in sorted({result.valid_from_ms, (result.valid_from_ms + budget) / 2, budget - 0.5}):
                if lower < result.valid_from_ms:
                    continue
                again = planner.plan(lower, 5, start=function)
                assert [(p.cost, p.configs) for p in again.paths] == [(p.cost, p.configs) for p in result.paths]
                checked += 1
    assert checked > 0
