"""ESG's pool rule (esg.policies.rules.pool_sizing, esg.prewarm.spare_instance with ``idle_elsewhere``): while the
load seen keeps at most ``FILL_BUSY`` of the MIG instances busy, a GPU function gets one more worker
on an instance ESG holds already for other functions (no MIG change, no instance more), on the profiles
ESG_1Q's plan for a fresh request uses -- before any of its heads waits. A rule of the scheduler step, so
the emulator and the live service decide alike."""

from __future__ import annotations

from esg.cluster import ClusterSnapshot, NodeState, Slice, SliceRef
from esg.events import Arrival, Request
from esg.index import idle_by_function
from esg.model import App
from esg.policies import PolicyContext
from esg.policies.rules.pool_sizing import BURST_STARTS, FILL_BUSY, PoolSizing
from esg.prewarm import spare_instance
from esg.scheduler import Scheduler

from .helpers import esg, profile

F_REF, G1, G2 = SliceRef("1g.5gb", 0), SliceRef("1g.5gb", 1), SliceRef("1g.5gb", 2)
D3 = SliceRef("3g.20gb", 4)


def node(name: str, idle: dict, refs=(F_REF, G1, G2), busy=()) -> NodeState:
    return NodeState(name, 16, 16, "A100-40GB", [Slice(r, busy=r in busy) for r in refs], idle_workers=dict(idle))


# -- which instance is spare, with the other nodes counted ---------------------------------------------
def test_a_holder_whose_other_idle_worker_is_on_another_node_leaves_its_instance_spare():
    here = node("n0", {("f", F_REF): 1, ("g", G1): 1})
    there = node("n1", {("g", G2): 1})
    assert spare_instance(here, "f", "1g.5gb") is None, "on this node G1 holds g's only idle worker"
    assert spare_instance(here, "f", "1g.5gb", idle_by_function(there, "1g.5gb")) == G1
    assert spare_instance(here, "f", "1g.5gb", {"g": 0}) is None
    assert idle_by_function(node("n1", {("g", G2): 1}, busy=(G2,)), "1g.5gb") == {}, "a busy instance serves no one"


# -- the rule in the scheduler step ----------------------------------------------------------------------
def scheduler(latency_ms: float, slo_ms: float = 100.0, cold_ms: float = 1000.0, mig_ms: float = 2000.0,
              **flags) -> Scheduler:
    app = App("a", slo_ms, ("f",), ())
    ctx = PolicyContext({"a": app}, {"f": profile("f", [(1, 1, "1g.5gb", latency_ms)], cold_start_ms=cold_ms)},
                        mig_reconfig_ms=mig_ms)
    return Scheduler({"a": app}, esg(ctx, **{"spare_instances": False, **flags}))


def snapshot() -> ClusterSnapshot:
    return ClusterSnapshot({"n0": node("n0", {("f", F_REF): 1, ("g", G1): 1, ("g", G2): 1})}, tracks_workers=True)


def test_a_function_with_load_gets_a_worker_on_a_held_instance_before_any_head_waits():
    out = scheduler(10.0).step(0.0, snapshot(), [Arrival(Request("r0", "a", 0.0))])
    assert out.dispatches[0].fit.warm_worker == ("f", F_REF) and not out.waiting
    (p,) = out.prewarms
    assert p.function == "f" and p.fit.slice in (G1, G2) and not p.fit.create and not p.fit.destroy


def test_no_pool_start_when_switched_off():
    out = scheduler(10.0, pool_sizing=False).step(0.0, snapshot(), [Arrival(Request("r0", "a", 0.0))])
    assert out.dispatches and not out.prewarms


def test_no_pool_for_a_function_whose_cold_start_fits_its_slo():
    """A worker started on demand serves a fresh request in time when the cold start plus the run fits
    the SLO (90 + 10 <= 100 ms): then no pool; 1 ms more and the pool grows as before."""
    def prewarms(cold_ms: float):
        out = scheduler(10.0, cold_ms=cold_ms).step(0.0, snapshot(), [Arrival(Request("r0", "a", 0.0))])
        assert out.dispatches[0].fit.warm_worker == ("f", F_REF)
        return [p.function for p in out.prewarms]
    assert prewarms(0.0) == [] and prewarms(90.0) == []
    assert prewarms(91.0) == ["f"]


