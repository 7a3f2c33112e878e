"""Pre-warming in the core: where a pre-warm goes (esg.prewarm), what the scheduler does with it, and
each policy's defining pre-warm and keep-alive rule."""

from __future__ import annotations

import math

import pytest

from esg.cluster import ClusterSnapshot, Fit, NodeState, Slice, SliceRef
from esg.events import Arrival, Dispatch, Request
from esg.model import App, Config
from esg.policies import PolicyContext, make_policy
from esg.policies.aquatope import INTERVAL_MS, ForecastPool
from esg.policies.base import Starting, rewarm_ms
from esg.policies.infless import BIN_MS, MARGIN, LsthWarmPool
from esg.policies.rules.jit_prewarm import JitPrewarm
from esg.policies.rules.shared import PlannedChoice
from esg.prewarm import WarmUp, place_warmup
from esg.queues import AfwQueue
from esg.scheduler import Scheduler

from .helpers import profile

CHAIN = App("chain", 500.0, ("a", "b"), (("a", "b"),))
A_ROWS = [(1, 1, None, 10.0)]
B_ROWS = [(1, 1, "1g.5gb", 5.0), (1, 1, "3g.20gb", 3.0)]


def tracked(n: int = 2, idle: dict | None = None, slices: dict | None = None) -> ClusterSnapshot:
    return ClusterSnapshot({f"n{i}": NodeState(f"n{i}", 16, 16, "A100-40GB", list((slices or {}).get(f"n{i}", [])),
                                               idle_workers=dict((idle or {}).get(f"n{i}", {})))
                            for i in range(n)}, tracks_workers=True)


def scheduler(policy: str, cold_ms: float = 1000.0, mig_ms: float = 2000.0, prewarm: bool = True) -> Scheduler:
    profiles = {"a": profile("a", A_ROWS, cold_start_ms=cold_ms), "b": profile("b", B_ROWS, cold_start_ms=cold_ms)}
    ctx = PolicyContext({"chain": CHAIN}, profiles, mig_reconfig_ms=mig_ms)
    return Scheduler({"chain": CHAIN}, make_policy(policy, ctx), prewarm=prewarm)


# -- the shared rule --------------------------------------------------------------------------------
def test_a_prewarm_reserves_its_instance_and_never_destroys_one():
    snap = tracked(1)
    want = WarmUp("chain", "b", Config(1, 1, "3g.20gb"), 1000.0)
    first, second = place_warmup(snap, want), place_warmup(snap, want)
    assert first is not None and first.create and second is not None and second.slice != first.slice
    assert snap.nodes["n0"].vcpus_free == 14, "each start holds its vCPUs"
    assert place_warmup(snap, want) is None, "two 3g instances fill the GPU: no third, nothing destroyed"
    assert all(s.busy for s in snap.nodes["n0"].slices)


def test_a_prewarm_skips_an_instance_that_holds_an_idle_worker_of_the_function():
    ref = SliceRef("1g.5gb", 6)
    snap = tracked(2, idle={"n0": {("b", ref): 1}}, slices={"n0": [Slice(ref)]})
    fit = place_warmup(snap, WarmUp("chain", "b", Config(1, 1, "1g.5gb"), 1000.0, preferred=("n0",)))
    assert fit is not None and fit.node == "n1" and fit.create, "n0's idle 1g instance has a worker of b"


def test_only_preferred_keeps_a_prewarm_on_its_node():
    snap = tracked(2, slices={"n0": [Slice(SliceRef("7g.40gb", 0), busy=True)]})
    want = WarmUp("chain", "b", Config(1, 1, "1g.5gb"), 1000.0, preferred=("n0",), only_preferred=True)
    assert place_warmup(snap, want) is None, "n0's GPU is full and n1 is not allowed"


