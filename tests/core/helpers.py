"""Small builders for core tests: profiles and snapshots made in code."""

from __future__ import annotations

from esg.cluster import ClusterSnapshot, NodeState
from esg.profiles import Profile, profile_from_dict


def profile(function: str, rows: list[tuple[int, int, str | None, float]], gpu_model: str = "A100-40GB",
            cold_start_ms: float = 0.0, output_bytes: int = 0) -> Profile:
    return profile_from_dict({
        "function": function, "gpu_model": gpu_model, "cold_start_ms": cold_start_ms,
        "output_bytes": output_bytes,
        "configs": [{"batch": b, "vcpus": v, "gpu": g, "latency_ms": lat} for b, v, g, lat in rows],
    }, function)


def nodes(n: int, vcpus: int = 16, gpu: str | None = "A100-40GB") -> ClusterSnapshot:
    return ClusterSnapshot.of([NodeState(f"n{i}", vcpus, vcpus, gpu) for i in range(n)])
