"""SLO levels and load levels of the evaluation, and the reference latency L they are relative to.

* **L** of an app is the longest path through its DAG with every function at its *median profiled
  configuration* (the median of the function's profiled ``latency_ms`` over all its configurations),
  computed from the shipped A100-40GB tables and written into each app file's ``slo_ms``.
* **SLO levels** (the paper): strict / moderate / relaxed = 0.8 L / 1.0 L / 1.2 L.
* **Load levels**: light / normal / heavy = 30 % / 60 % / 90 % of the reference capacity
  ``C = nodes * slots * 1000 / mean_app(L)`` requests/s, ``slots`` = the compute slices of a node's GPU
  (7 on an A100 or H100; 1 on a CPU-only node): every compute slice of the cluster busy with one
  request at the reference latency, without batching. Apps share the rate equally.

  Why this C: the earlier ``nodes * 1000 / mean_app(L)`` (one request in flight per *node*) ignored
  that a MIG GPU runs up to seven requests at once; once every policy routes to warm workers it put
  even "heavy" at a small fraction of what the cluster serves. Measured on 2 nodes with the replayed
  Azure sample (``docs/results/``), a policy that does not batch (FaST-GShare) still meets the SLO
  at 60 requests/s per node in steady state and falls to 28 % at 150; 0.9 C = 88 per node is near
  that knee.
"""

from __future__ import annotations

from collections.abc import Mapping

from esg import mig
from esg.model import App
from esg.profiles import Profile, median_latency
from esg.search import longest_path

SLO_LEVELS = {"strict": 0.8, "moderate": 1.0, "relaxed": 1.2}
LOAD_LEVELS = {"light": 0.3, "normal": 0.6, "heavy": 0.9}


def reference_latency(app: App, profiles: Mapping[str, Profile]) -> float:
    """L: the app's longest path with each function at its median profiled configuration."""
    fs = app.topo_order
    pos = {f: i for i, f in enumerate(fs)}
    return longest_path([median_latency(profiles[f], "mean") for f in fs],
                        [tuple(pos[p] for p in app.predecessors(f)) for f in fs])


def slots_per_node(gpu_model: str | None) -> int:
    """Requests a node runs at once without batching: its GPU's compute slices (1 without a GPU)."""
    return 1 if gpu_model is None else mig.geometry(gpu_model).compute_slices


def reference_capacity_rps(apps: Mapping[str, App], nodes: int, gpu_model: str | None = mig.DEFAULT_GPU_MODEL) -> float:
    """C = nodes * slots * 1000 / mean over apps of L (the apps' ``slo_ms``)."""
    mean_l = sum(a.slo_ms for a in apps.values()) / len(apps)
    return nodes * slots_per_node(gpu_model) * 1000.0 / mean_l


def load_rate_rps(level: str, apps: Mapping[str, App], nodes: int, gpu_model: str | None = mig.DEFAULT_GPU_MODEL) -> float:
    try:
        return LOAD_LEVELS[level] * reference_capacity_rps(apps, nodes, gpu_model)
    except KeyError:
        raise ValueError(f"unknown load level {level!r} (known: {', '.join(LOAD_LEVELS)})") from None


def slo_ms(level: str, app: App) -> float:
    try:
        return SLO_LEVELS[level] * app.slo_ms
    except KeyError:
        raise ValueError(f"unknown SLO level {level!r} (known: {', '.join(SLO_LEVELS)})") from None
