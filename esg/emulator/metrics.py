"""What a run measures: per-request outcomes, resource cost, cold starts, MIG changes, decision time."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from esg.events import RequestOutcome


@dataclass
class AppStats:
    requests: int = 0
    hits: int = 0
    latencies_ms: list[float] = field(default_factory=list)


@dataclass
class Metrics:
    requests: int = 0
    completed: int = 0
    failed: int = 0
    rejected: int = 0
    """Requests answered at once by SLO admission control (counted in ``failed`` too: never a hit)."""
    hits: int = 0
    cost_exec: float = 0.0
    """Σ over measured batches of (price of the resources held) × (time held from dispatch to completion,
    less the start-up below): decision time, input reads, execution, output writes."""
    cost_cold: float = 0.0
    """... × the cold starts those batches waited for."""
    cost_mig: float = 0.0
    """... × the MIG reconfiguration those batches waited for."""
    cost_idle: float = 0.0
    """Σ over MIG instances of their price × the time within the measured window they held an idle warm
    worker and ran no batch (CPU workers hold no vCPU while idle: nothing)."""
    batches: int = 0
    jobs: int = 0
    cold_starts: int = 0
    reconfigured_instances: int = 0
    prewarms: int = 0
    """Workers started ahead of a batch (their cold start and MIG instance are in ``cost_cold`` and
    ``cost_mig``, their idle time in ``cost_idle``; ``cold_starts`` counts the batches that waited for one)."""
    decisions: int = 0
    sched_ms: float = 0.0
    events: int = 0
    per_app: dict[str, AppStats] = field(default_factory=dict)

    def arrived(self, app: str) -> None:
        self.requests += 1
        self._stats(app).requests += 1

    def _stats(self, app: str) -> AppStats:
        stats = self.per_app.get(app)  # (not setdefault: an AppStats made per call, per request)
        if stats is None:
            stats = self.per_app[app] = AppStats()
        return stats

    def outcome(self, o: RequestOutcome) -> None:
        stats = self._stats(o.app)
        if not o.ok:
            self.failed += 1
            self.rejected += o.rejected
            return
        self.completed += 1
        stats.latencies_ms.append(o.latency_ms)
        if o.slo_hit:
            self.hits += 1
            stats.hits += 1

    @property
    def cost(self) -> float:
        """Everything paid: execution, cold starts, MIG reconfiguration and idle warm workers."""
        return self.cost_exec + self.cost_cold + self.cost_mig + self.cost_idle

    @property
    def missed(self) -> int:
        """Requests that did not meet their SLO: late, failed or never finished."""
        return self.requests - self.hits

    def summary(self) -> dict[str, float | int]:
        lat = np.array([x for s in self.per_app.values() for x in s.latencies_ms])
        n = self.requests
        return {
            "requests": self.requests,
            "completed": self.completed,
            "slo_hit_rate": self.hits / self.requests if self.requests else 0.0,
            "cost": self.cost / n if n else 0.0,
            "cost_exec": self.cost_exec / n if n else 0.0,
            "cost_idle": self.cost_idle / n if n else 0.0,
            "cost_cold": self.cost_cold / n if n else 0.0,
            "cost_mig": self.cost_mig / n if n else 0.0,
            "p50_ms": float(np.percentile(lat, 50)) if lat.size else float("nan"),
            "p99_ms": float(np.percentile(lat, 99)) if lat.size else float("nan"),
            "sched_overhead_ms": self.sched_ms / self.decisions if self.decisions else 0.0,
            "cold_starts": self.cold_starts,
            "mig_changes": self.reconfigured_instances,
            "prewarms": self.prewarms,
            "batches": self.batches,
            "mean_batch": self.jobs / self.batches if self.batches else 0.0,
            "rejected": self.rejected,
            "rejected_rate": self.rejected / n if n else 0.0,
        }
