"""Planning at a latency percentile (``--slo-percentile``, esg.tail): each configuration's percentile
from its table's measured percentiles or spread, and ESG_1Q at those latencies pinned to an enumeration
written out here whose percentiles are found by bisection on the log-normal's distribution function."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from esg.cost import Prices, config_cost
from esg.emulator.config import EmulatorParams
from esg.errors import ProfileError
from esg.model import App, Config
from esg.online import ConfigStats, learned_profile
from esg.planner import Planner
from esg.policies.base import FunctionSpec
from esg.profiles import Profile, ProfileEntry, profile_from_dict
from esg.tail import (
    DEFAULT_LATENCY_CV,
    check_percentile,
    entry_latency_at,
    latencies_at,
    quantile_field,
    samples_for,
    spread_factor,
)
from esg.timing import lognormal_params
from tests.core._helpers import dag_latency, draw_cells, draw_dag, k_cheapest_costs, make_profile


def _lognormal_quantile(cv: float, p: float) -> float:
    """The p-th percentile of a mean-1 log-normal factor of coefficient of variation ``cv``, by bisection on
    its distribution function 0.5 (1 + erf((ln x - mu) / (sigma sqrt 2)))."""
    if cv == 0:
        return 1.0
    sigma2 = math.log(1 + cv * cv)
    mu, sigma = -sigma2 / 2, math.sqrt(sigma2)
    lo, hi = 1e-6, 100.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if 0.5 * (1 + math.erf((math.log(mid) - mu) / (sigma * math.sqrt(2)))) < p / 100:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def _reference_latency(profile: Profile, e: ProfileEntry, p: float) -> float:
    """A row's percentile by the documented order: a measured p<p>_ms with enough samples (at least
    one expected above it), else the row's, the table's or the default spread."""
    measured = e.extra.get(f"p{p:g}_ms")
    n = e.extra.get("samples")
    if measured is not None and (n is None or n * (100 - p) >= 100 - 1e-9):
        return max(measured, e.latency_ms)
    cv = e.extra.get("latency_cv", profile.extra.get("latency_cv", DEFAULT_LATENCY_CV))
    return e.latency_ms * _lognormal_quantile(cv, p)


# -- the percentile of one configuration ---------------------------------------------------------------

@pytest.mark.parametrize("cv,p", [(0.05, 95), (0.05, 99), (0.2, 90), (0.5, 99.9), (0.01, 60)])
def test_the_spread_factor_is_the_log_normal_percentile(cv, p):
    assert spread_factor(cv, p) == pytest.approx(_lognormal_quantile(cv, p), rel=1e-9)


def test_the_default_spread_is_the_emulators_and_its_p95_is_what_the_emulator_draws():
    assert DEFAULT_LATENCY_CV == EmulatorParams().noise_cv
    mu, sigma = lognormal_params(EmulatorParams().noise_cv)  # the emulator's execution-time factor
    draws = np.random.default_rng(7).lognormal(mu, sigma, size=400_000)
    for p in (90, 95, 99):
        assert float(np.percentile(draws, p)) == pytest.approx(spread_factor(DEFAULT_LATENCY_CV, p), rel=2e-3)


def test_a_rows_percentile_comes_from_its_measured_figure_then_its_spread_then_the_tables():
    rows = [ProfileEntry(Config(1, 1), 10.0, {"p95_ms": 13.0, "samples": 20}),   # measured, enough samples
            ProfileEntry(Config(2, 1), 10.0, {"p95_ms": 30.0, "samples": 19}),   # too few for a p95
            ProfileEntry(Config(4, 1), 10.0, {"p95_ms": 13.0}),                  # no count: trusted
            ProfileEntry(Config(8, 1), 10.0, {"p95_ms": 9.0}),                   # below the median
            ProfileEntry(Config(1, 2), 10.0, {"latency_cv": 0.3}),
            ProfileEntry(Config(2, 2), 10.0)]
    table = Profile("f", "A100-40GB", tuple(rows), extra={"latency_cv": 0.1})
    got = [entry_latency_at(table, e, 95) for e in rows]
    assert got == pytest.approx([13.0, 10.0 * _lognormal_quantile(0.1, 95), 13.0, 10.0,
                                 10.0 * _lognormal_quantile(0.3, 95), 10.0 * _lognormal_quantile(0.1, 95)])
    bare = Profile("f", "A100-40GB", (ProfileEntry(Config(1, 1), 10.0),))
    assert latencies_at(bare, 99)[Config(1, 1)] == pytest.approx(10.0 * _lognormal_quantile(0.05, 99))


def test_samples_for_a_percentile_expect_one_above_it():
    assert [samples_for(p) for p in (90, 95, 99, 99.9, 60)] == [10, 20, 100, 1000, 3]
    assert quantile_field(95.0) == "p95_ms" and quantile_field(99.9) == "p99.9_ms"


@pytest.mark.parametrize("bad", ["50", "100", "0", "-5", "120", "nan", "inf", "p95", "", True, None])
def test_a_percentile_outside_50_to_100_is_refused(bad):
    with pytest.raises(ValueError, match="strictly between 50 and 100"):
        check_percentile(bad)
    assert check_percentile("95") == 95.0 and check_percentile(99.9) == 99.9


@pytest.mark.parametrize("where,field,value", [("top", "latency_cv", -0.1), ("row", "latency_cv", "wide"),
                                                ("row", "p95_ms", 0), ("row", "p99.9_ms", "slow"),
                                                ("top", "latency_cv", float("nan"))])
def test_a_bad_spread_field_is_named_when_the_table_is_read(where, field, value):
    data = {"function": "f", "gpu_model": "A100-40GB",
            "configs": [{"batch": 1, "vcpus": 1, "gpu": None, "latency_ms": 5.0}]}
    (data if where == "top" else data["configs"][0])[field] = value
    with pytest.raises(ProfileError, match=field.replace(".", r"\.")):
        profile_from_dict(data, "f.json")
    ok = profile_from_dict({**data, "latency_cv": 0.0,
                            "configs": [{"batch": 1, "vcpus": 1, "latency_ms": 5.0, "p95_ms": 6, "p50_ms": 5}]},
                           "f.json")
    assert ok.extra["latency_cv"] == 0.0 and ok.entries[0].extra["p95_ms"] == 6


# -- ESG_1Q at the percentile ----------------------------------------------------------------------------

CHAIN = App("chain", 100, ("a", "b"), (("a", "b"),))


def test_a_plan_just_under_the_slo_on_the_tables_figure_is_replaced_by_one_that_meets_it_at_p95():
    # a: 50 ms on 1 vCPU (cheap) or 45 ms on 2; b: 50 ms. SLO 104: 100 ms fits on the figure, not at p95
    profiles = {"a": make_profile("a", [(1, 1, None, 50.0), (1, 2, None, 45.0)]),
                "b": make_profile("b", [(1, 1, None, 50.0)])}
    mean = Planner(CHAIN, profiles).plan(104.0).paths[0]
    tail = Planner(CHAIN, profiles, percentile=95).plan(104.0).paths[0]
    assert mean.configs["a"] == Config(1, 1) and mean.latency_ms == 100.0
    assert tail.configs["a"] == Config(1, 2)
    assert tail.latency_ms == pytest.approx(95.0 * _lognormal_quantile(0.05, 95))
    # the cost stays resource-time on the tables' figure
    assert tail.cost == pytest.approx(config_cost(Prices(), "A100-40GB", Config(1, 2), 45.0)
                                      + config_cost(Prices(), "A100-40GB", Config(1, 1), 50.0))
    assert not Planner(CHAIN, profiles, percentile=99.9).plan(104.0).feasible


def test_without_a_percentile_the_planner_is_unchanged():
    profiles = {"a": make_profile("a", [(1, 1, None, 50.0), (1, 2, None, 45.0)]),
                "b": make_profile("b", [(1, 1, None, 50.0)])}
    for budget in (96.0, 100.0, 130.0):
        assert Planner(CHAIN, profiles).plan(budget, 2) == Planner(CHAIN, profiles, percentile=None).plan(budget, 2)


def _enumerate(app: App, profiles, budget: float, k: int, overhead: float, p: float) -> list[float]:
    """The K cheapest feasible paths' costs, by listing every path at the reference percentiles."""
    return k_cheapest_costs(app, profiles, budget, k,
                            lambda f, e: _reference_latency(profiles[f], e, p) + overhead)


