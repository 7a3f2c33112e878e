"""GPU memory per MIG instance, emulated: whichever policy runs, no instance ever holds more workers'
memory than its own, and the workers a placement stops for it are gone from the node."""

from __future__ import annotations

import numpy as np
import pytest

from esg.emulator import ClusterSpec, Emulation, EmulatorParams
from esg.emulator.workload import generate
from esg.memory import instance_memory_mb
from esg.policies import make_policy
from esg.policies.base import PolicyContext
from tests.core.helpers import with_worker_memory

PARAMS = EmulatorParams(warmup_ms=0.0, keep_alive_ms=2000.0, mig_reconfig_ms=200.0, cold_start_scale=0.2)
WORKER_MB = 1968
"""Every GPU function's worker in these runs: two fit on a 1g.5gb instance (5,120 MiB), not three."""


def _held(nodes, scheduler, now: float, memory: dict[str, int]) -> dict:
    """Per (node, instance): the memory of its idle workers (not past their keep-alive) and of the batch
    running there."""
    held: dict = {}
    for name, node in nodes.items():
        for (f, ref), workers in node.idle_workers.items():
            if ref is not None:
                live = sum(1 for expiry, _ in workers if expiry > now)
                held[(name, ref)] = held.get((name, ref), 0) + live * memory.get(f, 0)
    for d in scheduler.in_flight():
        if d.fit.slice is not None:
            key = (d.node, d.fit.slice)
            held[key] = held.get(key, 0) + memory.get(d.function, 0)
    return held


@pytest.mark.parametrize("policy", ["esg", "esg-paper", "infless", "fastgshare", "orion", "aquatope"])
def test_no_instance_holds_more_workers_than_its_memory(policy, apps, profiles):
    tables = with_worker_memory(profiles, WORKER_MB)
    memory = {f: p.gpu_memory_mb for f, p in tables.items() if p.gpu_memory_mb}
    worst = {"held": 0.0, "steps": 0}
    em: Emulation

    def check(now, nodes, scheduler):
        for (name, ref), mb in _held(nodes, scheduler, now, memory).items():
            capacity = instance_memory_mb(nodes[name].gpu_model, ref.profile)
            assert mb <= capacity, f"{name} {ref}: {mb} MiB of workers on {capacity} MiB at {now} ms"
            worst["held"] = max(worst["held"], mb / capacity)
        worst["steps"] += 1

    rng = np.random.default_rng(3)
    requests = generate(list(apps), 80.0, 6.0, rng)
    em = Emulation(apps, tables, make_policy(policy, PolicyContext(apps, tables)), requests, rng,
                   ClusterSpec(nodes=2, vcpus=16), PARAMS, invariant_hook=check)
    em.run()
    assert worst["steps"] > 100
    if policy == "esg":  # its pools share instances between functions: the limit binds
        assert worst["held"] >= 2 * WORKER_MB / 5120, worst


def test_workers_stopped_for_memory_are_gone_and_counted(apps, profiles):
    """FaST-GShare packs functions onto the fewest instances: with two GPU workers to a 1g.5gb instance,
    its cold starts stop other functions' idle workers there, the node models stop those the placements
    name, and the run still answers every request."""
    tables = with_worker_memory(profiles, WORKER_MB)
    rng = np.random.default_rng(5)
    requests = generate(list(apps), 80.0, 6.0, rng)
    em = Emulation(apps, tables, make_policy("fastgshare", PolicyContext(apps, tables)), requests, rng,
                   ClusterSpec(nodes=2, vcpus=16), PARAMS)
    result = em.run()
    assert sum(n.evicted for n in em.nodes.values()) > 0
    assert result.unfinished == 0 and result.metrics.completed + result.metrics.failed == len(requests)
