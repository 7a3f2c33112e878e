"""What an agent reports for the scheduler's live view, how it answers a batch planned on a stale one, and
how it carries out a pre-warm.

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
    assert res.reconfig_ms is not None and res.reconfig_ms >= 0, "the carve is timed"
    hb = sched.heartbeat(node, lambda h: msg.batch_id in h.done and h.idle)
    assert [(w.function, w.vcpus, w.slice, w.count) for w in hb.idle] == [("echo", 2, two, 1)]
    assert msg.batch_id not in hb.running
    # the scheduler's view: that worker waits on that slice, whatever vCPU count takes it next
    again = sched.result(sched.dispatch(node, "echo", [{"i": 2}] * 2, slice_=two, config=Config(2, 1, "2g.10gb"))
                         .batch_id)
    assert again.cold is False and again.reconfigured == 0 and again.reconfig_ms is None, again
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


def test_a_prewarm_carves_the_slice_starts_the_worker_idle_and_the_next_batch_runs_warm(agent):
    sched, node = agent
    three = SliceRef("3g.20gb", 4)
    pw = sched.prewarm(node, "echo", Config(1, 2, "3g.20gb"), 60000, slice_=three)
    hb = sched.heartbeat(node, lambda h: pw.prewarm_id in h.done)
    # the heartbeat that names it done shows the slice carved and its worker idle there; nothing answered
    assert ("echo", 2, three, 1) in [(w.function, w.vcpus, w.slice, w.count) for w in hb.idle], hb
    assert any(s.ref == three and not s.busy for s in hb.slices) and pw.prewarm_id not in hb.running
    assert not [r for r in sched.results if r.batch_id == pw.prewarm_id]
    # and says what the pre-warm did: started a worker, on an instance it created
    assert [(p.outcome, p.reconfigured) for p in hb.prewarmed if p.prewarm_id == pw.prewarm_id] == [("started", 1)]
    assert all(p.reconfig_ms is not None for p in hb.prewarmed if p.prewarm_id == pw.prewarm_id), hb.prewarmed
    assert sched.pending(node) == 0
    # the next batch there takes that worker: no cold start, no MIG change
    res = sched.result(sched.dispatch(node, "echo", [{"i": 1}, {"i": 2}], slice_=three,
                                      config=Config(2, 1, "3g.20gb")).batch_id)
    assert res.cold is False and res.reconfigured == 0 and [r.status_code for r in res.results] == [0, 0], res
    assert [r.init_ms for r in res.results] == [None, None]


def test_a_prewarm_of_a_warm_function_or_a_missing_action_changes_nothing(agent):
    sched, node = agent
    first = sched.result(sched.dispatch(node, "echo", [{"i": 1}], config=Config(1, 1, None)).batch_id)
    assert first.results[0].status_code == 0
    before = sched.heartbeat(node, lambda h: first.batch_id in h.done)
    idle = [(w.function, w.slice, w.count) for w in before.idle if w.slice is None]
    assert idle == [("echo", None, 1)], before
    again = sched.prewarm(node, "echo", Config(1, 1, None))
    missing = sched.prewarm(node, "nowhere", Config(1, 1, None))
    hb = sched.heartbeat(node, lambda h: {again.prewarm_id, missing.prewarm_id} <= set(h.done))
    assert [(w.function, w.slice, w.count) for w in hb.idle if w.slice is None] == idle
    # the heartbeat says so: one found its worker warm (nothing started), the other failed
    outcomes = {p.prewarm_id: (p.outcome, p.reconfigured) for p in hb.prewarmed}
    assert all(p.reconfig_ms is None for p in hb.prewarmed if p.prewarm_id in (again.prewarm_id, missing.prewarm_id))
    assert outcomes[again.prewarm_id] == ("warm", 0) and outcomes[missing.prewarm_id] == ("failed", 0), hb
    # the agent goes on: the next batch still runs warm on the one worker
    res = sched.result(sched.dispatch(node, "echo", [{"i": 2}], config=Config(1, 1, None)).batch_id)
    assert res.results[0].status_code == 0 and res.cold is False


def test_a_malformed_prewarm_is_retired_and_the_agent_goes_on(agent):
    sched, node = agent
    sched.send(node, b'{"type":"prewarm","prewarm_id":"p-bad","node":"n"}')
    res = sched.result(sched.dispatch(node, "echo", [{"i": 5}], config=Config(1, 1, None)).batch_id)
    assert res.results[0].status_code == 0
    assert sched.wait_for(lambda: sched.pending(node) == 0, 10, "the stream to be empty") is not None


def test_a_prewarm_taken_by_an_earlier_incarnation_is_retired_unstarted(redis_url, tmp_path):
    from agent_channel.keys import AGENT_GROUP
    from agent_channel.streams import ensure_group

    ow = OpenWhiskStandIn()
    ow.add("echo", ECHO)
    prefix, node = f"t{uuid.uuid4().hex[:8]}_", "node-r"
    sched = SchedulerSide(redis_url, prefix)
    stream = sched.keys.dispatch(node)
    ensure_group(sched.r, stream, AGENT_GROUP)
    # an earlier incarnation read the pre-warm (pending in the group) and died before retiring it
    pw = sched.prewarm(node, "echo", Config(1, 1, None))
    assert sched.r.xreadgroup(AGENT_GROUP, node, {stream: ">"}, count=1)
    assert sched.pending(node) == 1
    proc = AgentProcess(tmp_path, redis_url, ow.url, node, prefix, "--fake-gpu", "A100-40GB", "--vcpus", "2")
    try:
        sched.wait_for(lambda: sched.pending(node) == 0, 30, "the pending pre-warm to be retired")
        res = sched.result(sched.dispatch(node, "echo", [{"i": 1}], config=Config(1, 1, None)).batch_id)
        assert res.results[0].status_code == 0 and res.cold is True, res     # no worker was started for it
        hb = sched.heartbeat(node, lambda h: res.batch_id in h.done)
        # named done all the same, so a scheduler holding its claim lets the slice and vCPUs go at once
        assert pw.prewarm_id in hb.done and pw.prewarm_id not in hb.running
        assert [p.outcome for p in hb.prewarmed if p.prewarm_id == pw.prewarm_id] == ["repeated"]
    finally:
        proc.stop()
        sched.close()
        ow.close()
    assert "taken before a restart: retired, not started" in proc.output()
