"""The scheduler step function: batching, budgets handed on, locality, waiting when nothing fits."""

from __future__ import annotations

import pytest

from esg.cluster import ClusterSnapshot, NodeState
from esg.dispatch import home_node
from esg.errors import AppError
from esg.events import Arrival, BatchDone, Request
from esg.model import App, Config
from esg.policies import PolicyContext, make_policy
from esg.policies.base import FunctionSpec
from esg.scheduler import Scheduler

from .helpers import nodes, profile

CHAIN = App("chain", 100.0, ("a", "b"), (("a", "b"),))
CPU_ROWS = [(1, 1, None, 10.0), (2, 1, None, 12.0), (4, 1, None, 16.0), (1, 4, None, 4.0)]


def make(app: App = CHAIN, rows=CPU_ROWS, specs=None) -> Scheduler:
    profiles = {f: profile(f, rows) for f in app.functions}
    ctx = PolicyContext({app.name: app}, profiles, specs=specs or {})
    return Scheduler({app.name: app}, make_policy("esg", ctx))


def arrivals(n: int, at: float = 0.0, app: str = "chain") -> list[Arrival]:
    return [Arrival(Request(f"r{i}", app, at)) for i in range(n)]


def test_waiting_jobs_are_batched_with_the_cheapest_batch_that_fits():
    s = make()
    out = s.step(0.0, nodes(1), arrivals(4))
    assert [len(d.jobs) for d in out.dispatches] == [4]
    # batch 4 on 1 vCPU costs 16/4 = 4 per request, cheaper than any other option
    assert out.dispatches[0].config == Config(4, 1, None)
    assert {j.request_id for j in out.dispatches[0].jobs} == {"r0", "r1", "r2", "r3"}


def test_batch_never_exceeds_the_jobs_waiting_or_the_max_batch_annotation():
    s = make()
    out = s.step(0.0, nodes(1), arrivals(1))
    assert out.dispatches[0].config.batch == 1
    s = make(specs={"a": FunctionSpec(max_batch=2)})
    out = s.step(0.0, nodes(1), arrivals(4))
    assert all(d.config.batch <= 2 for d in out.dispatches)
    assert sum(len(d.jobs) for d in out.dispatches) == 4


def test_successor_is_enqueued_with_what_is_left_of_the_budget():
    s = make()
    first = s.step(0.0, nodes(1), arrivals(1)).dispatches[0]
    assert first.function == "a"
    later = s.step(70.0, nodes(1), [BatchDone(first.batch_id)])
    (d,) = later.dispatches
    assert d.function == "b"
    (job,) = d.jobs
    assert job.deadline_ms == 100.0  # the request's deadline is kept
    assert job.budget_ms(70.0) == pytest.approx(30.0)
    assert job.pred_node == first.node


def test_tight_remaining_budget_buys_a_faster_configuration():
    s = make()
    first = s.step(0.0, nodes(1), arrivals(1)).dispatches[0]
    assert first.config == Config(1, 1, None)  # plenty of budget: cheapest
    d = s.step(92.0, nodes(1), [BatchDone(first.batch_id)]).dispatches[0]
    assert d.config == Config(1, 4, None)  # 8 ms left: only the 4 ms config meets it


def test_the_plan_for_the_head_leaves_room_for_the_rest_of_the_app():
    # a's cheapest config takes 90 ms, which would leave b (>= 20 ms) no room in a 100 ms SLO
    rows_a = [(1, 1, None, 90.0), (1, 2, None, 30.0)]
    rows_b = [(1, 1, None, 20.0)]
    ctx = PolicyContext({"chain": CHAIN}, {"a": profile("a", rows_a), "b": profile("b", rows_b)})
    s = Scheduler({"chain": CHAIN}, make_policy("esg", ctx))
    (d,) = s.step(0.0, nodes(1), arrivals(1)).dispatches
    assert d.config == Config(1, 2, None)


def test_request_completes_when_its_sink_finishes_and_reports_slo_hit():
    s = make()
    a = s.step(0.0, nodes(1), arrivals(1)).dispatches[0]
    b = s.step(10.0, nodes(1), [BatchDone(a.batch_id)]).dispatches[0]
    out = s.step(25.0, nodes(1), [BatchDone(b.batch_id)])
    (o,) = out.outcomes
    assert o.ok and o.slo_hit and o.latency_ms == 25.0
    assert s.pending_requests() == 0


def test_late_request_counts_as_a_miss_and_failure_as_an_error():
    s = make()
    a = s.step(0.0, nodes(1), arrivals(2)).dispatches[0]
    out = s.step(150.0, nodes(1), [BatchDone(a.batch_id)])
    assert sum(len(d.jobs) for d in out.dispatches) == 2  # late jobs still run (best effort)
    done = s.step(160.0, nodes(1), [BatchDone(d.batch_id) for d in out.dispatches]).outcomes
    assert [o.slo_hit for o in done] == [False, False]
    assert all(o.ok for o in done)
    s2 = make()
    a2 = s2.step(0.0, nodes(1), arrivals(1)).dispatches[0]
    (o,) = s2.step(5.0, nodes(1), [BatchDone(a2.batch_id, ok=False, error="boom")]).outcomes
    assert not o.ok and o.error == "boom" and not o.slo_hit


def test_first_function_goes_to_its_home_node_and_successors_follow_their_predecessor():
    s = make()
    snap = nodes(5)
    a = s.step(0.0, snap, arrivals(1)).dispatches[0]
    assert a.node == home_node("chain", "a", list(snap.nodes))
    b = s.step(10.0, nodes(5), [BatchDone(a.batch_id)]).dispatches[0]
    assert b.node == a.node


