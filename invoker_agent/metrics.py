"""Prometheus metrics of one node's agent (served on ``esg agent --metrics-port``, ``docs/observability.md``).

Per node and GPU: MIG instances by profile and state (busy, idle), vCPUs free, warm workers (busy, idle),
batches by status, cold starts by function, MIG instances created and destroyed and how long each took,
pre-warms by outcome. Gauges are set from each heartbeat the agent sends (what the scheduler sees is
what Prometheus sees); counters as things happen. ``function`` is bounded as the scheduler bounds it
(:class:`agent_channel.metrics.Bounded`); ``node`` is this agent's name, ``gpu`` its GPU model (``none``
on a CPU-only node), ``profile`` a MIG profile of that model's geometry.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from agent_channel.metrics import DEFAULT_HOST, Bounded, Children, Endpoint
from agent_channel.protocol import BatchResult, Heartbeat

#: Distinct function names that get a label value of their own (later ones: ``_other``).
MAX_FUNCTIONS = 256
#: MIG instance creation and destruction buckets (seconds): a real A100 takes about a second or two.
MIG_BUCKETS = (.01, .05, .1, .25, .5, 1, 2, 3, 5, 10, 30)


class AgentMetrics:
    def __init__(self, node: str, gpu_model: str | None, max_functions: int = MAX_FUNCTIONS) -> None:
        r = self.registry = CollectorRegistry()
        self.node = node
        self.gpu = gpu_model or "none"
        self.function_label = Bounded(max_functions)
        self.mig_instances = Gauge("esg_mig_instances", "MIG instances on the node's GPU, by profile and state",
                                   ["node", "gpu", "profile", "state"], registry=r)
        self.vcpus_free = Gauge("esg_node_vcpus_free", "vCPUs no batch holds", ["node"], registry=r)
        self.vcpus_total = Gauge("esg_node_vcpus", "vCPUs the node advertises", ["node"], registry=r)
        self.warm_workers = Gauge("esg_warm_workers", "Warm workers on the node, busy or idle", ["node", "state"],
                                  registry=r)
        self.batches = Counter("esg_agent_batches_total", "Batches answered, ok or failed", ["node", "status"],
                               registry=r)
        self.cold_starts = Counter("esg_agent_cold_starts_total", "Batches that started a worker, by function",
                                   ["node", "function"], registry=r)
        self.mig_changes = Counter("esg_mig_changes_total", "MIG instances created or destroyed",
                                   ["node", "gpu", "profile", "op"], registry=r)
        self.mig_change_time = Histogram("esg_mig_change_seconds", "How long one MIG instance took to create or "
                                         "destroy", ["node", "gpu", "op"], buckets=MIG_BUCKETS, registry=r)
        self.prewarms = Counter("esg_agent_prewarms_total", "Pre-warms taken, by outcome", ["node", "outcome"],
                                registry=r)
        self.stream_recoveries = Gauge("esg_agent_stream_recoveries", "Times the agent found its dispatch "
                                       "stream's consumer group gone (Redis lost its data) and made it again",
                                       ["node"], registry=r)
        self.vcpus_total.labels(node)
        self._batches = Children(self.batches)
        self._cold = Children(self.cold_starts)
        self._instances: set[tuple[str, str]] = set()
        self._lock = threading.Lock()
        self._endpoint: Endpoint | None = None

    def heartbeat(self, hb: Heartbeat, warm_workers: int) -> None:
        """The node as its heartbeat reports it (MIG instances, vCPUs, idle workers), with the warm
        workers its pool holds (the heartbeat names their kinds, not how many)."""
        counts: dict[tuple[str, str], int] = dict.fromkeys(self._instances, 0)
        for s in hb.slices:
            key = (s.ref.profile, "busy" if s.busy else "idle")
            counts[key] = counts.get(key, 0) + 1
        idle = sum(w.count for w in hb.idle)
        with self._lock:       # the heartbeat thread, and the draining one's last beat
            for (profile, state), n in counts.items():
                self.mig_instances.labels(self.node, self.gpu, profile, state).set(n)
            self._instances |= counts.keys()
            self.vcpus_free.labels(self.node).set(hb.vcpus_free)
            self.vcpus_total.labels(self.node).set(hb.vcpus_total)
            self.warm_workers.labels(self.node, "idle").set(idle)
            self.warm_workers.labels(self.node, "busy").set(max(0, warm_workers - idle))
            self.stream_recoveries.labels(self.node).set(hb.stream_recoveries)

    def batch(self, function: str, result: BatchResult) -> None:
        self._batches.get(self.node, "ok" if result.succeeded else "failed").inc()
        if result.cold:
            self._cold.get(self.node, self.function_label(function)).inc()

    def mig_changed(self, created: Sequence[tuple[str, int]], destroyed: Sequence[tuple[str, int]],
                    seconds: float) -> None:
        """MIG instances created and destroyed by one change, which took ``seconds`` in all (shared out)."""
        n = len(created) + len(destroyed)
        if not n:
            return
        for op, done in (("create", created), ("destroy", destroyed)):
            for profile, _start in done:
                self.mig_changes.labels(self.node, self.gpu, profile, op).inc()
                self.mig_change_time.labels(self.node, self.gpu, op).observe(seconds / n)

    def prewarm(self, outcome: str) -> None:
        self.prewarms.labels(self.node, outcome).inc()

    def serve(self, port: int, host: str = DEFAULT_HOST) -> str:
        self._endpoint = Endpoint(self.registry, port, host)
        return self._endpoint.url

    def close(self) -> None:
        if self._endpoint is not None:
            self._endpoint.close()
            self._endpoint = None