# -- ESG: JIT along the DAG --------------------------------------------------------------------------
def test_esg_prewarms_the_successor_on_the_predecessors_node_ready_at_its_planned_end():
    s = scheduler("esg")
    snap = tracked(2)
    out = s.step(100.0, snap, [Arrival(Request("r0", "chain", 100.0))])
    (d,) = out.dispatches
    (p,) = out.prewarms
    assert p.function == "b" and p.node == d.node
    assert p.config.gpu == "1g.5gb", "b's configuration on the cheapest planned path"
    assert p.ready_by_ms == pytest.approx(100.0 + d.planned_latency_ms)
    assert p.fit.create and any(sl.ref == p.fit.slice and sl.busy for sl in snap.nodes[d.node].slices)
    # b's worker counts as near a's node while it starts: the next batch of a there starts none more
    assert s.policy.rule(JitPrewarm).warm_near("b", "1g.5gb", d.node, snap, 101.0)
    assert not s.policy.rule(JitPrewarm).warm_near("b", "1g.5gb", d.node, snap, 100.0 + 3001.0), "started by then"


def test_esg_does_not_prewarm_where_an_idle_worker_of_that_kind_waits():
    s = scheduler("esg")
    ref = SliceRef("1g.5gb", 6)
    snap = tracked(1, idle={"n0": {("b", ref): 1}}, slices={"n0": [Slice(ref)]})
    out = s.step(0.0, snap, [Arrival(Request("r0", "chain", 0.0))])
    assert out.dispatches and not out.prewarms


def test_esg_times_a_prewarm_from_the_planned_latency_when_the_start_up_is_shorter():
    s = scheduler("esg", cold_ms=4.0, mig_ms=0.0)
    snap = tracked(1)
    out = s.step(0.0, snap, [Arrival(Request("r0", "chain", 0.0))])
    (d,) = out.dispatches
    start = d.planned_latency_ms - 4.0  # ready when a's batch ends: its planned 10 ms less b's start-up
    assert not out.prewarms and out.wake_at_ms == pytest.approx(start)
    later = s.step(start, snap, [])
    assert [p.function for p in later.prewarms] == ["b"] and later.prewarms[0].node == d.node


def test_esg_by_default_keeps_the_platforms_keep_alive():
    profiles = {"a": profile("a", A_ROWS, cold_start_ms=100.0), "b": profile("b", B_ROWS, cold_start_ms=100.0)}
    pol = make_policy("esg", PolicyContext({"chain": CHAIN}, profiles))
    for i in range(40):
        pol.on_arrival(Request(f"r{i}", "chain", 50.0 * i), CHAIN, 50.0 * i)
    assert pol.keep_alive_ms("chain", "b", 2000.0) is None


def test_no_prewarm_and_the_drivers_keep_alive_when_prewarming_is_off():
    s = scheduler("esg", prewarm=False)
    out = s.step(0.0, tracked(2), [Arrival(Request("r0", "chain", 0.0))])
    assert out.dispatches and not out.prewarms and out.dispatches[0].keep_alive_ms is None


# -- INFless: LSTH ------------------------------------------------------------------------------------
def _infless():
    profiles = {"a": profile("a", A_ROWS, cold_start_ms=1000.0), "b": profile("b", B_ROWS, cold_start_ms=1000.0)}
    return make_policy("infless", PolicyContext({"chain": CHAIN}, profiles, mig_reconfig_ms=2000.0))


def test_infless_keeps_a_worker_for_its_histograms_windows():
    pol = _infless()
    for i in range(30):  # a call every 30 s: every idle time in the first one-minute bin
        pol.on_arrival(Request(f"r{i}", "chain", 30_000.0 * i), CHAIN, 30_000.0 * i)
    head, keep = pol.rule(LsthWarmPool).lsth["chain"].windows()
    assert head == 0.0 and keep == pytest.approx(BIN_MS * (1 + MARGIN))
    assert pol.keep_alive_ms("chain", "a", 0.0) == pytest.approx(keep)