def test_a_full_preferred_node_falls_back_to_the_node_with_most_free_capacity():
    s = make()
    snap = nodes(3)
    home = home_node("chain", "a", list(snap.nodes))
    snap.nodes[home].vcpus_free = 0
    others = [n for n in snap.nodes if n != home]
    snap.nodes[others[0]].vcpus_free = 3
    (d,) = s.step(0.0, snap, arrivals(1)).dispatches
    assert d.node == others[1]


def test_nothing_fits_so_the_job_waits_and_the_decision_says_why():
    s = make()
    full = ClusterSnapshot.of([NodeState("n0", 4, 0, None)])
    out = s.step(0.0, full, arrivals(2))
    assert out.dispatches == []
    assert "fits" in out.waiting[("chain", "a")]
    assert s.queue_lengths()[("chain", "a")] == 2
    # capacity comes back: the waiting jobs go out
    later = s.step(5.0, nodes(1), [])
    assert sum(len(d.jobs) for d in later.dispatches) == 2


def test_one_step_never_overcommits_a_node():
    s = make()
    snap = ClusterSnapshot.of([NodeState("n0", 2, 2, None)])
    app = App("wide", 1000.0, ("a",), ())
    s = Scheduler({"wide": app}, make_policy("esg", PolicyContext(
        {"wide": app}, {"a": profile("a", [(1, 1, None, 10.0)])})))
    out = s.step(0.0, snap, [Arrival(Request(f"r{i}", "wide", 0.0)) for i in range(5)])
    assert len(out.dispatches) == 2
    assert sum(d.config.vcpus for d in out.dispatches) <= 2


def test_gpu_configuration_carves_a_slice_and_reuses_an_idle_one():
    rows = [(1, 1, "1g.5gb", 5.0)]
    app = App("g", 100.0, ("a",), ())
    s = Scheduler({"g": app}, make_policy("esg", PolicyContext({"g": app}, {"a": profile("a", rows)})))
    snap = nodes(1)
    (d,) = s.step(0.0, snap, [Arrival(Request("r0", "g", 0.0))]).dispatches
    assert d.fit.create and d.fit.slice.profile == "1g.5gb"
    idle = nodes(1)
    idle.nodes["n0"].slices = [type(snap.nodes["n0"].slices[0])(d.fit.slice, busy=False)]
    (d2,) = s.step(1.0, idle, [Arrival(Request("r1", "g", 1.0))]).dispatches
    assert not d2.fit.create and d2.fit.slice == d.fit.slice


def test_cpu_only_annotation_keeps_a_function_off_the_gpu():
    rows = [(1, 1, "1g.5gb", 1.0), (1, 1, None, 50.0)]
    app = App("g", 100.0, ("a",), ())
    ctx = PolicyContext({"g": app}, {"a": profile("a", rows)}, specs={"a": FunctionSpec(gpu=False)})
    s = Scheduler({"g": app}, make_policy("esg", ctx))
    (d,) = s.step(0.0, nodes(1), [Arrival(Request("r0", "g", 0.0))]).dispatches
    assert d.config.gpu is None


def test_fan_in_waits_for_every_predecessor_and_duplicates_are_ignored():
    app = App("diamond", 1000.0, ("p", "x", "y", "v"), (("p", "x"), ("p", "y"), ("x", "v"), ("y", "v")))
    profs = {f: profile(f, [(1, 1, None, 10.0)]) for f in app.functions}
    s = Scheduler({"diamond": app}, make_policy("esg", PolicyContext({"diamond": app}, profs)))
    p = s.step(0.0, nodes(1), [Arrival(Request("r", "diamond", 0.0))] * 2).dispatches
    assert len(p) == 1  # the redelivered arrival is not enqueued twice
    xy = s.step(10.0, nodes(1), [BatchDone(p[0].batch_id)]).dispatches
    assert sorted(d.function for d in xy) == ["x", "y"]
    first = s.step(20.0, nodes(1), [BatchDone(xy[0].batch_id), BatchDone(xy[0].batch_id)])
    assert first.dispatches == []  # v waits for the other branch
    v = s.step(25.0, nodes(1), [BatchDone(xy[1].batch_id)]).dispatches
    assert [d.function for d in v] == ["v"]


def test_unknown_app_is_an_error_naming_it():
    s = make()
    with pytest.raises(AppError, match="nope"):
        s.step(0.0, nodes(1), [Arrival(Request("r", "nope", 0.0))])


def test_a_lost_batch_goes_back_to_the_head_of_its_queue():
    s = make()
    a = s.step(0.0, nodes(1), arrivals(1)).dispatches[0]
    from esg.events import BatchLost
    again = s.step(5.0, nodes(1), [BatchLost(a.batch_id)]).dispatches
    assert [j.job_id for d in again for j in d.jobs] == ["r0/a"]
    assert s.step(6.0, nodes(1), [BatchDone(a.batch_id)]).completed == []  # the lost batch is forgotten


def test_a_lost_batch_of_a_cancelled_request_is_not_run_again():
    from esg.events import BatchLost, Cancel

    s = make()
    a = s.step(0.0, nodes(1), arrivals(1)).dispatches[0]
    s.step(1.0, nodes(1), [Cancel("r0")])
    assert s.step(5.0, nodes(1), [BatchLost(a.batch_id)]).dispatches == []
    assert s.queues.total() == 0


def test_apps_can_be_added_at_run_time():
    s = make()
    app = App("late", 50.0, ("z",), ())
    s.add_app(app, {"z": profile("z", [(1, 1, None, 5.0)])})
    (d,) = s.step(0.0, nodes(1), [Arrival(Request("q", "late", 0.0))]).dispatches
    assert d.function == "z"
