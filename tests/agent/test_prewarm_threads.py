"""A pre-warm starts its worker on the agent's pre-warm threads, never on a batch thread: with one batch
thread (``--max-batches 1``) a dispatch that arrives while a slow worker is being pre-warmed runs at once,
as in the emulator, where a pre-warm delays no batch. Pre-warms still waiting for a thread when the agent
stops are dropped, and named so.

The real agent as a subprocess (fake A100-40GB, process workers), the real Redis; the test plays the
scheduler.
"""

from __future__ import annotations

import time
import uuid

import pytest

from esg.model import Config
from tests.agent.agent_harness import AgentProcess, OpenWhiskStandIn, SchedulerSide

pytestmark = pytest.mark.timeout(120)

#: How long the slow action's worker takes to start (its module sleeps at /init).
SLOW_START_S = 6.0
SLOW = f"import time\ntime.sleep({SLOW_START_S})\n\ndef main(args):\n    return {{}}\n"
ECHO = "def main(args):\n    return {'i': args.get('i')}\n"


def test_a_dispatch_is_not_delayed_behind_a_slow_prewarm_with_one_batch_thread(redis_url, tmp_path):
    ow = OpenWhiskStandIn()
    ow.add("echo", ECHO)
    ow.add("slow", SLOW)
    ow.add("slow2", SLOW)
    prefix, node = f"t{uuid.uuid4().hex[:8]}_", "node-p"
    sched = SchedulerSide(redis_url, prefix)
    agent = AgentProcess(tmp_path, redis_url, ow.url, node, prefix, "--fake-gpu", "A100-40GB", "--vcpus", "4",
                         "--memory-mb", "8192", "--max-batches", "1")
    try:
        sched.heartbeat(node, timeout=30)
        warm = sched.result(sched.dispatch(node, "echo", [{"i": 0}], config=Config(1, 1, None)).batch_id)
        assert warm.results[0].status_code == 0       # echo's worker is warm from now on

        pw = sched.prewarm(node, "slow", Config(1, 1, None))
        sched.heartbeat(node, lambda h: pw.prewarm_id in h.running, after=len(sched.heartbeats))
        t0 = time.monotonic()
        res = sched.result(sched.dispatch(node, "echo", [{"i": 1}], config=Config(1, 1, None)).batch_id,
                           timeout=2 * SLOW_START_S)
        waited = time.monotonic() - t0
        assert res.results[0].status_code == 0 and res.cold is False, res
        # answered while the pre-warm's worker was still starting, not after it
        assert waited < SLOW_START_S / 2, f"the batch waited {waited:.1f} s behind the pre-warm"
        assert not any(pw.prewarm_id in h.done for h in sched.heartbeats)
        hb = sched.heartbeat(node, lambda h: pw.prewarm_id in h.done, timeout=3 * SLOW_START_S)
        assert [p.outcome for p in hb.prewarmed if p.prewarm_id == pw.prewarm_id] == ["started"]

        # one pre-warm thread per vCPU (4): of five slow pre-warms (no worker of slow2 is warm) one waits,
        # and is dropped when the agent stops
        late = [sched.prewarm(node, "slow2", Config(1, 1, None)) for _ in range(5)]
        sched.heartbeat(node, lambda h: all(p.prewarm_id in h.running for p in late), after=len(sched.heartbeats))
    finally:
        agent.stop()
        sched.close()
        ow.close()
    log = agent.output()
    assert "not started: the agent stops" in log and "1 dropped" in log, log[-3000:]


def test_a_finished_prewarm_is_reported_at_once_not_a_heartbeat_period_later(redis_url, tmp_path):
    """The scheduler learns of a pre-warmed worker when it is ready (the emulator knows that moment): a
    head arriving meanwhile would otherwise start another worker cold."""
    ow = OpenWhiskStandIn()
    ow.add("echo", ECHO)
    prefix, node = f"t{uuid.uuid4().hex[:8]}_", "node-h"
    sched = SchedulerSide(redis_url, prefix)
    period_s = 30.0
    agent = AgentProcess(tmp_path, redis_url, ow.url, node, prefix, "--fake-gpu", "A100-40GB", "--vcpus", "2",
                         "--memory-mb", "4096",
                         "--heartbeat-s", f"{period_s:g}")
    try:
        sched.heartbeat(node, timeout=30)
        t0 = time.monotonic()
        pw = sched.prewarm(node, "echo", Config(1, 1, None))
        hb = sched.heartbeat(node, lambda h: pw.prewarm_id in h.done, timeout=period_s / 2,
                             after=len(sched.heartbeats))
        assert time.monotonic() - t0 < period_s / 2
        assert [p.outcome for p in hb.prewarmed if p.prewarm_id == pw.prewarm_id] == ["started"]
        assert any(w.function.endswith("echo") and w.count > 0 for w in hb.idle), hb.idle
    finally:
        agent.stop()
        sched.close()
        ow.close()
