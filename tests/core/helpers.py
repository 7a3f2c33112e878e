"""Small builders for core tests: profiles and snapshots made in code."""

from __future__ import annotations

import dataclasses

from esg.cluster import ClusterSnapshot, NodeState
from esg.profiles import GPU_MEMORY_FIELD, Profile, profile_from_dict


def profile(function: str, rows: list[tuple[int, int, str | None, float]], gpu_model: str = "A100-40GB",
            cold_start_ms: float = 0.0, output_bytes: int = 0) -> Profile:
    return profile_from_dict({
        "function": function, "gpu_model": gpu_model, "cold_start_ms": cold_start_ms,
        "output_bytes": output_bytes,
        "configs": [{"batch": b, "vcpus": v, "gpu": g, "latency_ms": lat} for b, v, g, lat in rows],
    }, function)


def nodes(n: int, vcpus: int = 16, gpu: str | None = "A100-40GB") -> ClusterSnapshot:
    return ClusterSnapshot.of([NodeState(f"n{i}", vcpus, vcpus, gpu) for i in range(n)])


def esg(ctx, jit_prewarm: bool = True, wait_for_busy: bool = True, spare_instances: bool = True,
        pool_sizing: bool = True, **pool):
    """ESG with its rules switched on or off (an ablation: a rule off is a rule left out), the pool rule's
    figures (``burst_starts``, ``burst_busy``, ``fill_busy``) given."""
    from functools import partial

    from esg.policies.esg_policy import esg_policy
    from esg.policies.rules.jit_prewarm import JitPrewarm
    from esg.policies.rules.pool_sizing import PoolSizing
    from esg.policies.rules.spare_instances import SpareInstances
    from esg.policies.rules.wait_for_busy import WaitForBusy
    on = ((jit_prewarm, JitPrewarm), (wait_for_busy, WaitForBusy), (spare_instances, SpareInstances),
          (pool_sizing, partial(PoolSizing, **pool)))
    return esg_policy(ctx, [rule for switched, rule in on if switched])


def with_worker_memory(tables, mb: int) -> dict:
    """``tables`` with every GPU function's worker holding ``mb`` MiB on every MIG profile (its rows'
    own figures dropped): the memory limit at a figure a test chooses."""
    out = {}
    for f, p in tables.items():
        if any(c.gpu for c in p.configs):
            rows = tuple(dataclasses.replace(e, extra={k: v for k, v in e.extra.items() if k != GPU_MEMORY_FIELD})
                         for e in p.entries)
            p = dataclasses.replace(p, entries=rows, gpu_memory_mb=mb)
        out[f] = p
    return out
