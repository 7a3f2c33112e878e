"""What an agent reports for the scheduler's live view, and how it answers a batch planned on a stale one.

The real agent as a subprocess (fake A100-40GB), the real Redis; the test plays the scheduler.
"""

from __future__ import annotations

import uuid

import pytest

from esg.cluster import SliceRef
from esg.model import Config
from tests.agent.agent_harness import AgentProcess, OpenWhiskStandIn, SchedulerSide

pytestmark = pytest.mark.timeout(90)

ECHO = "def main(args):\n    return {'i': args.get('i')}\n"


@pytest.fixture(scope="module")
def agent(redis_url, tmp_path_factory):
    ow = OpenWhiskStandIn()
    ow.add("echo", ECHO)
    prefix = f"t{uuid.uuid4().hex[:8]}_"
    proc = AgentProcess(tmp_path_factory.mktemp("agent"), redis_url, ow.url, "node-t", prefix,
                        "--fake-gpu", "A100-40GB", "--vcpus", "4", "--memory-mb", "8192")
    sched = SchedulerSide(redis_url, prefix)
    try:
        sched.heartbeat("node-t", timeout=30)
        yield sched, "node-t"
    finally:
        sched.close()
        proc.stop()
        ow.close()


def test_heartbeats_name_idle_workers_by_slice_and_the_batches_answered(agent):
    sched, node = agent
    two = SliceRef("2g.10gb", 0)
    msg = sched.dispatch(node, "echo", [{"i": 1}], slice_=two, config=Config(1, 2, "2g.10gb"))
    res = sched.result(msg.batch_id)
    assert res.results[0].status_code == 0 and res.cold is True and res.reconfigured == 1, res
    hb = sched.heartbeat(node, lambda h: msg.batch_id in h.done and h.idle)
    assert [(w.function, w.vcpus, w.slice, w.count) for w in hb.idle] == [("echo", 2, two, 1)]
    assert msg.batch_id not in hb.running
    # the scheduler's view: that worker waits on that slice, whatever vCPU count takes it next
    again = sched.result(sched.dispatch(node, "echo", [{"i": 2}] * 2, slice_=two, config=Config(2, 1, "2g.10gb"))
                         .batch_id)
    assert again.cold is False and again.reconfigured == 0, again
    assert [r.init_ms for r in again.results] == [None, None]


def test_a_batch_planned_on_a_gone_slice_and_worker_carves_it_starts_cold_and_says_so(agent):
    sched, node = agent
    two, four = SliceRef("2g.10gb", 0), SliceRef("4g.20gb", 0)
    first = sched.result(sched.dispatch(node, "echo", [{"i": 1}], slice_=two, config=Config(1, 1, "2g.10gb"))
                         .batch_id)
    assert first.results[0].status_code == 0
    # another batch takes the place: 2g.10gb@0 and its idle worker go
    moved = sched.result(sched.dispatch(node, "echo", [{"i": 2}], slice_=four, destroy=(two,),
                                        config=Config(1, 1, "4g.20gb")).batch_id)
    assert moved.results[0].status_code == 0 and moved.reconfigured == 2 and moved.cold is True, moved
    hb = sched.heartbeat(node, lambda h: moved.batch_id in h.done)
    assert all(w.slice != two for w in hb.idle) and all(s.ref != two for s in hb.slices)
    # a scheduler still planning on the older heartbeat sends a batch to the warm worker on 2g.10gb@0,
    # with no MIG change: the agent carves the slice back (the idle 4g.20gb@0 in the way goes) and
    # starts a new worker, and its result says both
    stale = sched.result(sched.dispatch(node, "echo", [{"i": 3}], slice_=two, config=Config(1, 1, "2g.10gb"))
                         .batch_id)
    assert stale.results[0].status_code == 0, stale
    assert stale.cold is True and stale.reconfigured == 2, stale
    assert stale.results[0].init_ms is not None
