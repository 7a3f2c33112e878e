"""ESG holds a queue for a larger batch when waiting is cheaper within the budget (EsgPolicy._hold), and the
two pool rules measured beside it: rules of the scheduler step, so the emulator and the live service
decide alike. All three are off by default (measured on the trace, docs/baselines.md)."""

from __future__ import annotations

import pytest

from esg.cluster import ClusterSnapshot, NodeState
from esg.events import Arrival, BatchDone, Request
from esg.model import App
from esg.placement import WAITING_FOR_A_WORKER
from esg.policies import PolicyContext, make_policy
from esg.policies.esg_policy import HOLD_GAPS, HOLDING, EsgPolicy
from esg.scheduler import Scheduler

from .helpers import profile

GAP_MS = 20.0
T0 = 1000.0
CHEAP_PAIR = [(1, 1, "1g.5gb", 10.0), (2, 1, "1g.5gb", 12.0)]
"""A batch of 2 costs 6 ms of the instance per request against 10 for a batch of 1."""


def tracked() -> ClusterSnapshot:
    return ClusterSnapshot({"n0": NodeState("n0", 16, 16, "A100-40GB")}, tracks_workers=True)


def scheduler(slo_ms: float = 100.0, rows=CHEAP_PAIR, hold: bool = True, gaps: int = HOLD_GAPS - 1) -> Scheduler:
    app = App("one", slo_ms, ("f",), ())
    ctx = PolicyContext({"one": app}, {"f": profile("f", rows)}, mig_reconfig_ms=0.0)
    policy = EsgPolicy(ctx, hold_batches=hold)
    for i in range(gaps + 1):  # the app's recent request gaps: one every GAP_MS before T0
        policy.on_arrival(Request(f"past{i}", "one", T0 - GAP_MS * (gaps + 1 - i)), app, 0.0)
    return Scheduler({"one": app}, policy, prewarm=False)


def arrive(rid: str, t: float) -> Arrival:
    return Arrival(Request(rid, "one", t))


def test_holds_when_a_larger_batch_is_cheaper_and_within_budget():
    s, snap = scheduler(), tracked()
    out = s.step(T0, snap, [arrive("r0", T0)])
    assert not out.dispatches and out.waiting[("one", "f")] == HOLDING
    assert out.wake_at_ms == pytest.approx(T0 + GAP_MS), "the next request is expected one mean gap later"
    later = s.step(T0 + 7.0, snap, [arrive("r1", T0 + 7.0)])
    (d,) = later.dispatches
    assert d.config.batch == 2 and [j.request_id for j in d.jobs] == ["r0", "r1"]


def test_the_held_jobs_are_dispatched_at_the_wake_time_within_their_budget_when_none_comes():
    s, snap = scheduler(), tracked()
    assert not s.step(T0, snap, [arrive("r0", T0)]).dispatches
    out = s.step(T0 + GAP_MS, snap, [])
    (d,) = out.dispatches
    assert d.config.batch == 1 and T0 + GAP_MS + d.planned_latency_ms <= d.jobs[0].deadline_ms
    assert out.wake_at_ms is None, "a head is held once: it is not held again"


def test_never_holds_past_the_budget():
    # 40 ms leave 30 ms of slack over the 10 ms batch: waiting the expected 20 ms would spend more than
    # the share of it that holding may take, so the job goes at once
    s = scheduler(slo_ms=40.0)
    out = s.step(T0, tracked(), [arrive("r0", T0)])
    (d,) = out.dispatches
    assert d.config.batch == 1 and out.wake_at_ms is None


def test_a_late_head_is_never_held():
    s, snap = scheduler(), tracked()
    out = s.step(T0 + 95.0, snap, [arrive("r0", T0)])  # 5 ms left: no plan meets it
    assert out.dispatches and ("one", "f") not in out.waiting


def test_dispatches_at_once_when_the_queue_fills_the_largest_batch():
    s = scheduler()
    out = s.step(T0, tracked(), [arrive("r0", T0), arrive("r1", T0)])
    (d,) = out.dispatches
    assert d.config.batch == 2 and out.wake_at_ms is None


def test_no_hold_when_the_larger_batch_is_not_cheaper_enough():
    s = scheduler(rows=[(1, 1, "1g.5gb", 10.0), (2, 1, "1g.5gb", 19.0)])  # 9.5 against 10 per request
    out = s.step(T0, tracked(), [arrive("r0", T0)])
    assert [d.config.batch for d in out.dispatches] == [1]


def test_no_hold_before_enough_gaps_were_seen_or_when_switched_off():
    # (the job's own request is the last gap seen)
    for s in (scheduler(gaps=HOLD_GAPS - 2), scheduler(hold=False)):
        out = s.step(T0, tracked(), [arrive("r0", T0)])
        assert [d.config.batch for d in out.dispatches] == [1]
    policy = make_policy("esg", PolicyContext({}, {}))
    assert not (policy.hold_batches or policy.widen_pools or policy.function_scale_out), "all off by default"


def test_a_busy_worker_still_runs_the_batch_when_it_frees():
    # the held batch goes through the usual placement: a job arriving while the head is held joins it
    s, snap = scheduler(), tracked()
    s.step(T0, snap, [arrive("r0", T0)])
    d = s.step(T0 + 5.0, snap, [arrive("r1", T0 + 5.0)]).dispatches[0]
    done = s.step(T0 + 20.0, snap, [BatchDone(d.batch_id)])
    assert {o.request_id for o in done.outcomes} == {"r0", "r1"} and all(o.slo_hit for o in done.outcomes)


# -- the two pool rules measured beside holding (off by default) -------------------------------------
SHARED = [(1, 1, "1g.5gb", 10.0)]


def shared_scheduler(**flags) -> Scheduler:
    """Two apps of one function g: a worker of g serves both apps' queues."""
    apps = {name: App(name, 100.0, ("g",), ()) for name in ("a", "b")}
    ctx = PolicyContext(apps, {"g": profile("g", SHARED, cold_start_ms=1000.0)}, mig_reconfig_ms=2000.0)
    return Scheduler(apps, EsgPolicy(ctx, **flags))


def _second_app_waits(s: Scheduler):
    snap = tracked()
    first = s.step(0.0, snap, [Arrival(Request("r0", "b", 0.0))])
    assert len(first.dispatches) == 1, "b's job starts g's first worker"
    return s.step(1.0, snap, [Arrival(Request("r1", "a", 1.0))])


def test_by_default_a_queue_with_no_batch_of_its_own_starts_a_worker_for_an_on_time_head():
    (d,) = _second_app_waits(shared_scheduler()).dispatches
    assert d.fit.warm_worker is None, "a start-up of seconds for a head with 99 ms left"


def test_function_scale_out_waits_for_the_functions_busy_worker_while_the_head_is_on_time():
    out = _second_app_waits(shared_scheduler(function_scale_out=True))
    assert not out.dispatches and out.waiting[("a", "g")].startswith(WAITING_FOR_A_WORKER)


def test_widen_pools_prewarms_one_more_worker_on_free_room_for_a_head_that_waits_for_a_busy_one():
    out = _second_app_waits(shared_scheduler(function_scale_out=True, widen_pools=True))
    (p,) = out.prewarms
    assert p.function == "g" and p.config.gpu == "1g.5gb" and not p.fit.destroy
    assert not _second_app_waits(shared_scheduler(function_scale_out=True)).prewarms
