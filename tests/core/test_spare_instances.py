"""ESG's spare-instance rule (esg.policies.rules.spare_instances, esg.prewarm.spare_instance): a head that waits for a busy
worker of its function gets that function a second worker on an idle MIG instance held already for
another function that keeps an idle worker elsewhere on the node -- no MIG change, no instance taken
from anyone. A rule of the scheduler step, so the emulator and the live service decide alike."""

from __future__ import annotations

from esg.cluster import ClusterSnapshot, NodeState, Slice, SliceRef
from esg.events import Arrival, Request
from esg.model import App, Config
from esg.placement import WAITING_FOR_A_WORKER
from esg.policies import PolicyContext
from esg.prewarm import WarmUp, place_warmup, spare_instance
from esg.scheduler import Scheduler

from .helpers import esg, profile

F_REF, G1, G2 = SliceRef("1g.5gb", 0), SliceRef("1g.5gb", 1), SliceRef("1g.5gb", 2)


def node(idle: dict, busy: tuple[SliceRef, ...] = (), refs=(F_REF, G1, G2)) -> NodeState:
    return NodeState("n0", 16, 16, "A100-40GB", [Slice(r, busy=r in busy) for r in refs], idle_workers=dict(idle))


# -- which instance is spare -------------------------------------------------------------------------
def test_an_instance_of_a_function_with_a_second_idle_worker_is_spare():
    n = node({("f", F_REF): 1, ("g", G1): 1, ("g", G2): 1})
    assert spare_instance(n, "f", "1g.5gb") in (G1, G2)


def test_the_last_idle_worker_of_another_function_keeps_its_instance():
    n = node({("f", F_REF): 1, ("g", G1): 1, ("h", G2): 1})
    assert spare_instance(n, "f", "1g.5gb") is None, "g and h would each lose their only idle worker"


def test_busy_empty_other_profile_and_own_instances_are_not_spare():
    assert spare_instance(node({("g", G1): 1, ("g", G2): 1}, busy=(G1, G2)), "f", "1g.5gb") is None
    assert spare_instance(node({("g", G1): 1}), "f", "1g.5gb") is None, "F_REF and G2 hold no worker"
    assert spare_instance(node({("g", G1): 1, ("g", G2): 1}), "f", "2g.10gb") is None
    assert spare_instance(node({("f", G1): 1, ("g", G1): 1, ("g", G2): 1}), "f", "1g.5gb") == G2


def test_a_prewarm_named_for_an_instance_takes_that_instance_or_nothing():
    snap = ClusterSnapshot({"n0": node({("g", G1): 1, ("g", G2): 1}, busy=(G1,))}, tracks_workers=True)
    want = WarmUp("a", "f", Config(1, 1, "1g.5gb"), preferred=("n0",), only_preferred=True, instance=G2)
    fit = place_warmup(snap, want)
    assert fit is not None and fit.slice == G2 and not fit.create and not fit.destroy
    assert all(s.busy for s in snap.nodes["n0"].slices if s.ref == G2), "reserved while it starts"
    assert place_warmup(snap, want) is None, "G2 is busy now: no other instance instead"


# -- ESG's rule in the scheduler step -----------------------------------------------------------------
def step_with_busy_worker(cold_ms: float = 1000.0, at_ms: float = 1.0, **flags):
    """f's one worker is busy with r0 when r1 comes (placed at ``at_ms``); g has idle workers on G1 and G2."""
    app = App("a", 100.0, ("f",), ())
    ctx = PolicyContext({"a": app}, {"f": profile("f", [(1, 1, "1g.5gb", 10.0)], cold_start_ms=cold_ms)},
                        mig_reconfig_ms=2000.0)
    s = Scheduler({"a": app}, esg(ctx, **{"pool_sizing": False, **flags}))  # the spare rule alone
    snap = ClusterSnapshot({"n0": node({("f", F_REF): 1, ("g", G1): 1, ("g", G2): 1})}, tracks_workers=True)
    first = s.step(0.0, snap, [Arrival(Request("r0", "a", 0.0))])
    assert first.dispatches[0].fit.warm_worker == ("f", F_REF) and not first.prewarms
    return s.step(at_ms, snap, [Arrival(Request("r1", "a", 1.0))])


def test_a_head_waiting_for_a_busy_worker_gets_its_function_a_worker_on_a_spare_instance():
    out = step_with_busy_worker()
    assert not out.dispatches and out.waiting[("a", "f")].startswith(WAITING_FOR_A_WORKER)
    (p,) = out.prewarms
    assert p.function == "f" and p.fit.slice in (G1, G2) and not p.fit.create and not p.fit.destroy


def test_no_spare_instance_start_when_switched_off():
    out = step_with_busy_worker(spare_instances=False)
    assert not out.dispatches and not out.prewarms


def test_no_spare_instance_start_for_a_function_whose_cold_start_fits_its_slo():
    """r1 (100 ms SLO, 10 ms run) is placed 49 ms after it came: a worker started now would not be in time
    for it, so it waits for f's busy one. With a 50 ms cold start a later request's head starts a worker
    of its own on demand in time (50 + 10 <= 100 ms): none is started ahead of it. With 1000 ms, one is."""
    fits = step_with_busy_worker(cold_ms=50.0, at_ms=50.0)
    assert not fits.dispatches and fits.waiting[("a", "f")].startswith(WAITING_FOR_A_WORKER)
    assert not fits.prewarms
    slow = step_with_busy_worker(cold_ms=1000.0, at_ms=50.0)
    assert [p.function for p in slow.prewarms] == ["f"]
