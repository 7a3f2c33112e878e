"""Online profiles in the core: the sketch, the learned table, drift, exploration."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from esg.cost import Prices
from esg.defaults import is_default, source
from esg.events import Arrival, BatchDone, Request
from esg.explore import Explorer
from esg.model import App, Config
from esg.online import (
    MIN_SAMPLES,
    ConfigStats,
    Learner,
    Observation,
    drifted,
    grid,
    learned_profile,
    samples,
)
from esg.policies import PolicyContext, make_policy
from esg.policies.base import FunctionSpec
from esg.scheduler import Scheduler
from esg.sketch import QuantileSketch

from .helpers import nodes, profile

CPU = FunctionSpec(max_batch=None, gpu=False)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(min_value=0.01, max_value=1e6, allow_nan=False), min_size=1, max_size=300),
       st.floats(min_value=0, max_value=1))
def test_sketch_quantile_is_within_its_relative_accuracy_of_the_exact_one(xs, q):
    sk = QuantileSketch()
    sk.update(xs)
    exact = sorted(xs)[math.floor(q * (len(xs) - 1))]
    got = sk.quantile(q)
    assert got is not None and abs(got - exact) <= sk.accuracy * exact * 1.0000001
    assert sk.count == len(xs)


def test_sketch_memory_is_bounded_and_high_quantiles_stay_accurate():
    sk = QuantileSketch(max_buckets=64)
    rng = random.Random(1)
    xs = [math.exp(rng.uniform(0, 12)) for _ in range(5000)]
    sk.update(xs)
    assert len(sk.counts) <= 64
    exact = sorted(xs)[math.floor(0.99 * (len(xs) - 1))]
    assert abs(sk.quantile(0.99) - exact) <= sk.accuracy * exact * 1.0000001


def test_sketches_merge_by_adding_counts():
    a, b, both = QuantileSketch(), QuantileSketch(), QuantileSketch()
    a.update([1, 2, 3, 40])
    b.update([5, 6, 700])
    both.update([1, 2, 3, 40, 5, 6, 700])
    a.merge(b.counts)
    assert a.counts == both.counts


def test_bad_sketch_inputs_are_refused():
    with pytest.raises(ValueError):
        QuantileSketch(accuracy=0)
    with pytest.raises(ValueError):
        QuantileSketch().add(float("nan"))
    assert QuantileSketch().quantile(0.5) is None


def test_grid_follows_the_annotations():
    assert len(grid(CPU, "A100-40GB")) == 12
    assert all(c.batch <= 2 for c in grid(FunctionSpec(max_batch=2, gpu=False), "A100-40GB"))
    gpus = {c.gpu for c in grid(FunctionSpec(), "A100-40GB")}
    assert gpus == {None, "1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"}


def test_learned_table_starts_default_and_takes_configurations_once_measured():
    stats = {Config(1, 1, None): ConfigStats()}
    p = learned_profile("f", stats, None, CPU, 5000, "A100-40GB")
    assert is_default(p)
    stats[Config(1, 1, None)].observe(99.0, cold=True, init_ms=300.0)   # a cold batch is not a sample
    for ms in (10.0, 12.0):
        stats[Config(1, 1, None)].observe(ms, cold=False)
    p = learned_profile("f", stats, None, CPU, 5000, "A100-40GB")
    assert is_default(p) and samples(p) == {"b1/1c/cpu": 2}
    stats[Config(1, 1, None)].observe(11.0, cold=False)
    p = learned_profile("f", stats, None, CPU, 5000, "A100-40GB")
    assert source(p) == "online" and p.configs == (Config(1, 1, None),)
    assert p.latency(Config(1, 1, None)) == pytest.approx(11.0, rel=0.01)
    assert p.cold_start_ms == 300.0


def test_learned_configurations_refine_the_prior():
    prior = profile("f", [(1, 1, None, 10.0), (2, 1, None, 15.0)])
    stats = {Config(2, 1, None): ConfigStats(), Config(4, 1, None): ConfigStats()}
    for _ in range(MIN_SAMPLES):
        stats[Config(2, 1, None)].observe(30.0, cold=False)
        stats[Config(4, 1, None)].observe(50.0, cold=False)
    p = learned_profile("f", stats, prior, CPU, 5000, "A100-40GB")
    assert p.latency(Config(1, 1, None)) == 10.0  # the prior where nothing was measured
    assert p.latency(Config(2, 1, None)) == pytest.approx(30.0, rel=0.01)
    assert p.latency(Config(4, 1, None)) == pytest.approx(50.0, rel=0.01)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(min_value=1, max_value=100), min_size=30, max_size=60),
       st.floats(min_value=1, max_value=100))
def test_drift_is_reported_exactly_when_every_window_lies_beyond_tolerance_on_one_side(xs, table):
    got = drifted(xs, table, 0.25, 10, 3)
    tail = xs[-30:]
    meds = [sorted(tail[k * 10:(k + 1) * 10]) for k in range(3)]
    meds = [(m[4] + m[5]) / 2 for m in meds]
    expect = all(m > table * 1.25 for m in meds) or all(m < table * 0.75 for m in meds)
    assert (got is not None) == expect


def test_learner_reports_measured_then_drift_and_restarts_from_recent_times():
    lr = Learner()
    c = Config(1, 1, None)
    events = lr.observe_all((Observation("f", c, 10.0), None) for _ in range(MIN_SAMPLES))
    assert [e.measured for e in events] == [True]
    events = lr.observe_all((Observation("f", c, 10.0), 10.0) for _ in range(40))
    assert events == []
    events = lr.observe_all((Observation("f", c, 20.0), 10.0) for _ in range(24))
    assert events == []   # not yet sustained: the oldest window's median is still 10 ms
    events = lr.observe_all([(Observation("f", c, 20.0), 10.0)])
    assert len(events) == 1 and events[0].drift_ms == 20.0 and events[0].was_ms == 10.0
    p = learned_profile("f", lr.table_stats("f"), None, CPU, 5000, "A100-40GB")
    assert p.latency(c) == pytest.approx(20.0, rel=0.01)


def measured(rows, **kw) -> object:
    stats = {}
    for b, v, g, ms in rows:
        s = stats.setdefault(Config(b, v, g), ConfigStats())
        for _ in range(MIN_SAMPLES):
            s.observe(ms, cold=False)
    return learned_profile("f", stats, None, kw.get("spec", CPU), kw.get("bound", 5000.0), "A100-40GB")


def test_explorer_waits_for_budget_and_keeps_the_slo():
    p = measured([(1, 1, None, 150.0), (1, 2, None, 100.0)])
    ex = Explorer(fraction=0.5, grids={"f": (Config(2, 1, None),)})
    ex.credit("f", 3)
    assert ex.probe("f", p, CPU, 8, 10_000, Prices(), 8) is None   # 1.5 tokens: not yet a batch of 2
    ex.credit("f", 1)
    probe = ex.probe("f", p, CPU, 2, 10_000, Prices(), 8)
    # b2 on 1 vCPU dominates only b1/1c: at most two of its batches
    assert probe is not None and probe.bound_ms == pytest.approx(300.0, rel=0.01)
    # 300 ms does not fit 250 ms, and is later than the known way (two batches on 2 vCPUs, 200 ms)
    assert ex.probe("f", p, CPU, 2, 250.0, Prices(), 8) is None


def test_explorer_may_try_what_is_no_later_than_the_known_way_for_a_late_request():
    p = measured([(1, 1, None, 150.0), (1, 2, None, 100.0)])
    ex = Explorer(fraction=1.0, grids={"f": (Config(1, 4, None),)})
    ex.credit("f", 1)
    probe = ex.probe("f", p, CPU, 1, 50.0, Prices(), 8)   # late for any configuration
    assert probe is not None and probe.bound_ms == pytest.approx(100.0, rel=0.01)


def test_explorer_bounds_come_from_dominated_measured_configurations():
    p = measured([(2, 2, None, 100.0)])
    ex = Explorer(fraction=1.0)
    ex.credit("f", 8)
    probes = set()
    for _ in range(40):
        probe = ex.probe("f", p, CPU, 8, 1000.0, Prices(), 8)
        if probe is None:
            break
        probes.add(probe)
        ex.spent("f", probe.config)
        ex.credit("f", 8)
    configs = {x.config: x.bound_ms for x in probes}
    # 1 vCPU configurations dominate nothing measured: bounded only by the 5 s time limit, over budget
    assert all(c.vcpus >= 2 for c in configs)
    assert configs[Config(8, 4, None)] == pytest.approx(400.0, rel=0.01)
    assert configs[Config(1, 2, None)] == pytest.approx(100.0, rel=0.01)


def test_explorer_tries_configurations_that_could_enter_the_top_k_first():
    p = measured([(1, 1, None, 10.0), (8, 1, None, 20.0)])
    ex = Explorer(fraction=1.0)
    ex.credit("f", 8)
    # top-1 is b8/1c at 2.5 per job; optimistically b2 and b4 on 1 vCPU tie with it, anything on 2 or
    # 4 vCPUs costs at least twice as much
    order = []
    while (probe := ex.probe("f", p, CPU, 8, 1000.0, Prices(), 1)) is not None:
        if probe.config not in order:
            order.append(probe.config)
        ex.spent("f", probe.config)
        ex.credit("f", 8)
    assert set(order[:2]) == {Config(2, 1, None), Config(4, 1, None)}
    # the rest follow, so the table still fills in to the whole grid
    assert set(order) == set(grid(CPU, "A100-40GB")) - {Config(1, 1, None), Config(8, 1, None)}


def run_app(app: App, sched: Scheduler, latency, calls: int, gap: float = 50.0):
    """Calls ``gap`` ms apart; each batch takes ``latency(config)``. The outcomes."""
    now, pending, outs = 0.0, {}, []
    events = []
    for i in range(calls):
        events.append(Arrival(Request(f"r{i}", app.name, now)))
        while True:
            out = sched.step(now, nodes(1, vcpus=64), events)
            events = []
            outs += out.outcomes
            for d in out.dispatches:
                pending[d.batch_id] = (now + latency(d), d)
            due = [k for k, (t, _) in pending.items() if t <= now + gap]
            if not due:
                break
            k = min(due, key=lambda k: pending[k][0])
            t, d = pending.pop(k)
            now = max(now, t)
            events.append(BatchDone(d.batch_id))
        now += gap
    while pending:
        k = min(pending, key=lambda k: pending[k][0])
        t, d = pending.pop(k)
        out = sched.step(max(now, t), nodes(1, vcpus=64), [BatchDone(d.batch_id)])
        outs += out.outcomes
        pending.update({x.batch_id: (max(now, t) + latency(x), x) for x in out.dispatches})
    return outs


def test_explored_batches_keep_the_slo_and_the_budget():
    app = App("one", 400.0, ("f",))
    p = measured([(1, 1, None, 100.0)], bound=60_000.0)
    ex = Explorer(fraction=0.1)
    s = Scheduler({"one": app}, make_policy("esg", PolicyContext({"one": app}, {"f": p}, specs={"f": CPU})),
                  explorer=ex)
    lat = {c: 100.0 * c.batch / c.vcpus for c in grid(CPU, "A100-40GB")}
    outs = run_app(app, s, lambda d: lat[d.config], 300)
    assert len(outs) == 300 and all(o.slo_hit for o in outs)
    assert 0 < ex.jobs <= 0.1 * 300 + ex.burst

