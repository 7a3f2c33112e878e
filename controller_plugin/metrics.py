"""Prometheus metrics of the scheduler service (served on ``--metrics-port``, ``docs/observability.md``).

Each service has its own registry, so several services in one process (tests, ``esg up``) never
clash over metric names. Labels are bounded (:mod:`agent_channel.metrics`): ``app`` and ``function``
take the first :data:`MAX_APPS` apps and :data:`MAX_FUNCTIONS` (app, function) pairs seen, later ones
count under ``_other``; ``node`` is bounded by the cluster. The hot path (a step's outcomes, a turn's
dispatches and results) folds its counts per label first and touches each cached child once; its series
are written by the main loop alone, without locks (:class:`~agent_channel.metrics.FastHistogram`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from agent_channel.metrics import DEFAULT_HOST, OTHER, Bounded, Children, Endpoint, FastCounter, FastHistogram
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


@dataclass(frozen=True)
class _AppSeries:
    label: str
    requests: Any
    slo: dict[str, Any]
    latency: Any


@dataclass(frozen=True)
class _FunctionSeries:
    decisions: dict[str, Any]
    jobs: Any
    batch: Any
    stages: tuple[Any, ...]
    """In :data:`STAGES`' order."""
    cold: Any


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
        self.requests = FastCounter("esg_requests", "App activations accepted", ["app"], r)
        self.slo = FastCounter("esg_slo", "Finished app activations by SLO result (hit, miss, rejected)",
                               ["app", "result"], r)
        self.request_latency = FastHistogram("esg_request_seconds", "App activations from the scheduler's accept "
                                             "to its answer", ["app"], r, LATENCY_BUCKETS)
        self.slo_seconds = Gauge("esg_slo_seconds", "Each app's SLO", ["app"], registry=r)
        self.stage_latency = FastHistogram("esg_stage_seconds", "Per batch, the time of each stage: queue, "
                                           "dispatch, run, return", ["app", "function", "stage"], r,
                                           LATENCY_BUCKETS)
        self.queue_length = Gauge("esg_afw_queue_length", "Jobs waiting per AFW queue",
                                  ["app", "function"], registry=r)
        self.queue_head_age = Gauge("esg_afw_queue_head_age_seconds", "Age of the oldest job waiting per AFW "
                                    "queue (0: empty)", ["app", "function"], registry=r)
        self.waiting = Gauge("esg_afw_queues_waiting", "AFW queues whose head the last step left waiting, by "
                             "reason", ["reason"], registry=r)
        self.decisions = FastCounter("esg_decisions", "Batches dispatched, by how they were placed",
                                     ["app", "function", "placement"], r)
        self.jobs = FastCounter("esg_jobs", "Function invocations dispatched", ["app", "function"], r)
        self.batch_size = FastHistogram("esg_batch_size", "Jobs per dispatched batch", ["app", "function"], r,
                                        BATCH_BUCKETS)
        self.cold_starts = FastCounter("esg_cold_starts", "Batches whose agent started a worker for them",
                                       ["app", "function"], r)
        self.prewarms = Counter("esg_prewarms_total", "Pre-warms sent to agents (workers started ahead of a batch)",
                                registry=r)
        self.explored = Counter("esg_explored_batches_total", "Batches run in a configuration the table lacked",
                                registry=r)
        self.profile_events = Counter("esg_profile_events_total", "Learned-profile changes: a configuration "
                                      "newly measured, or a drift", ["kind"], registry=r)
        self.mig_change_planned = Gauge("esg_mig_change_planned_seconds", "The time per MIG instance created or "
                                        "destroyed the policy plans with (learned from the agents' measurements)",
                                        registry=r)
        # -- per node
        self.agents = Gauge("esg_agents_alive", "Agents heartbeating", registry=r)
        self.node_up = Gauge("esg_node_up", "1 while the node's agent heartbeats, 0 once it is lost", ["node"],
                             registry=r)
        self.mig_changes = FastCounter("esg_mig_changes_planned", "MIG instances the scheduler's placements "
                                       "create or destroy", ["node", "op"], r)
        # -- the scheduler itself
        self.step_time = FastHistogram("esg_scheduler_step_seconds", "One scheduling step (the core's step and "
                                       "the messages it makes)", [], r, FAST_BUCKETS)
        self.redis_round_trip = FastHistogram("esg_redis_round_trip_seconds", "The main loop's Redis round trips",
                                              ["what"], r, FAST_BUCKETS)
        self.ack_latency = Histogram("esg_ack_latency_seconds", "From acceptance to ack", registry=r,
                                     buckets=(.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30))
        self.acks = Counter("esg_acks_total", "Acks produced by kind", ["kind"], registry=r)
        self.dead_letters = Counter("esg_dead_letters_total", "Malformed messages set aside", ["topic"],
                                    registry=r)
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
        self._standbys: set[str] = set()
        self._apps: dict[str, _AppSeries] = {}
        self._functions: dict[tuple[str, str], _FunctionSeries] = {}
        self._mig = Children(self.mig_changes)
        self._redis = Children(self.redis_round_trip)
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

    def _app(self, app: str) -> _AppSeries:
        """An app's series, resolved once (its label bounded)."""
        got = self._apps.get(app)
        if got is None:
            label = self.app_label(app)
            got = self._apps[app] = _AppSeries(label, self.requests.labels(label), {
                r: self.slo.labels(label, r) for r in ("hit", "miss", "rejected")}, self.request_latency.labels(label))
        return got

    def _function(self, app: str, function: str) -> _FunctionSeries:
        """An (app, function)'s series, resolved once (its labels bounded)."""
        got = self._functions.get((app, function))
        if got is None:
            labels = self._fn(app, function)
            got = self._functions[(app, function)] = _FunctionSeries(
                {p: self.decisions.labels(*labels, p) for p in PLACEMENTS}, self.jobs.labels(*labels),
                self.batch_size.labels(*labels), tuple(self.stage_latency.labels(*labels, st) for st in STAGES),
                self.cold_starts.labels(*labels))
        return got

    # -- what happened ------------------------------------------------------------------------------
    def accepted(self, app: str, slo_ms: float) -> None:
        series = self._app(app)
        series.requests.inc()
        if series.label != OTHER and self._slos.get(series.label) != slo_ms:
            self._slos[series.label] = slo_ms
            self.slo_seconds.labels(series.label).set(slo_ms / 1000)

    def outcomes(self, outcomes: Iterable[RequestOutcome]) -> None:
        """A step's finished activations: SLO results and latencies."""
        for o in outcomes:
            series = self._app(o.app)
            if o.rejected:
                series.slo["rejected"].inc()
                continue
            latency_ms = o.finished_ms - o.arrival_ms
            series.slo["hit" if o.ok and latency_ms <= o.slo_ms else "miss"].inc()
            series.latency.observe(max(0.0, latency_ms) / 1000)

    def sent(self, dispatches: Sequence[Dispatch]) -> None:
        """A turn's batches, dispatched: decisions by placement, jobs and batch sizes."""
        for d in dispatches:
            series = self._function(d.app, d.function)
            n = len(d.jobs)
            fit = d.fit
            series.decisions["reconfigure" if fit.create or fit.destroy else
                             "warm" if fit.warm_worker is not None else "cold"].inc()
            series.jobs.inc(n)
            series.batch.observe(n)
            if fit.create:
                self._mig.get(fit.node, "create").inc()
            if fit.destroy:
                self._mig.get(fit.node, "destroy").inc(len(fit.destroy))

    def batch_done(self, d: Dispatch, decided_ms: float, sent_ms: float, done_ms: float,
                   run_ms: float | None, cold: bool) -> None:
        """An answered batch's stages (:data:`STAGES`) and whether its agent started a worker for it."""
        series = self._function(d.app, d.function)
        queue, dispatch, run, back = series.stages
        enqueued = d.jobs[0].enqueued_ms if d.jobs else decided_ms    # the head: the longest wait
        for j in d.jobs:
            if j.enqueued_ms < enqueued:
                enqueued = j.enqueued_ms
        queue.observe(max(0.0, decided_ms - enqueued) / 1000)
        dispatch.observe(max(0.0, sent_ms - decided_ms) / 1000)
        if run_ms is not None:
            run.observe(run_ms / 1000)
            back.observe(max(0.0, done_ms - sent_ms - run_ms) / 1000)
        if cold:
            series.cold.inc()

    def round_trip(self, what: str, seconds: float) -> None:
        self._redis.get(what).observe(seconds)

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

    def show_standbys(self, names: set[str]) -> None:
        """Keep the standbys' lag only for those still there."""
        for gone in self._standbys - names:
            self.standbys_lag.remove(gone)
        self._standbys = set(names)

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
