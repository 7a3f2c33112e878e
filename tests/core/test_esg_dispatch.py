"""ESG_Dispatch weighs start-up (MIG changes, cold starts) against the head job's budget."""

from esg.cluster import ClusterSnapshot, NodeState, Slice, SliceRef
from esg.events import Arrival, BatchDone, Request
from esg.model import App, Config
from esg.policies import PolicyContext, make_policy
from esg.scheduler import Scheduler

from .helpers import profile

APP = App("one", 100.0, ("f",), ())
ROWS = [(1, 1, "1g.5gb", 10.0), (1, 1, "3g.20gb", 6.0)]


def scheduler() -> Scheduler:
    prof = profile("f", ROWS, cold_start_ms=3000.0)
    return Scheduler({"one": APP}, make_policy("esg", PolicyContext({"one": APP}, {"f": prof})))


def cluster(idle: dict | None = None, slices=()) -> ClusterSnapshot:
    """Two empty A100 nodes; n0 carries ``slices`` (profile, start, busy) and ``idle`` warm workers."""
    n0 = NodeState("n0", 16, 16, "A100-40GB", [Slice(SliceRef(p, s), b) for p, s, b in slices],
                   idle_workers=dict(idle or {}))
    n1 = NodeState("n1", 16, 16, "A100-40GB")
    return ClusterSnapshot({"n0": n0, "n1": n1}, tracks_workers=True)


def test_a_warm_worker_beats_a_cheaper_configuration_that_would_start_cold():
    warm = {("f", SliceRef("3g.20gb", 4)): 1}
    snap = cluster(warm, [("3g.20gb", 4, False)])
    (d,) = scheduler().step(0.0, snap, [Arrival(Request("r", "one", 0.0))]).dispatches
    assert d.config == Config(1, 1, "3g.20gb") and d.fit.warm_worker is not None and not d.fit.reconfigures


def test_with_nothing_running_it_starts_cold_rather_than_wait_forever():
    (d,) = scheduler().step(0.0, cluster(), [Arrival(Request("r", "one", 0.0))]).dispatches
    assert d.fit.create and d.fit.warm_worker is None


def test_it_waits_for_the_running_worker_instead_of_starting_a_second_cold_one():
    s = scheduler()
    (first,) = s.step(0.0, cluster(), [Arrival(Request("r0", "one", 0.0))]).dispatches
    out = s.step(1.0, cluster(), [Arrival(Request("r1", "one", 1.0))])
    assert out.dispatches == [] and "warm worker" in out.waiting[("one", "f")]
    # the first batch finishes: its worker is idle and warm on its slice, and takes the waiting job
    warm = {("f", first.fit.slice): 1}
    snap = cluster(warm, [(first.fit.slice.profile, first.fit.slice.start, False)])
    (d,) = s.step(12.0, snap, [BatchDone(first.batch_id)]).dispatches
    assert d.fit.warm_worker == ("f", first.fit.slice)


def test_a_backlog_larger_than_the_running_batches_can_take_scales_out():
    s = scheduler()
    s.step(0.0, cluster(), [Arrival(Request("r0", "one", 0.0))])
    out = s.step(1.0, cluster(), [Arrival(Request(f"q{i}", "one", 1.0)) for i in range(3)])
    assert len(out.dispatches) >= 1  # three waiting, one batch of one running: start another
