"""A dispatch whose new worker needs GPU memory that idle workers of other functions hold on its MIG
instance names them (``evict``): the agent stops that many idle workers of each function on that same
instance before the new worker starts there, never one on another instance, and the next heartbeat
shows them gone. One that names none stops nothing; one that names more than are there stops those
there are, and its batch runs; a batch that finds its own worker warm starts nothing and stops nothing.

The real agent as a subprocess (fake A100-40GB, process workers), the real Redis; the test plays the
scheduler.
"""

from __future__ import annotations

import uuid
from collections import Counter

import pytest

from esg.cluster import SliceRef
from esg.model import Config
from tests.agent.agent_harness import AgentProcess, OpenWhiskStandIn, SchedulerSide

pytestmark = pytest.mark.timeout(120)

ECHO = "def main(args):\n    return {'i': args.get('i')}\n"
S, OTHER = SliceRef("3g.20gb", 4), SliceRef("3g.20gb", 0)
ON_MIG = Config(1, 1, "3g.20gb")


@pytest.fixture(scope="module")
def agent(redis_url, tmp_path_factory):
    ow = OpenWhiskStandIn()
    for name in ("f", "g", "h", "k"):
        ow.add(name, ECHO)
    prefix = f"t{uuid.uuid4().hex[:8]}_"
    proc = AgentProcess(tmp_path_factory.mktemp("agent"), redis_url, ow.url, "node-m", prefix,
                        "--fake-gpu", "A100-40GB", "--vcpus", "4", "--memory-mb", "8192")
    sched = SchedulerSide(redis_url, prefix)
    try:
        sched.heartbeat("node-m", timeout=30)
        yield sched, "node-m", proc
    finally:
        sched.close()
        proc.stop()
        ow.close()


def run(sched: SchedulerSide, node: str, function: str, slice_: SliceRef, n: int = 1, **kw):
    """Dispatch a batch of ``n`` of ``function`` on ``slice_`` and wait for its result (every request ok)
    and for the heartbeat that names it answered; both returned."""
    msg = sched.dispatch(node, function, [{"i": i} for i in range(n)], slice_=slice_,
                         config=Config(n, 1, slice_.profile), **kw)
    res = sched.result(msg.batch_id)
    assert [r.status_code for r in res.results] == [0] * n, res
    return res, sched.heartbeat(node, lambda h: msg.batch_id in h.done, after=0)


def idle(hb) -> Counter:
    """The heartbeat's idle workers by (function, slice)."""
    out: Counter = Counter()
    for w in hb.idle:
        out[(w.function, w.slice)] += w.count
    return out


def test_a_dispatch_stops_the_idle_workers_it_names_on_its_instance_only_and_only_for_a_new_worker(agent):
    sched, node, proc = agent
    # two idle workers of g on S (two callers: one worker each), one of g on another instance
    res, _ = run(sched, node, "g", S, 2, callers=["guest", "other"])
    assert res.cold is True
    _, hb = run(sched, node, "g", OTHER)
    assert idle(hb) == {("g", S): 2, ("g", OTHER): 1}, hb

    # f needs a new worker on S, where one worker of g is in the way: exactly that one goes, first
    res, hb = run(sched, node, "f", S, evict=(("g", 1),))
    assert res.cold is True and res.reconfigured == 0, res
    assert idle(hb) == {("g", S): 1, ("g", OTHER): 1, ("f", S): 1}, hb
    log = proc.output()
    line = f"batch {res.batch_id}: stopped 1 of 1 idle worker(s) of g asked on MIG "
    assert line in log, log[-3000:]
    assert log.index(line) < log.index(f"batch {res.batch_id} answered"), log[-3000:]

    # a dispatch that names none stops nothing, though it starts a worker there too
    res, hb = run(sched, node, "h", S)
    assert res.cold is True
    assert idle(hb) == {("g", S): 1, ("g", OTHER): 1, ("f", S): 1, ("h", S): 1}, hb
    assert f"batch {res.batch_id}: stopped" not in proc.output()

    # a batch that finds its own worker warm starts none: what it names stays
    res, hb = run(sched, node, "f", S, evict=(("h", 1),))
    assert res.cold is False, res
    assert idle(hb) == {("g", S): 1, ("g", OTHER): 1, ("f", S): 1, ("h", S): 1}, hb
    assert f"batch {res.batch_id}: stopped" not in proc.output()


def test_a_dispatch_naming_more_idle_workers_than_are_there_stops_those_there_are_and_runs(agent):
    sched, node, proc = agent
    # (after the test above, S may hold one worker of g already, and a worker of g is warm on OTHER)
    run(sched, node, "g", OTHER)
    _, hb = run(sched, node, "g", S)
    before = idle(hb)
    assert before[("g", S)] >= 1 and before[("g", OTHER)] == 1, hb
    res, hb = run(sched, node, "k", S, evict=(("g", before[("g", S)] + 2), ("nowhere", 1)))
    assert res.cold is True, res
    after = idle(hb)
    assert ("g", S) not in after and after[("g", OTHER)] == 1 and after[("k", S)] == 1, hb
    log = proc.output()
    n = before[("g", S)]
    assert f"batch {res.batch_id}: stopped {n} of {n + 2} idle worker(s) of g asked on MIG " in log, log[-3000:]
    assert f"batch {res.batch_id}: stopped 0 of 1 idle worker(s) of nowhere asked on MIG " in log, log[-3000:]