def test_infless_releases_a_worker_and_prewarms_it_back_at_its_prewarm_window():
    pol = _infless()
    t = 0.0
    for i in range(30):  # a call every 5 minutes: pre-warm window 4.5 min, far beyond a re-warm
        t = 300_000.0 * i
        pol.on_arrival(Request(f"r{i}", "chain", t), CHAIN, t)
    head, keep = pol.rule(LsthWarmPool).lsth["chain"].windows()
    assert head == pytest.approx(5 * BIN_MS * (1 - MARGIN))
    assert pol.keep_alive_ms("chain", "a", t) == 0.0, "released after its batch"
    d = Dispatch("b0", "chain", "a", (), Config(1, 1, None), Fit("n0"), 10.0)
    snap = tracked(1)
    assert pol.prewarm(t, snap, [d]) == []
    start = t + 10.0 + head - 1000.0  # ready at the pre-warm window after the batch's end
    assert pol.prewarm_wake_ms() == pytest.approx(start)
    (w,) = pol.prewarm(start, snap, [])
    assert w.function == "a" and w.keep_alive_ms == pytest.approx(keep) and w.ready_by_ms == pytest.approx(t + 10 + head)


# -- Orion: downstream pre-warming -----------------------------------------------------------------
def test_orion_prewarms_the_downstream_stage_in_its_planned_configuration():
    s = scheduler("orion", cold_ms=1000.0, mig_ms=2000.0)
    snap = tracked(2)
    out = s.step(0.0, snap, [Arrival(Request("r0", "chain", 0.0))])
    (p,) = out.prewarms
    plan = s.policy.proposer._fixed["r0"]
    assert p.function == "b" and p.config == plan["b"] and p.keep_alive_ms is None, "the driver's default"
    # an idle worker of that kind anywhere is Orion's spare: no pre-warm then
    s2 = scheduler("orion")
    ref = SliceRef(plan["b"].gpu, 6 if plan["b"].gpu == "1g.5gb" else 4)
    snap2 = tracked(2, idle={"n1": {("b", ref): 1}}, slices={"n1": [Slice(ref)]})
    assert not s2.step(0.0, snap2, [Arrival(Request("r0", "chain", 0.0))]).prewarms


# -- Aquatope: the predicted pool ------------------------------------------------------------------
def test_aquatope_prewarms_the_predicted_number_of_workers():
    profiles = {"a": profile("a", [(1, 1, None, 50.0)]), "b": profile("b", [(1, 1, "1g.5gb", 40.0)])}
    pol = make_policy("aquatope", PolicyContext({"chain": CHAIN}, profiles))
    t = 0.0
    for k in range(30):  # 550 calls in each interval, steady: the prediction converges to 550
        for i in range(550):
            t = k * INTERVAL_MS + i * INTERVAL_MS / 550
            pol.on_arrival(Request(f"r{k}-{i}", "chain", t), CHAIN, t)
    boundary = 30 * INTERVAL_MS
    wants = pol.prewarm(boundary, tracked(2), [])
    forecast_pool = pol.rule(ForecastPool)
    f = forecast_pool.forecasts["chain"]
    assert f.mean == pytest.approx(550.0, rel=1e-3) and 550.0 < f.upper() < 560.0, "the spread over-provisions a little"
    # the busiest second holds 55 calls (56 where a second's edges catch one more)
    assert 55.0 <= f.peak_rate_per_ms() * 1000.0 <= 57.5
    # Little's law at that peak: 55/s x (50 ms x P95 factor + hop) in flight on average, the pool its
    # Poisson 95th percentile (a reference sum of the Poisson probabilities, term by term)

    def pool(latency_ms):
        mean = f.peak_rate_per_ms() * (latency_ms * pol.proposer.p95 + pol.ctx.stage_overhead_ms)
        n, total = 0, math.exp(-mean)
        while total < 0.95:
            n += 1
            total += math.exp(-mean) * mean ** n / math.factorial(n)
        return n
    assert sum(w.function == "a" for w in wants) == pool(50.0) >= 4
    assert sum(w.function == "b" for w in wants) == pool(40.0) >= 3
    assert all(w.config.gpu == "1g.5gb" for w in wants if w.function == "b")
    # workers running count towards the pool: two batches of a in flight leave two fewer to start
    forecast_pool.running[("chain", "a")] = 2
    forecast_pool._next_ms = boundary  # asked again at the same boundary
    again = pol.prewarm(boundary, tracked(2), [])
    assert sum(w.function == "a" for w in again) == pool(50.0) - 2
    assert pol.prewarm_wake_ms() == boundary + INTERVAL_MS
    assert pol.keep_alive_ms("chain", "a", boundary) == 2 * INTERVAL_MS