@st.composite
def cases(draw):
    fs, edges = draw_dag(draw)
    profiles = {}
    for f in fs:
        entries = []
        for b, v, g in draw_cells(draw):
            lat = float(draw(st.integers(1, 30)))
            extra: dict = {}
            kind = draw(st.sampled_from(["none", "cv", "p95", "p95-few", "p99"]))
            if kind == "cv":
                extra["latency_cv"] = draw(st.sampled_from([0.0, 0.02, 0.1, 0.4]))
            elif kind in ("p95", "p95-few", "p99"):
                extra[f"p{kind[1:3]}_ms"] = lat * draw(st.sampled_from([0.9, 1.0, 1.1, 1.6]))
                extra["samples"] = 5 if kind == "p95-few" else 200
            entries.append(ProfileEntry(Config(b, v, g), lat, extra))
        table_extra = {"latency_cv": draw(st.sampled_from([0.05, 0.2]))} if draw(st.booleans()) else {}
        profiles[f] = Profile(f, "A100-40GB", tuple(entries), extra=table_extra)
    return (App("rand", 100, tuple(fs), edges), profiles, float(draw(st.integers(1, 160))),
            draw(st.integers(1, 4)), draw(st.sampled_from([0.0, 2.5])), draw(st.sampled_from([60, 90, 95, 99])))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_astar_and_brute_force_at_a_percentile_match_an_enumeration(case):
    app, profiles, budget, k, overhead, p = case
    want = _enumerate(app, profiles, budget, k, overhead, p)
    exact = Planner(app, profiles, exact=True, stage_overhead_ms=overhead, percentile=p).plan(budget, k)
    brute = Planner(app, profiles, brute_force=True, stage_overhead_ms=overhead, percentile=p).plan(budget, k)
    assert [q.cost for q in exact.paths] == pytest.approx(want)
    assert [q.cost for q in brute.paths] == pytest.approx(want)
    grouped = Planner(app, profiles, max_group=2, stage_overhead_ms=overhead, percentile=p).plan(budget, k)
    for path in (*exact.paths, *grouped.paths):  # every path's latency is its percentiles' longest path
        lat = {f: _reference_latency(profiles[f], next(e for e in profiles[f].entries if e.config == c), p)
               + overhead for f, c in path.configs.items()}
        assert path.latency_ms == pytest.approx(dag_latency(list(app.functions), app.edges, lat))
        assert path.latency_ms <= budget + 1e-9
    if want:  # the grouped search is a heuristic: it may miss, never beat, the cheapest
        assert all(q.cost >= want[0] - 1e-9 for q in grouped.paths)


