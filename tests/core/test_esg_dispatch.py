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


def test_a_backlog_the_running_worker_clears_within_a_cold_start_waits_for_it():
    s = scheduler()
    s.step(0.0, cluster(), [Arrival(Request("r0", "one", 0.0))])
    out = s.step(1.0, cluster(), [Arrival(Request(f"q{i}", "one", 1.0)) for i in range(3)])
    # three jobs of at most 10 ms each on the running worker: 30 ms, against a 3 s cold start
    assert out.dispatches == [] and "warm worker" in out.waiting[("one", "f")]


def test_a_backlog_longer_to_clear_than_a_start_up_scales_out():
    s = scheduler()
    s.step(0.0, cluster(), [Arrival(Request("r0", "one", 0.0))])
    # 600 jobs, batch 1, at least 6 ms each on the one running worker: 3.6 s or more -- more than the 3 s
    # cold start, less than a new instance's start-up (a 2 s MIG change and the cold start): it waits
    out = s.step(1.0, cluster(), [Arrival(Request(f"q{i}", "one", 1.0)) for i in range(600)])
    assert not out.dispatches
    # 400 more: 6 s or more, against 5 s: it starts a worker
    out = s.step(2.0, cluster(), [Arrival(Request(f"p{i}", "one", 2.0)) for i in range(400)])
    assert len(out.dispatches) >= 1 and all(d.fit.warm_worker is None for d in out.dispatches)


LATE_APP = App("dnn", 50.0, ("g",), ())
LATE_ROWS = [(1, 1, None, 1300.0), (1, 1, "1g.5gb", 20.0), (4, 1, "1g.5gb", 45.0), (8, 1, "1g.5gb", 90.0),
             (1, 1, "3g.20gb", 8.0), (4, 1, "3g.20gb", 15.0), (8, 1, "3g.20gb", 28.0)]


def test_a_late_queue_is_planned_as_a_fresh_request_in_batches_not_on_a_cpu_worker():
    prof = profile("g", LATE_ROWS, cold_start_ms=3000.0)
    policy = make_policy("esg", PolicyContext({"dnn": LATE_APP}, {"g": prof}))
    s = Scheduler({"dnn": LATE_APP}, policy)
    # an idle CPU worker of g waits; eight jobs whose SLO (50 ms) ran out long ago
    idle = {("g", None): 1, ("g", SliceRef("1g.5gb", 0)): 1}
    snap = cluster(idle, [("1g.5gb", 0, False)])
    out = s.step(5000.0, snap, [Arrival(Request(f"r{i}", "dnn", 0.0)) for i in range(8)])
    # a fresh request could run g within 50 ms in a batch of 8 only on 3g (28 ms) -- not on the warm
    # 1g (90 ms) nor the CPU (1.3 s per job); the cheapest fresh plan on the existing 1g worker is
    # batch 4 (45 ms), so the warm 1g worker takes four jobs and nothing runs on the CPU
    assert out.dispatches and all(d.config.gpu is not None for d in out.dispatches)
    first = out.dispatches[0]
    assert first.config == Config(4, 1, "1g.5gb") and first.fit.warm_worker is not None


def test_start_up_is_in_the_path_evaluation_a_cold_kind_is_not_planned_within_a_short_budget():
    prof = profile("f", ROWS, cold_start_ms=3000.0)
    policy = make_policy("esg", PolicyContext({"one": APP}, {"f": prof}))
    s = Scheduler({"one": APP}, policy)
    warm = {("f", SliceRef("3g.20gb", 4)): 1}
    s.step(0.0, cluster(warm, [("3g.20gb", 4, False)]), [Arrival(Request("r", "one", 0.0))])
    queue = s.queues.non_empty()
    assert not list(queue)  # the warm 3g worker took it
    s.step(1.0, cluster(), [Arrival(Request("r2", "one", 1.0))])
    choice = policy.choose(APP, next(iter(s.queues.non_empty())), 1.0, cluster())
    # f's only worker runs on a 3g instance: the 1g configuration (cheaper, 10 ms) would need a new
    # instance and a cold start (3 s) that a 100 ms budget cannot cover
    assert choice.priorities == (Config(1, 1, "3g.20gb"),)