# -- mends: per-batch plans, the hop in a start-up, CPU-only re-warms ---------------------------------
class _Scripted:
    """A proposer whose choices are given in order, the rest asked of ``inner`` (a compiled proposer's
    methods cannot be replaced on it)."""

    def __init__(self, inner, plans):
        self.inner, self.plans = inner, plans

    def choose(self, *args):
        return next(self.plans)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def test_esg_prewarms_each_batch_of_a_queue_from_the_plan_it_was_placed_from():
    """Two batches of a's queue dispatched in one step, placed from plans with b on different MIG
    profiles: each pre-warms its own plan's b (not both the last plan's)."""
    profiles = {"a": profile("a", A_ROWS, cold_start_ms=1000.0), "b": profile("b", B_ROWS, cold_start_ms=1000.0)}
    cpu = Config(1, 1, None)
    plans = iter([PlannedChoice((cpu,), downstream={"b": Config(1, 1, "1g.5gb")}, app="chain"),
                  PlannedChoice((cpu,), downstream={"b": Config(1, 1, "3g.20gb")}, app="chain")])
    pol = make_policy("esg", PolicyContext({"chain": CHAIN}, profiles, mig_reconfig_ms=2000.0))
    pol.proposer = _Scripted(pol.proposer, plans)  # the composition asks its proposer for each choice
    snap = tracked(1)
    batches = []
    for i in range(2):
        pol.choose(CHAIN, AfwQueue(("chain", "a")), 0.0, snap)
        d = Dispatch(f"b{i}", "chain", "a", (), cpu, Fit("n0"), 10.0)
        pol.on_dispatch(d)
        batches.append(d)
    wants = pol.prewarm(0.0, snap, batches)
    assert sorted(w.config.gpu for w in wants) == ["1g.5gb", "3g.20gb"]
    assert not pol.rule(JitPrewarm)._placed_from, "a batch's choice is forgotten once used"


def test_a_prewarmed_worker_counts_as_starting_until_the_hop_is_over_too():
    """The drivers start a pre-warmed worker after the hop to it (the emulator: hop + MIG + cold start),
    so the policy counts it as starting for as long."""
    profiles = {"a": profile("a", A_ROWS, cold_start_ms=1000.0), "b": profile("b", B_ROWS, cold_start_ms=1000.0)}
    ctx = PolicyContext({"chain": CHAIN}, profiles, mig_reconfig_ms=2000.0, stage_overhead_ms=50.0)
    s = Scheduler({"chain": CHAIN}, make_policy("esg", ctx))
    snap = tracked(1)
    out = s.step(0.0, snap, [Arrival(Request("r0", "chain", 0.0))])
    (p,) = out.prewarms
    assert p.fit.create
    assert s.policy.rule(JitPrewarm).warm_near("b", "1g.5gb", p.node, snap, 3000.0 + 40.0), "still on its way: hop not over"
    assert not s.policy.rule(JitPrewarm).warm_near("b", "1g.5gb", p.node, snap, 3000.0 + 51.0)


def test_a_cpu_only_function_rewarms_without_a_mig_reconfiguration():
    profiles = {"a": profile("a", A_ROWS, cold_start_ms=100.0), "b": profile("b", B_ROWS, cold_start_ms=100.0)}
    pol = make_policy("esg", PolicyContext({"chain": CHAIN}, profiles, mig_reconfig_ms=2000.0))
    assert rewarm_ms(pol.ctx, "a") == pytest.approx(100.0), "a has only CPU configurations"
    assert rewarm_ms(pol.ctx, "b") == pytest.approx(2100.0)
    from esg.policies.context import FunctionSpec
    no_gpu = make_policy("esg", PolicyContext({"chain": CHAIN}, profiles, mig_reconfig_ms=2000.0,
                                              specs={"b": FunctionSpec(gpu=False)}))
    assert rewarm_ms(no_gpu.ctx, "b") == pytest.approx(100.0), "esg-gpu off: b runs on CPU only"


