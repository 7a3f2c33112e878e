"""Prometheus metrics of the scheduler service (served on ``--metrics-port``, ``docs/observability.md``).

Each service has its own registry, so several services in one process (tests, ``esg up``) never
clash over metric names. Labels are bounded (:mod:`agent_channel.metrics`): ``app`` and ``function``
take the first :data:`MAX_APPS` apps and :data:`MAX_FUNCTIONS` (app, function) pairs seen, later ones
count under ``_other``; ``node`` is bounded by the cluster. The hot path (a step's outcomes, a turn's
dispatches and results) folds its counts per label first and touches each cached child once.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from agent_channel.metrics import DEFAULT_HOST, OTHER, Bounded, Children, Endpoint
from esg.events import Dispatch, RequestOutcome
from esg.queues import AfwQueue

#: Distinct app names (and (app, function) pairs) that get a label value of their own.
MAX_APPS = 64
MAX_FUNCTIONS = 256
#: Latency buckets (seconds), from a fast batch's hop to OpenWhisk's default time limit.
LATENCY_BUCKETS = (.001, .0025, .005, .01, .025, .05, .075, .1, .15, .2, .3, .5, .75, 1, 2.5, 5, 10, 30, 60)
#: Scheduler step and Redis round-trip buckets (seconds).
FAST_BUCKETS = (.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64)
#: Per-batch stages (``esg_stage_seconds{stage}``): the head's wait in its AFW queue (enqueued to
#: placed), the scheduler's turn (placed to sent), the agent's measured run, and the rest of the round
#: trip (sent to result read, less the run: intake, inputs, answer, the scheduler's read).
STAGES = ("queue", "dispatch", "run", "return")
#: How a batch was placed (``esg_decisions_total{placement}``), in ESG_Dispatch's terms (as ``esg status``).
PLACEMENTS = ("warm", "reconfigure", "cold")
#: Why a queue waits (``esg_afw_queues_waiting{reason}``): the core's wait reasons, classed.
WAIT_REASONS = {"no configuration": "no_configuration", "none of": "no_fit", "no nodes": "no_nodes",
                "waiting for": "worker_starting", "no free vCPUs": "no_vcpus", "policy holds": "policy_holds"}


def placement(d: Dispatch) -> str:
    """``warm`` (an idle warm worker), ``reconfigure`` (a MIG change planned) or ``cold`` (a new worker)."""
    if d.fit.reconfigures:
        return "reconfigure"
    return "warm" if d.fit.warm_worker is not None else "cold"


def wait_reason(reason: str) -> str:
    for prefix, label in WAIT_REASONS.items():
        if prefix in reason:
            return label
    return "other"


class Metrics:
    def __init__(self, max_apps: int = MAX_APPS, max_functions: int = MAX_FUNCTIONS) -> None:
        r = self.registry = CollectorRegistry()
        self.app_label = Bounded(max_apps)
        self.function_label = Bounded(max_functions)
        # -- per app and function
        self.requests = Counter("esg_requests_total", "App activations accepted", ["app"], registry=r)
        self.slo = Counter("esg_slo_total", "Finished app activations by SLO result (hit, miss, rejected)",
                           ["app", "result"], registry=r)
        self.request_latency = Histogram("esg_request_seconds", "App activations from the scheduler's accept to "
                                         "its answer", ["app"], buckets=LATENCY_BUCKETS, registry=r)
        self.slo_seconds = Gauge("esg_slo_seconds", "Each app's SLO", ["app"], registry=r)
        self.stage_latency = Histogram("esg_stage_seconds", "Per batch, the time of each stage: queue, dispatch, "
                                       "run, return", ["app", "function", "stage"], buckets=LATENCY_BUCKETS,
                                       registry=r)
        self.queue_length = Gauge("esg_afw_queue_length", "Jobs waiting per AFW queue",
                                  ["app", "function"], registry=r)
        self.queue_head_age = Gauge("esg_afw_queue_head_age_seconds", "Age of the oldest job waiting per AFW "
                                    "queue (0: empty)", ["app", "function"], registry=r)
        self.waiting = Gauge("esg_afw_queues_waiting", "AFW queues whose head the last step left waiting, by "
                             "reason", ["reason"], registry=r)
        self.decisions = Counter("esg_decisions_total", "Batches dispatched, by how they were placed",
                                 ["app", "function", "placement"], registry=r)
        self.jobs = Counter("esg_jobs_total", "Function invocations dispatched", ["app", "function"], registry=r)
        self.batch_size = Histogram("esg_batch_size", "Jobs per dispatched batch", ["app", "function"],
                                    buckets=BATCH_BUCKETS, registry=r)
        self.cold_starts = Counter("esg_cold_starts_total", "Batches whose agent started a worker for them",
                                   ["app", "function"], registry=r)
        self.prewarms = Counter("esg_prewarms_total", "Pre-warms sent to agents (workers started ahead of a batch)",
                                registry=r)
        self.explored = Counter("esg_explored_batches_total", "Batches run in a configuration the table lacked",
                                registry=r)
        self.profile_events = Counter("esg_profile_events_total", "Learned-profile changes: a configuration "
                                      "newly measured, or a drift", ["kind"], registry=r)
        # -- per node
        self.agents = Gauge("esg_agents_alive", "Agents heartbeating", registry=r)
        self.node_up = Gauge("esg_node_up", "1 while the node's agent heartbeats, 0 once it is lost", ["node"],
                             registry=r)
        self.mig_changes = Counter("esg_mig_changes_planned_total", "MIG instances the scheduler's placements "
                                   "create or destroy", ["node", "op"], registry=r)
        # -- the scheduler itself
        self.step_time = Histogram("esg_scheduler_step_seconds", "One scheduling step (the core's step and "
                                   "the messages it makes)", buckets=FAST_BUCKETS, registry=r)
        self.redis_round_trip = Histogram("esg_redis_round_trip_seconds", "The main loop's Redis round trips",
                                          ["what"], buckets=FAST_BUCKETS, registry=r)
        self.ack_latency = Histogram("esg_ack_latency_seconds", "From acceptance to ack", registry=r,
                                     buckets=(.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30))
        self.acks = Counter("esg_acks_total", "Acks produced by kind", ["kind"], registry=r)
        self.dead_letters = Counter("esg_dead_letters_total", "Malformed messages set aside", ["topic"],
                                    registry=r)
        self._c = {name: Children(m) for name, m in (
            ("requests", self.requests), ("slo", self.slo), ("latency", self.request_latency),
            ("stage", self.stage_latency), ("decisions", self.decisions), ("jobs", self.jobs),
            ("batch", self.batch_size), ("cold", self.cold_starts), ("mig", self.mig_changes),
            ("redis", self.redis_round_trip))}
        self._queues: set[tuple[str, str]] = set()
        self._nodes: set[str] = set()
        self._slos: dict[str, float] = {}
        self._endpoint: Endpoint | None = None

    # -- labels -------------------------------------------------------------------------------------
    def _fn(self, app: str, function: str) -> tuple[str, str]:
        """The (app, function) label values: both bounded (a pair past the limit is ``_other``)."""
        if self.function_label(f"{app}/{function}") == OTHER:
            return self.app_label(app), OTHER
        return self.app_label(app), function

    # -- what happened ------------------------------------------------------------------------------
    def accepted(self, app: str, slo_ms: float) -> None:
        label = self.app_label(app)
        self._c["requests"].get(label).inc()
        if label != OTHER and self._slos.get(label) != slo_ms:
            self._slos[label] = slo_ms
            self.slo_seconds.labels(label).set(slo_ms / 1000)

    def outcomes(self, outcomes: Iterable[RequestOutcome]) -> None:
        """A step's finished activations: SLO results and latencies (each label touched once a step)."""
        counts: dict[tuple[str, str], int] = {}
        latency = self._c["latency"]
        for o in outcomes:
            app = self.app_label(o.app)
            result = "rejected" if o.rejected else "hit" if o.slo_hit else "miss"
            counts[(app, result)] = counts.get((app, result), 0) + 1
            if not o.rejected:
                latency.get(app).observe(max(0.0, o.finished_ms - o.arrival_ms) / 1000)
        slo = self._c["slo"]
        for key, n in counts.items():
            slo.get(*key).inc(n)

    def sent(self, dispatches: Sequence[Dispatch]) -> None:
        """A turn's batches, dispatched: decisions by placement, jobs and batch sizes."""
        decisions, jobs, batch, mig = self._c["decisions"], self._c["jobs"], self._c["batch"], self._c["mig"]
        for d in dispatches:
            app, fn = self._fn(d.app, d.function)
            n = len(d.jobs)
            decisions.get(app, fn, placement(d)).inc()
            jobs.get(app, fn).inc(n)
            batch.get(app, fn).observe(n)
            if d.fit.reconfigures:
                if d.fit.create:
                    mig.get(d.fit.node, "create").inc()
                if d.fit.destroy:
                    mig.get(d.fit.node, "destroy").inc(len(d.fit.destroy))

    def batch_done(self, d: Dispatch, decided_ms: float, sent_ms: float, done_ms: float,
                   run_ms: float | None, cold: bool) -> None:
        """An answered batch's stages (:data:`STAGES`) and whether its agent started a worker for it."""
        app, fn = self._fn(d.app, d.function)
        stage = self._c["stage"]
        enqueued = min((j.enqueued_ms for j in d.jobs), default=decided_ms)
        stage.get(app, fn, "queue").observe(max(0.0, decided_ms - enqueued) / 1000)
        stage.get(app, fn, "dispatch").observe(max(0.0, sent_ms - decided_ms) / 1000)
        if run_ms is not None:
            stage.get(app, fn, "run").observe(run_ms / 1000)
            stage.get(app, fn, "return").observe(max(0.0, done_ms - sent_ms - run_ms) / 1000)
        if cold:
            self._c["cold"].get(app, fn).inc()

    def round_trip(self, what: str, seconds: float) -> None:
        self._c["redis"].get(what).observe(seconds)

    def set_queues(self, queues: Iterable[AfwQueue], now_ms: float) -> None:
        """Each AFW queue's length and head age; queues gone empty read 0 (queues past the label bound
        are added up under ``_other``, with the oldest head's age)."""
        lengths: dict[tuple[str, str], int] = dict.fromkeys(self._queues, 0)
        ages: dict[tuple[str, str], float] = dict.fromkeys(self._queues, 0.0)
        for q in queues:
            key = self._fn(*q.key)
            n = len(q)
            lengths[key] = lengths.get(key, 0) + n
            age = max(0.0, now_ms - q.head.enqueued_ms) / 1000 if n else 0.0
            ages[key] = max(ages.get(key, 0.0), age)
        for key, n in lengths.items():
            self.queue_length.labels(*key).set(n)
            self.queue_head_age.labels(*key).set(ages[key])
        self._queues |= lengths.keys()

    def set_waiting(self, waiting: dict) -> None:
        counts = dict.fromkeys((*WAIT_REASONS.values(), "other"), 0)
        for reason in waiting.values():
            counts[wait_reason(str(reason))] += 1
        for label, n in counts.items():
            self.waiting.labels(label).set(n)

    def set_nodes(self, live: Iterable[str], known: Iterable[str]) -> None:
        live = set(live)
        self._nodes |= set(known) | live
        for node in self._nodes:
            self.node_up.labels(node).set(1 if node in live else 0)
        self.agents.set(len(live))

    # -- serving ------------------------------------------------------------------------------------
    def serve(self, port: int, host: str = DEFAULT_HOST) -> None:
        self._endpoint = Endpoint(self.registry, port, host)

    def close(self) -> None:
        """Stop serving (the port is free again)."""
        if self._endpoint is not None:
            self._endpoint.close()
            self._endpoint = None