# -- learned tables ------------------------------------------------------------------------------------------

def test_a_learned_table_records_its_sketch_at_the_planning_percentile_once_it_has_enough_samples():
    rng = np.random.default_rng(3)
    stats = {Config(1, 1): ConfigStats(), Config(2, 1): ConfigStats()}
    runs = {Config(1, 1): 10.0 * rng.lognormal(0, 0.2, size=200), Config(2, 1): [10.0, 30.0, 11.0, 12.0, 9.0]}
    for c, xs in runs.items():
        for x in xs:
            stats[c].observe(float(x), cold=False)
    plain = learned_profile("f", stats, None, FunctionSpec(gpu=False), 1000.0, "A100-40GB")
    assert all("p99_ms" not in e.extra for e in plain.entries)  # without a percentile: as it always was
    table = learned_profile("f", stats, None, FunctionSpec(gpu=False), 1000.0, "A100-40GB", percentile=99)
    many, few = (next(e for e in table.entries if e.config == c) for c in (Config(1, 1), Config(2, 1)))
    exact99 = float(np.percentile(runs[Config(1, 1)], 99))
    assert many.extra["p99_ms"] == pytest.approx(exact99, rel=0.03)  # the sketch's relative accuracy
    assert entry_latency_at(table, many, 99) == many.extra["p99_ms"]
    # five samples cannot show a p99: the spread model plans it
    assert entry_latency_at(table, few, 99) == pytest.approx(few.latency_ms * spread_factor(DEFAULT_LATENCY_CV, 99))
    # the p95 every learned table records is used at 95 once there are 20 samples
    assert entry_latency_at(table, many, 95) == max(many.extra["p95_ms"], many.latency_ms)
