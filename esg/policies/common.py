"""Helpers the baseline policies share: per-stage SLO shares, weighted resources, config ladders, the
bin-packing node order, and the generic scale-out gate for the baselines whose papers name none."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Final

from esg import placement
from esg.cluster import ClusterSnapshot
from esg.cost import Prices, config_cost
from esg.defaults import StartupCosts
from esg.mig import compute_slices
from esg.model import App, Config, Job
from esg.profiles import Profile
from esg.search import longest_path

CPU_WEIGHT: Final = 64.0
"""INFless weighs a CPU core as 64 (its scheduler.go resource weights)."""
GPU_PERCENT_WEIGHT: Final = 142.0
"""... and one percent of GPU SMs as 142; a MIG slice of g compute slices is 100 * g / 7 percent."""
P95_Z: Final = 1.645


def weighted_resource(gpu_model: str, config: Config) -> float:
    pct = 100.0 * compute_slices(gpu_model, config.gpu) / 7.0
    return CPU_WEIGHT * config.vcpus + GPU_PERCENT_WEIGHT * pct


def app_latency(app: App, latency: Mapping[str, float]) -> float:
    fs = app.topo_order
    pos = {f: i for i, f in enumerate(fs)}
    return longest_path([latency[f] for f in fs], [tuple(pos[p] for p in app.predecessors(f)) for f in fs])


def stage_shares(app: App, profiles: Mapping[str, Profile], slo_ms: float,
                 overhead_ms: float = 0.0) -> dict[str, float]:
    """Per-function SLO shares for DAG-unaware policies: proportional to each function's fastest
    profiled latency, scaled so the critical path of shares equals the SLO less ``overhead_ms`` per
    function on its longest path (in functions): what the system adds to every batch beyond its run
    time, which the ports of INFless and FaST-GShare leave out unless asked (``docs/baselines.md``)."""
    fastest = {f: min(e.latency_ms for e in profiles[f].entries) for f in app.functions}
    total = app_latency(app, fastest)
    if overhead_ms:
        slo_ms = max(slo_ms - overhead_ms * app_latency(app, dict.fromkeys(app.functions, 1.0)), 0.0)
    return {f: slo_ms * fastest[f] / total for f in app.functions}


def p95_factor(noise_cv: float) -> float:
    """P95 of a mean-1 log-normal with the given CV (the planning percentile of Orion/Aquatope)."""
    sigma = math.sqrt(math.log1p(noise_cv ** 2))
    return math.exp(-sigma * sigma / 2 + P95_Z * sigma)


def ladder(profile: Profile, prices: Prices, allowed) -> list[tuple[float, float, Config]]:
    """(cost, latency, config) from cheapest to fastest, keeping only configs faster than every cheaper
    one: each step up is a strict latency improvement (Orion's 'one more memory step')."""
    opts = sorted((config_cost(prices, profile.gpu_model, e.config, e.latency_ms), e.latency_ms, e.config)
                  for e in profile.entries if allowed(e.config))
    out: list[tuple[float, float, Config]] = []
    for o in opts:
        if not out or o[1] < out[-1][1]:
            out.append(o)
    return out


def packing_order(snapshot: ClusterSnapshot, gpu: bool) -> list[str]:
    """Nodes fullest first (best fit): GPU nodes by fewest idle compute slices, then fewest free vCPUs."""
    def key(n: str):
        s = snapshot.nodes[n]
        return ((snapshot.idle_compute(n) if gpu else 0), s.vcpus_free, n)
    return sorted(snapshot.nodes, key=key)


class PackingOrder:
    """Node order plugin: the fullest GPU node that fits first (INFless's and FaST-GShare's placement,
    :func:`packing_order`)."""

    def preferred_nodes(self, app: App, head: Job, snapshot: ClusterSnapshot) -> list[str]:
        return packing_order(snapshot, gpu=True)


class BacklogGate:
    """Scale-out gate plugin: the generic rule for the baselines (Orion's and Aquatope's papers leave
    scaling to the platform; INFless's and FaST-GShare's autoscalers are not ported): a new worker only
    when none of the queue's batches runs, or when the running ones would take longer than a new
    worker's start-up (cold start and MIG changes) to work the backlog off
    (:func:`esg.placement.worth_starting`). A start-up of seconds for a backlog the running workers clear
    in milliseconds only takes an instance from another function."""

    def may_scale_out(self, running: int, queued: int, priorities: Sequence[Config],
                      latency_of: Callable[[Config], float], startup: StartupCosts) -> bool:
        return placement.worth_starting(running, queued, priorities, latency_of, startup)
