"""The MIG change time learned from the agents' measurements (esg/startup_costs.py): the prior until a
GPU model has a few observations, then the median of the latest per-instance figures -- converging on a
constant figure, hardly moved by one wild outlier, deaf to observations that cannot be one."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from esg.defaults import MIG_RECONFIG_MS
from esg.startup_costs import MIN_SAMPLES, WINDOW, MigChangeTimes, moved

A100 = "A100-40GB"
H100 = "H100-80GB"
per_instance = st.floats(1.0, 20_000.0, allow_nan=False, allow_infinity=False)
instances = st.integers(1, 8)


@given(st.lists(st.tuples(instances, per_instance), max_size=MIN_SAMPLES - 1), st.floats(0.0, 10_000.0))
def test_it_answers_the_prior_until_a_model_has_a_few_observations(seen, prior):
    times = MigChangeTimes(prior)
    for n, ms in seen:
        assert times.observe(A100, n, n * ms)
    assert times.estimate(A100) == prior and times.learned(A100) is None
    assert times.cluster_ms([A100, H100, None]) == prior
    assert times.samples(A100) == len(seen) and times.models() == []


@given(per_instance, st.lists(instances, min_size=MIN_SAMPLES, max_size=3 * WINDOW))
def test_it_converges_to_a_constant_per_instance_figure(true_ms, changes):
    times = MigChangeTimes()
    for n in changes:
        times.observe(A100, n, n * true_ms)
    assert times.estimate(A100) == pytest.approx(true_ms)
    assert times.cluster_ms([A100]) == pytest.approx(true_ms) and times.models() == [A100]
    # another model of the cluster is learned apart; a model nobody measured leaves the figure alone
    assert times.estimate(H100) == MIG_RECONFIG_MS and times.cluster_ms([A100, H100]) == pytest.approx(true_ms)


@given(per_instance, st.integers(MIN_SAMPLES + 1, WINDOW), st.floats(1e3, 1e9), st.integers(0, WINDOW))
def test_one_wild_outlier_hardly_moves_it(true_ms, before, factor, where):
    times = MigChangeTimes()
    for i in range(before):
        times.observe(A100, 1, true_ms * (factor if i == min(where, before - 1) else 1.0))
    assert times.estimate(A100) == pytest.approx(true_ms)
    times.observe(A100, 2, 2 * true_ms / factor)   # and one absurdly fast
    assert times.estimate(A100) == pytest.approx(true_ms)


def test_the_estimate_follows_the_latest_window_when_the_hardware_changes():
    times = MigChangeTimes()
    for _ in range(WINDOW):
        times.observe(A100, 1, 2500.0)
    for _ in range(WINDOW // 2):
        times.observe(A100, 1, 600.0)
    assert times.estimate(A100) == pytest.approx((2500.0 + 600.0) / 2)
    times.observe(A100, 1, 600.0)
    assert times.estimate(A100) == 600.0


@pytest.mark.parametrize("model, n, ms", [
    (A100, 0, 2000.0), (A100, -1, 2000.0), (A100, True, 2000.0), (A100, 1.5, 2000.0),
    (A100, 1, -1.0), (A100, 1, math.nan), (A100, 1, math.inf), (A100, 1, -math.inf), (A100, 1, "2000"),
    (A100, 1, None), (None, 1, 2000.0), ("", 1, 2000.0),
])
def test_observations_that_cannot_be_one_are_ignored(model, n, ms):
    times = MigChangeTimes(2000.0, min_samples=1)
    assert not times.observe(model, n, ms)
    assert times.samples(A100) == 0 and times.estimate(A100) == 2000.0
    assert times.observe(A100, 2, 0.0) and times.estimate(A100) == 0.0    # a change that took no time is one


def test_a_cluster_of_several_models_plans_with_the_slowest_learned_one():
    times = MigChangeTimes()
    for _ in range(MIN_SAMPLES):
        times.observe(A100, 2, 2 * 700.0)
        times.observe(H100, 1, 1100.0)
    assert times.cluster_ms([A100, H100]) == 1100.0 and times.cluster_ms([A100]) == 700.0
    assert times.cluster_ms([]) == MIG_RECONFIG_MS


def test_bad_parameters_are_refused():
    for prior in (-1.0, math.nan, math.inf):
        with pytest.raises(ValueError, match="prior"):
            MigChangeTimes(prior)
    with pytest.raises(ValueError, match="window"):
        MigChangeTimes(window=0)


def test_a_figure_moves_past_ten_percent():
    assert not moved(2000.0, 2000.0) and not moved(2000.0, 2199.0) and not moved(2000.0, 1801.0)
    assert moved(2000.0, 2201.0) and moved(2000.0, 1799.0) and moved(0.0, 1.0) and not moved(0.0, 0.0)
