"""ESG's wait for a busy worker (esg.policies.rules.wait_for_busy, on by default): a
head with an on-time plan whose function has a worker that frees within the head's budget -- running a
batch of the function for another app's queue, or idle on an instance busy with another function's
batch -- waits for it instead of starting a new worker (a cold start of seconds). A rule of the
scheduler step, so the emulator and the live service decide alike."""

from __future__ import annotations

from esg.cluster import ClusterSnapshot, NodeState, Slice, SliceRef
from esg.events import Arrival, BatchDone, Request
from esg.model import App
from esg.placement import WAITING_FOR_A_WORKER
from esg.policies import PolicyContext
from esg.scheduler import Scheduler

from .helpers import esg, profile

A_REF, SPARE = SliceRef("1g.5gb", 0), SliceRef("1g.5gb", 1)


def snapshot(idle: dict) -> ClusterSnapshot:
    """One A100 node with two idle 1g instances: A_REF holds ``idle`` workers, SPARE none."""
    n0 = NodeState("n0", 16, 16, "A100-40GB", [Slice(A_REF), Slice(SPARE)], idle_workers=dict(idle))
    return ClusterSnapshot({"n0": n0}, tracks_workers=True)


def scheduler(apps: dict[str, App], latency: dict[str, float], **flags) -> Scheduler:
    ctx = PolicyContext(apps, {f: profile(f, [(1, 1, "1g.5gb", ms)], cold_start_ms=1000.0) for f, ms in latency.items()},
                        mig_reconfig_ms=2000.0)
    # the pool and spare-instance rules off: only the scale-out decision is looked at
    return Scheduler(apps, esg(ctx, pool_sizing=False, spare_instances=False, **flags))


def test_a_head_waits_for_its_functions_worker_busy_with_another_apps_batch():
    apps = {"a": App("a", 100.0, ("f",), ()), "b": App("b", 100.0, ("f",), ())}
    for flags, waits in (({}, True), ({"wait_for_busy": False}, False)):
        s = scheduler(apps, {"f": 10.0}, **flags)
        snap = snapshot({("f", A_REF): 1})
        (first,) = s.step(0.0, snap, [Arrival(Request("r0", "a", 0.0))]).dispatches
        assert first.fit.warm_worker == ("f", A_REF)
        out = s.step(1.0, snap, [Arrival(Request("r1", "b", 1.0))])
        if waits:  # a's batch ends at about 12.5 ms; b's head has 99 ms left for a 10 ms batch
            assert not out.dispatches and out.waiting[("b", "f")].startswith(WAITING_FOR_A_WORKER)
            # the batch ends: the worker is idle on its instance again and takes b's head, warm
            done = s.step(13.0, snapshot({("f", A_REF): 1}), [BatchDone(first.batch_id)])
            (d,) = done.dispatches
            assert d.app == "b" and d.fit.warm_worker == ("f", A_REF)
        else:  # b's queue runs nothing: the shared rule starts f cold on the empty instance
            (d,) = out.dispatches
            assert d.app == "b" and d.fit.warm_worker is None and d.fit.slice == SPARE


def test_a_head_waits_for_an_idle_worker_on_an_instance_busy_with_another_function():
    # g's idle worker and f's idle worker share A_REF (as the pool rule lays them out); g's batch takes it
    apps = {"a": App("a", 100.0, ("g",), ()), "b": App("b", 100.0, ("f",), ())}
    for flags, waits in (({}, True), ({"wait_for_busy": False}, False)):
        s = scheduler(apps, {"f": 10.0, "g": 10.0}, **flags)
        snap = snapshot({("f", A_REF): 1, ("g", A_REF): 1})
        (first,) = s.step(0.0, snap, [Arrival(Request("r0", "a", 0.0))]).dispatches
        assert first.fit.warm_worker == ("g", A_REF)
        out = s.step(1.0, snap, [Arrival(Request("r1", "b", 1.0))])
        if waits:
            assert not out.dispatches and out.waiting[("b", "f")].startswith(WAITING_FOR_A_WORKER)
        else:
            (d,) = out.dispatches
            assert d.fit.warm_worker is None and d.fit.slice == SPARE


def test_a_worker_that_frees_too_late_for_the_head_is_not_waited_for():
    # g's batch takes 60 ms; f's head (40 ms SLO) would end after its deadline on A_REF: f starts cold
    apps = {"a": App("a", 100.0, ("g",), ()), "b": App("b", 40.0, ("f",), ())}
    s = scheduler(apps, {"f": 10.0, "g": 60.0})
    snap = snapshot({("f", A_REF): 1, ("g", A_REF): 1})
    s.step(0.0, snap, [Arrival(Request("r0", "a", 0.0))])
    (d,) = s.step(1.0, snap, [Arrival(Request("r1", "b", 1.0))]).dispatches
    assert d.function == "f" and d.fit.warm_worker is None and d.fit.slice == SPARE


def test_a_head_starts_a_worker_when_the_busy_one_frees_too_late():
    # b's job starts g's first worker cold (1 s and a 2 s MIG instance): it frees seconds after a's head,
    # with 99 ms left, must end -- so a's head starts its own
    apps = {name: App(name, 100.0, ("g",), ()) for name in ("a", "b")}
    ctx = PolicyContext(apps, {"g": profile("g", [(1, 1, "1g.5gb", 10.0)], cold_start_ms=1000.0)},
                        mig_reconfig_ms=2000.0)
    s = Scheduler(apps, esg(ctx))
    snap = ClusterSnapshot({"n0": NodeState("n0", 16, 16, "A100-40GB")}, tracks_workers=True)
    (first,) = s.step(0.0, snap, [Arrival(Request("r0", "b", 0.0))]).dispatches
    assert first.fit.warm_worker is None
    (d,) = s.step(1.0, snap, [Arrival(Request("r1", "a", 1.0))]).dispatches
    assert d.app == "a" and d.fit.warm_worker is None, "a start-up of seconds for a head with 99 ms left"
