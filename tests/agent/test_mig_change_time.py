"""The agent times each MIG change it makes for a batch or a pre-warm (``reconfig_ms``, the wall time of
carving the slice), which the scheduler learns its MIG change time from; a batch or pre-warm that
changes nothing says nothing.

The agent's batch handler in-process, on the fake A100-40GB with a slow GPU-instance destroy, real
process workers and the REST stand-in.
"""

from __future__ import annotations

import os

import pytest

from agent_channel import protocol
from agent_channel.keys import Keys
from esg.cluster import SliceRef
from esg.model import Config
from invoker_agent.actions import ActionFetcher
from invoker_agent.batch import BatchHandler
from invoker_agent.data import DataPlane, LocalOutputs
from invoker_agent.heartbeat import WarmRegistry
from invoker_agent.node import NodeAgent
from invoker_agent.slices import SliceManager
from invoker_agent.vcpus import VcpuAllocator
from tests.agent.agent_harness import AUTH, OpenWhiskStandIn

pytestmark = pytest.mark.timeout(90)

ECHO = "def main(a):\n    return {'echo': a}\n"
DESTROY_S = 0.3
TWO, FOUR, ONE = SliceRef("2g.10gb", 0), SliceRef("4g.20gb", 0), SliceRef("1g.5gb", 6)


@pytest.fixture(scope="module")
def handler():
    with OpenWhiskStandIn() as api:
        api.add("echo", ECHO, timeout_ms=20000)
        node = NodeAgent.create("node-c", vcpus=2, fake_gpu="A100-40GB")
        node.backend.inner.nvml.host.gi_destroy_latency_s = DESTROY_S
        try:
            yield BatchHandler(node, ActionFetcher(api.url, AUTH), SliceManager(node),
                               VcpuAllocator(2, sorted(os.sched_getaffinity(0))), WarmRegistry(),
                               DataPlane(None, Keys(), LocalOutputs(1 << 20)))
        finally:
            node.close()


def batch(batch_id: str, slice_: SliceRef, destroy: tuple[SliceRef, ...] = ()) -> protocol.DispatchMessage:
    return protocol.DispatchMessage(batch_id, "node-c", "guest/echo", "guest/echo",
                                    protocol.ActionRef("guest", "echo", None, timeout_ms=20000),
                                    Config(1, 1, slice_.profile), slice_, destroy,
                                    (protocol.RunRequest(batch_id.ljust(32, "0"), "t", {"i": 1}, 1718003081790,
                                                         "guest"),))


def test_a_batch_that_carves_its_slice_says_how_long_the_change_took(handler):
    first, _ = handler.run(batch("b-1", TWO))
    assert [r.status_code for r in first.results] == [0] and first.reconfigured == 1
    assert first.reconfig_ms is not None and first.reconfig_ms >= 0, first
    warm, _ = handler.run(batch("b-2", TWO))
    assert warm.reconfigured == 0 and warm.reconfig_ms is None, "no change made: none timed"
    # the next batch destroys 2g.10gb@0 (its idle worker stopped first) and creates 4g.20gb@0: the
    # destroy's latency is in its time, and the result carries it across the channel
    moved, _ = handler.run(batch("b-3", FOUR, destroy=(TWO,)))
    assert [r.status_code for r in moved.results] == [0] and moved.reconfigured == 2
    assert moved.reconfig_ms is not None and moved.reconfig_ms >= DESTROY_S * 1000, moved
    assert protocol.decode(protocol.encode(moved)).reconfig_ms == moved.reconfig_ms


def test_a_prewarm_that_carves_its_instance_says_how_long_it_took_and_one_that_does_not_says_nothing(handler):
    msg = protocol.PrewarmMessage("p-1", "node-c", "guest/echo", "guest/echo",
                                  protocol.ActionRef("guest", "echo", None, timeout_ms=20000), Config(1, 1, "1g.5gb"),
                                  ONE, (), 60000)
    out = handler.prewarm(msg)
    assert out.started and out.reconfigured == 1 and out.reconfig_ms is not None and out.reconfig_ms >= 0, out
    again = handler.prewarm(protocol.PrewarmMessage(**{**msg.__dict__, "prewarm_id": "p-2"}))
    assert again.warm and again.reconfigured == 0 and again.reconfig_ms is None, again
