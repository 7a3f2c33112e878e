"""A node agent's metrics: MIG instances by profile and state from its heartbeats, MIG changes and their
durations as its slice manager makes them, cold starts and batches as it answers them."""

from __future__ import annotations

from agent_channel.metrics import OTHER
from agent_channel.protocol import BatchResult, RunResult
from esg.cluster import SliceRef
from invoker_agent.heartbeat import HeartbeatBuilder, WarmRegistry
from invoker_agent.metrics import AgentMetrics
from invoker_agent.node import NodeAgent
from invoker_agent.slices import SliceManager
from invoker_agent.vcpus import VcpuAllocator


def value(m: AgentMetrics, name: str, **labels: str) -> float:
    return m.registry.get_sample_value(name, labels) or 0.0


def test_mig_instances_by_profile_and_state_and_mig_changes_follow_the_node():
    node = NodeAgent.create("n0", vcpus=4, fake_gpu="A100-40GB")
    try:
        slices = SliceManager(node)
        vcpus = VcpuAllocator(4, [0])
        m = AgentMetrics("n0", slices.gpu_model)
        slices.on_change = m.mig_changed
        beats = HeartbeatBuilder("n0", 1024, vcpus, slices, node.pool, WarmRegistry())
        a = slices.ensure(SliceRef("1g.5gb", 0))
        b = slices.ensure(SliceRef("3g.20gb", 4))
        slices.release(b)
        held = vcpus.acquire(3)
        m.heartbeat(beats.build(), node.pool.warm_count())
        gpu = "A100-40GB"
        assert value(m, "esg_mig_instances", node="n0", gpu=gpu, profile="1g.5gb", state="busy") == 1
        assert value(m, "esg_mig_instances", node="n0", gpu=gpu, profile="3g.20gb", state="idle") == 1
        assert value(m, "esg_node_vcpus_free", node="n0") == 1 and value(m, "esg_node_vcpus", node="n0") == 4
        assert value(m, "esg_mig_changes_total", node="n0", gpu=gpu, profile="1g.5gb", op="create") == 1
        assert value(m, "esg_mig_changes_total", node="n0", gpu=gpu, profile="3g.20gb", op="create") == 1
        assert value(m, "esg_mig_change_seconds_count", node="n0", gpu=gpu, op="create") == 2
        # the 3g.20gb instance gives way to a 4g.20gb one: destroyed, and no longer counted
        slices.release(a)
        vcpus.release(held)
        c = slices.ensure(SliceRef("4g.20gb", 0), destroy=(SliceRef("3g.20gb", 4), SliceRef("1g.5gb", 0)))
        m.heartbeat(beats.build(), node.pool.warm_count())
        assert value(m, "esg_mig_changes_total", node="n0", gpu=gpu, profile="3g.20gb", op="destroy") == 1
        assert value(m, "esg_mig_changes_total", node="n0", gpu=gpu, profile="1g.5gb", op="destroy") == 1
        assert value(m, "esg_mig_instances", node="n0", gpu=gpu, profile="3g.20gb", state="idle") == 0
        assert value(m, "esg_mig_instances", node="n0", gpu=gpu, profile="1g.5gb", state="busy") == 0
        assert value(m, "esg_mig_instances", node="n0", gpu=gpu, profile="4g.20gb", state="busy") == 1
        assert value(m, "esg_node_vcpus_free", node="n0") == 4
        slices.release(c)
    finally:
        node.close()


def test_batches_and_cold_starts_are_counted_with_the_function_bounded():
    m = AgentMetrics("n0", None, max_functions=1)
    ok = BatchResult("b1", "n0", (RunResult("a1", 0, {}, 0, 1),), cold=True)
    failed = BatchResult("b2", "n0", (RunResult("a2", 2, {"error": "x"}, 0, 1),), cold=True)
    m.batch("guest/f", ok)
    m.batch("guest/g", failed)
    m.batch("guest/f", BatchResult("b3", "n0", (RunResult("a3", 0, {}, 0, 1),), cold=False))
    assert value(m, "esg_agent_batches_total", node="n0", status="ok") == 2
    assert value(m, "esg_agent_batches_total", node="n0", status="failed") == 1
    assert value(m, "esg_agent_cold_starts_total", node="n0", function="guest/f") == 1
    assert value(m, "esg_agent_cold_starts_total", node="n0", function=OTHER) == 1
    m.prewarm("started")
    assert value(m, "esg_agent_prewarms_total", node="n0", outcome="started") == 1
