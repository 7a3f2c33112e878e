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
        self.leader = Gauge("esg_leader", "1 while this scheduler holds the leader lease", registry=r)
        self.epoch = Gauge("esg_leader_epoch", "The leader epoch this scheduler leads with (0: standing by)",
                           registry=r)
        self.ready = Gauge("esg_scheduler_ready", "1 for the leader and for a standby synced enough to take over",
                           registry=r)
        self.standby_lag = Gauge("esg_standby_lag_seconds", "How far this standby's reading of the agents' "
                                 "streams is behind (0 for the leader, -1 before its first read)", registry=r)
        self.standbys_lag = Gauge("esg_standbys_lag_seconds", "Each standby's lag, as the leader sees it",
                                  ["standby"], registry=r)
        self.leader_changes = Counter("esg_leader_takeovers_total", "Times this process took the lead", registry=r)
        self.ledger_losses = Counter("esg_ledger_losses_total", "Ledgers found lost at a takeover (Redis lost "
                                     "its data)", registry=r)
        self.agent_stream_recoveries = Gauge("esg_agent_stream_recoveries", "Consumer groups an agent made "
                                             "again after Redis lost them", ["node"], registry=r)
        self._standbys: set[str] = set()
        self._queues: set[tuple[str, str]] = set()

    def set_queues(self, lengths: dict[tuple[str, str], int]) -> None:
        for key in self._queues - set(lengths):
            self.queue_length.labels(*key).set(0)
        for key, n in lengths.items():
            self.queue_length.labels(*key).set(n)
        self._queues |= set(lengths)

    def show_standbys(self, names: set[str]) -> None:
        """Keep the standbys' lag only for those still there."""
        for gone in self._standbys - names:
            self.standbys_lag.remove(gone)
        self._standbys = set(names)

    def serve(self, port: int) -> None:
        self._server = start_http_server(port, addr="0.0.0.0", registry=self.registry)

    def close(self) -> None:
        """Stop serving (the port is free again)."""
        server = getattr(self, "_server", None)
        if server is not None:
            httpd, thread = server
            httpd.shutdown()
            httpd.server_close()
            thread.join(timeout=5)
            self._server = None