def test_no_pool_start_while_the_load_keeps_the_instances_busy():
    # f's jobs take 900 ms each, counted over a re-warm (a 2000 ms cold start, MIG changes free): one job
    # keeps 0.45 of an instance busy, 0.15 of the three; three jobs 0.45 of them, above FILL_BUSY (the
    # two that wait start no worker: their 1800 ms of work is less than a cold start)
    assert 0.15 <= FILL_BUSY < 0.45
    def run(n: int):
        s = scheduler(900.0, 1000.0, cold_ms=2000.0, mig_ms=0.0)
        return s.step(0.0, snapshot(), [Arrival(Request(f"r{i}", "a", 0.0)) for i in range(n)])
    one = run(1)
    assert [p.function for p in one.prewarms] == ["f"]
    three = run(3)
    assert len(three.dispatches) == 1 and len(three.waiting) == 1
    assert not three.prewarms


def test_the_pool_grows_on_every_profile_the_fresh_plan_uses():
    """d runs on a 3g instance (7 ms); a 1g worker (22 ms) also meets its 100 ms SLO, so ESG_1Q's plan
    lists 1g too and d's pool grows onto the 1g instances held for g; at 150 ms on 1g it does not."""
    def run(latency_1g: float):
        app = App("a", 100.0, ("d",), ())
        prof = profile("d", [(1, 1, "3g.20gb", 7.0), (1, 1, "1g.5gb", latency_1g)], cold_start_ms=1000.0)
        s = Scheduler({"a": app}, esg(PolicyContext({"a": app}, {"d": prof}, mig_reconfig_ms=2000.0),
                                            spare_instances=False))
        snap = ClusterSnapshot({"n0": node("n0", {("d", D3): 1, ("g", G1): 1, ("g", G2): 1}, refs=(D3, G1, G2))},
                               tracks_workers=True)
        return s.step(0.0, snap, [Arrival(Request("r0", "a", 0.0))])

    near = run(22.0)
    assert near.dispatches[0].fit.slice == D3
    (p,) = near.prewarms
    assert p.function == "d" and p.config.gpu == "1g.5gb" and p.fit.slice in (G1, G2) and not p.fit.create
    assert not run(150.0).prewarms, "a 1g worker could not meet the SLO: no pool there"


# -- several pool starts at a time per node while the instances are nearly idle ----------------------------
H_REF, G3, G4 = SliceRef("1g.5gb", 3), SliceRef("1g.5gb", 5), SliceRef("1g.5gb", 6)


def two_functions(**pool) -> tuple[Scheduler, list]:
    """Apps f and h (10 ms on 1g, a 1000 ms cold start, 2000 ms a MIG instance) on one node that holds f's
    and h's instances and four more held for g; f and h each get a request at 0 ms and at 5 ms (the
    pool rule's figures ``pool`` given). Returns the scheduler and the two steps' pre-warms."""
    apps = {"af": App("af", 100.0, ("f",), ()), "ah": App("ah", 100.0, ("h",), ())}
    profs = {fn: profile(fn, [(1, 1, "1g.5gb", 10.0)], cold_start_ms=1000.0) for fn in ("f", "h")}
    policy = esg(PolicyContext(apps, profs, mig_reconfig_ms=2000.0), spare_instances=False, **pool)
    s = Scheduler(apps, policy)
    refs = (F_REF, G1, G2, H_REF, G3, G4)

    def snap() -> ClusterSnapshot:
        idle = {("f", F_REF): 1, ("h", H_REF): 1, ("g", G1): 1, ("g", G2): 1, ("g", G3): 1, ("g", G4): 1}
        return ClusterSnapshot({"n0": node("n0", idle, refs=refs)}, tracks_workers=True)

    first = s.step(0.0, snap(), [Arrival(Request("f0", "af", 0.0)), Arrival(Request("h0", "ah", 0.0))])
    second = s.step(5.0, snap(), [Arrival(Request("f1", "af", 5.0)), Arrival(Request("h1", "ah", 5.0))])
    return s, [first.prewarms, second.prewarms]


def test_while_the_instances_are_nearly_idle_a_second_pool_starts_before_the_first_worker_is_ready():
    # the load: 4 jobs of 10 ms over a 3000 ms re-warm, far below BURST_BUSY of 6 instances
    s, (first, second) = two_functions()
    assert s.policy.rule(PoolSizing).burst_starts == BURST_STARTS > 1
    assert len(first) == 1 and len(second) == 1, "one start a node a step, a second before the first is ready"
    assert {first[0].function, second[0].function} == {"f", "h"}
    assert second[0].fit.slice in (G1, G2, G3, G4) and not second[0].fit.create


def test_one_pool_start_at_a_time_per_node_when_burst_starts_are_off():
    _, (first, second) = two_functions(burst_starts=1)
    assert len(first) == 1 and not second, "the first worker is still starting: no second start on n0"


def test_one_pool_start_at_a_time_above_the_burst_share():
    _, (first, second) = two_functions(burst_busy=0.0)
    assert len(first) == 1 and not second