def test_infless_releases_a_cpu_only_worker_whose_window_covers_its_cold_start():
    """Pre-warm window 54 s: longer than a's 30 s cold start (a CPU-only function: no MIG instance to
    create), shorter than a GPU worker's 30 s + 60 s re-warm."""
    profiles = {"a": profile("a", A_ROWS, cold_start_ms=30_000.0), "b": profile("b", B_ROWS, cold_start_ms=30_000.0)}
    pol = make_policy("infless", PolicyContext({"chain": CHAIN}, profiles, mig_reconfig_ms=60_000.0))
    for i in range(30):  # a call every 90 s: every idle time in the second one-minute bin
        pol.on_arrival(Request(f"r{i}", "chain", 90_000.0 * i), CHAIN, 90_000.0 * i)
    head, _ = pol.rule(LsthWarmPool).lsth["chain"].windows()
    assert head == pytest.approx(BIN_MS * (1 - MARGIN))
    assert pol.keep_alive_ms("chain", "a", 0.0) == 0.0, "released, pre-warmed back"
    assert pol.keep_alive_ms("chain", "b", 0.0) > 0.0, "kept: a GPU re-warm takes longer than the window"


# -- the hop in a timed pre-warm's start ------------------------------------------------------------
def _with_hop(policy: str, hop_ms: float, cold_ms: float = 4.0):
    profiles = {"a": profile("a", [(1, 1, None, 200.0)], cold_start_ms=cold_ms),
                "b": profile("b", B_ROWS, cold_start_ms=cold_ms)}
    ctx = PolicyContext({"chain": CHAIN}, profiles, mig_reconfig_ms=0.0, stage_overhead_ms=hop_ms)
    return Scheduler({"chain": CHAIN}, make_policy(policy, ctx))


@pytest.mark.parametrize("policy", ["esg", "orion"])
def test_a_timed_prewarm_starts_a_hop_earlier_so_its_worker_is_ready_by_the_planned_end(policy):
    """A pre-warm's end counts the hop to its worker (``on_prewarm``, as the drivers time it): its start
    counts it too, so the worker is ready when the predecessor's batch is planned to end, not a hop
    later."""
    s = _with_hop(policy, hop_ms=50.0)
    snap = tracked(1)
    out = s.step(0.0, snap, [Arrival(Request("r0", "chain", 0.0))])
    (d,) = out.dispatches
    end = d.planned_latency_ms
    start = end - 50.0 - 4.0
    assert start > 0.0 and not out.prewarms and out.wake_at_ms == pytest.approx(start)
    (p,) = s.step(start, snap, []).prewarms
    assert p.function == "b" and p.ready_by_ms == pytest.approx(end)
    # ready (hop, then the cold start) exactly at the planned end
    warming = s.policy.rule(Starting).warming
    assert warming.count("b", end - 0.5) == 1 and warming.count("b", end + 0.5) == 0


def test_infless_times_its_prewarm_back_a_hop_earlier_too():
    profiles = {"a": profile("a", A_ROWS, cold_start_ms=1000.0), "b": profile("b", B_ROWS, cold_start_ms=1000.0)}
    pol = make_policy("infless", PolicyContext({"chain": CHAIN}, profiles, mig_reconfig_ms=2000.0,
                                               stage_overhead_ms=50.0))
    t = 0.0
    for i in range(30):
        t = 300_000.0 * i
        pol.on_arrival(Request(f"r{i}", "chain", t), CHAIN, t)
    head, _ = pol.rule(LsthWarmPool).lsth["chain"].windows()
    d = Dispatch("b0", "chain", "a", (), Config(1, 1, None), Fit("n0"), 10.0)
    assert pol.prewarm(t, tracked(1), [d]) == []
    assert pol.prewarm_wake_ms() == pytest.approx(t + 10.0 + head - 50.0 - 1000.0)
