"""Prometheus metrics of the scheduler service (served on ``--metrics-port``).

Each service has its own registry, so several services in one process (tests, ``esg up``) never
clash over metric names.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server


class Metrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.queue_length = Gauge("esg_afw_queue_length", "Jobs waiting per AFW queue",
                                  ["app", "function"], registry=r)
        self.decisions = Counter("esg_decisions_total", "Batches dispatched", registry=r)
        self.prewarms = Counter("esg_prewarms_total", "Pre-warms sent to agents (workers started ahead of a batch)",
                                registry=r)
        self.batch_size = Histogram("esg_batch_size", "Jobs per dispatched batch",
                                    buckets=(1, 2, 4, 8, 16, 32, 64), registry=r)
        self.slo = Counter("esg_slo_total", "Finished app activations by SLO result (hit, miss, rejected)", ["result"], registry=r)
        self.ack_latency = Histogram("esg_ack_latency_seconds", "From acceptance to ack", registry=r,
                                     buckets=(.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30))
        self.acks = Counter("esg_acks_total", "Acks produced by kind", ["kind"], registry=r)
        self.dead_letters = Counter("esg_dead_letters_total", "Malformed messages set aside", ["topic"],
                                    registry=r)
        self.profile_events = Counter("esg_profile_events_total", "Learned-profile changes: a configuration "
                                      "newly measured, or a drift", ["kind"], registry=r)
        self.explored = Counter("esg_explored_batches_total", "Batches run in a configuration the table lacked",
                                registry=r)
        self.agents = Gauge("esg_agents_alive", "Agents heartbeating", registry=r)
        self._queues: set[tuple[str, str]] = set()

    def set_queues(self, lengths: dict[tuple[str, str], int]) -> None:
        for key in self._queues - set(lengths):
            self.queue_length.labels(*key).set(0)
        for key, n in lengths.items():
            self.queue_length.labels(*key).set(n)
        self._queues |= set(lengths)

    def serve(self, port: int, host: str = "127.0.0.1") -> None:
        """Serve ``/metrics`` on ``host:port``: the loopback unless the operator names another address."""
        self._server = start_http_server(port, addr=host, registry=self.registry)

    def close(self) -> None:
        """Stop serving (the port is free again)."""
        server = getattr(self, "_server", None)
        if server is not None:
            httpd, thread = server
            httpd.shutdown()
            httpd.server_close()
            thread.join(timeout=5)
            self._server = None
