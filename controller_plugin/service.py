"""The ESG scheduler as a service on OpenWhisk's Kafka topics.

Threads:

* **activation reader** -- consumes ``invoker{0..K-1}`` (assigned partitions, group ``esg-scheduler``,
  manual commits). Per poll: malformed messages go to the dead-letter topic; activations are inserted
  into the Redis ledger in one round trip (a known id is a redelivery and is dropped); only then are the
  offsets committed. It then reads each action's metadata (REST, cached) and hands the activation with
  its plan, or the reason it cannot run, to the main loop.
* **agent reader** -- consumes ``esgheartbeat`` and ``esgresults`` from their end, no group.
* **main loop** (the caller's thread) -- the only user of the core :class:`~esg.scheduler.Scheduler`:
  folds arrivals, results and lost batches into ``step``, sends each decision to its agent, pings
  ``health`` for live agents, answers health tests, fails what would miss the controller's deadline,
  and sends acks: stored in the ledger as ``acking``, produced, flushed, then marked ``done``.

Batch ids carry this incarnation's id, so results for batches of an earlier process are ignored; what
that process left unanswered is found in the ledger at start and finished exactly once.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis
from kafka import TopicPartition
from kafka.errors import KafkaError

from controller_plugin import acks, wire
from controller_plugin.bus import Bus, BusError, Topics
from controller_plugin.health import AgentRegistry
from controller_plugin.ledger import Ledger, LedgerEntry
from controller_plugin.metadata import (
    STATUS_WHISK_ERROR,
    ActivationError,
    AppPlan,
    MetadataClient,
    ProfileStore,
    plan_for,
)
from controller_plugin.metrics import Metrics
from controller_plugin.requests_state import FunctionResult, Outcome, Run
from controller_plugin.settings import Settings, redact_url
from esg import protocol
from esg.cluster import ClusterSnapshot
from esg.policies import make_policy
from esg.policies.base import PolicyContext
from esg.scheduler import Arrival, BatchDone, BatchLost, Cancel, Dispatch, Request, Scheduler

log = logging.getLogger("esg.scheduler")

PLAN_TTL_S = 10.0
POLL_MS = 50


class ServiceError(Exception):
    """A dependency is missing or unreachable at start-up; the message names it."""


def now_ms() -> int:
    return int(time.time() * 1000)


def controller_deadline_ms(msg: wire.ActivationMessage, timeout_ms: int) -> int:
    """When the controller force-completes the activation: transaction start + max(timeout, 60 s)·2 + 1 min."""
    start = msg.transid[1] if isinstance(msg.transid[1], int) else now_ms()
    return start + max(timeout_ms, 60_000) * 2 + 60_000


@dataclass
class Accepted:
    """An activation handed from the reader to the main loop."""

    msg: wire.ActivationMessage
    entry: LedgerEntry
    plan: AppPlan | None = None
    error: ActivationError | None = None


@dataclass
class HealthTest:
    msg: wire.ActivationMessage
    topic: int


@dataclass
class PendingAck:
    entry: LedgerEntry
    data: bytes
    record: dict[str, Any] | None
    topic: str
    accepted_ms: int
    kind: str


@dataclass
class InFlight:
    dispatch: Dispatch
    sent_s: float


@dataclass
class _Stop:
    reason: str = ""


class SchedulerService:
    def __init__(self, settings: Settings, redis_client: redis.Redis | None = None) -> None:
        self.s = settings
        self.topics = Topics(settings.topic_prefix, settings.controller_id)
        self.redis = redis_client or connect_redis(settings.redis_url)
        try:
            self.bus = Bus(settings.kafka)
        except BusError as exc:
            raise ServiceError(str(exc)) from None
        self.ledger = Ledger(self.redis, f"{settings.topic_prefix}{settings.controller_id}", settings.topic_prefix)
        self.metadata = MetadataClient(settings.openwhisk_api, settings.openwhisk_auth)
        self.profiles = ProfileStore(settings.profiles_dir)
        self.registry = AgentRegistry(self.ledger.invoker_id, self.ledger.invoker_ids(), settings.agent_timeout_s)
        policy = make_policy(settings.policy, PolicyContext(apps={}, profiles={}))
        self.scheduler = Scheduler({}, policy, batch_ids=(f"{settings.incarnation}-{i}" for i in itertools.count()))
        self.metrics = Metrics()
        self.inbox: queue.Queue = queue.Queue()
        self.stop_event = threading.Event()
        self.runs: dict[str, Run] = {}
        self.inflight: dict[str, InFlight] = {}
        self.events: list = []
        self.pending_acks: list[PendingAck] = []
        self._unconfirmed: list[tuple[Any, PendingAck]] = []
        self.health_waiting: dict[int, HealthTest] = {}
        self._registered: dict[str, AppPlan] = {}
        self._plans: dict[tuple[str, str | None], tuple[float, AppPlan]] = {}
        self._wanted_invokers = max(self.registry.invoker_count(), 0)
        self._threads: list[threading.Thread] = []
        self._last_ping = 0.0
        self._last_watchdog = 0.0
        self._ack_topics: set[str] = set()
        self.errors: list[str] = []
        self.stats = {"acks": 0, "dispatches": 0, "dead_letters": 0, "ignored_results": 0}

    # -- start and stop ---------------------------------------------------------------------------------
    def start(self) -> None:
        log.info("esg scheduler starting: %s", self.s.describe())
        base = [(self.topics.completed, "completed"), (self.topics.health, "health"),
                (self.topics.results, "esg"), (self.topics.heartbeat, "esg"),
                (self.topics.dead_letter, "deadletter")]
        base += [(self.topics.invoker(n), "invoker") for n in range(self._wanted_invokers)]
        try:
            self.bus.ensure_topics(base)
        except (KafkaError, OSError) as exc:
            raise ServiceError(f"Kafka at {self.s.kafka} refused topic creation: {exc}") from None
        self._ack_topics.add(self.topics.completed)
        if self.s.metrics_port is not None:
            self.metrics.serve(self.s.metrics_port)
        self._recover()
        for target, name in ((self._read_activations, "esg-activations"), (self._read_agents, "esg-agents")):
            t = threading.Thread(target=self._guard(target), name=name, daemon=True)
            t.start()
            self._threads.append(t)

    def _guard(self, fn: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                fn()
            except Exception as exc:  # a reader died: stop the service rather than hang silently
                log.exception("%s failed", threading.current_thread().name)
                self.errors.append(f"{threading.current_thread().name}: {exc}")
                self.inbox.put(_Stop(str(exc)))
        return run

    def stop(self) -> None:
        self.stop_event.set()
        self.inbox.put(_Stop("stop"))

    def close(self) -> None:
        self.stop_event.set()
        for t in self._threads:
            t.join(timeout=5)
        try:
            self._send_acks()
            self._confirm_acks(wait=True)
        except Exception:  # best effort on the way out; the ledger finishes it at the next start
            log.warning("could not send the last acks; the next start finishes them")
        self.bus.close()
        self.redis.close()
        self.metrics.close()

    def run(self, duration_s: float | None = None) -> None:
        """The main loop, until :meth:`stop` (or ``duration_s``)."""
        end = None if duration_s is None else time.monotonic() + duration_s
        while not self.stop_event.is_set():
            if end is not None and time.monotonic() > end:
                break
            self.tick()
        if self.errors:
            raise ServiceError("; ".join(self.errors))

    # -- the loop -------------------------------------------------------------------------------------
    def tick(self, wait_s: float = 0.02) -> None:
        items = []
        try:
            items.append(self.inbox.get(timeout=wait_s))
            while len(items) < 5000:
                items.append(self.inbox.get_nowait())
        except queue.Empty:
            pass
        mono = time.monotonic()
        for item in items:
            if isinstance(item, _Stop):
                self.stop_event.set()
            elif isinstance(item, Accepted):
                self._accept(item)
            elif isinstance(item, HealthTest):
                self.health_waiting[item.topic] = item
            elif isinstance(item, protocol.Heartbeat):
                self._heartbeat(item, mono)
            elif isinstance(item, protocol.ResultMessage):
                self._result(item)
        for agent in self.registry.expire(mono):
            self._agent_lost(agent.node)
        if mono - self._last_ping >= self.s.ping_interval_s:
            self._last_ping = mono
            self._ping()
            self.metrics.agents.set(len(self.registry.live()))
        if self.health_waiting and self.registry.any_alive():
            self._answer_health_tests()
        if mono - self._last_watchdog >= 1.0:
            self._last_watchdog = mono
            self._watchdog()
        if self.events or self.scheduler.queues.total():
            self._step()
        if self.pending_acks:
            self._send_acks()
        if self._unconfirmed:
            self._confirm_acks()

    def _step(self) -> None:
        events, self.events = self.events, []
        t = now_ms()
        result = self.scheduler.step(t, self._snapshot(), events)
        for d in result.dispatches:
            self._send_dispatch(d, t)
        for o in result.outcomes:
            run = self.runs.get(o.request_id)
            if run is None:
                continue
            self.metrics.slo.labels("hit" if o.slo_hit else "miss").inc()
            if o.ok:
                self._finish(run, run.final())
            else:
                self._finish(run, acks.error_outcome(o.error or "failed", STATUS_WHISK_ERROR, t))
        self.metrics.set_queues(self.scheduler.queue_lengths())

    def _snapshot(self) -> ClusterSnapshot:
        """Nodes as heartbeats report them, with this process's in-flight batches reserved on them."""
        nodes = {}
        for n in self.registry.node_states():
            n.vcpus_free = n.vcpus_total
            nodes[n.name] = n
        snap = ClusterSnapshot(nodes)
        for f in self.inflight.values():
            if f.dispatch.node in nodes:
                snap.reserve(f.dispatch.config, f.dispatch.fit)
        return snap

    # -- activations ----------------------------------------------------------------------------------
    def _accept(self, item: Accepted) -> None:
        aid = item.msg.activation_id
        if aid in self.runs:
            return
        if item.error is not None or item.plan is None:
            err = item.error or ActivationError("no plan", STATUS_WHISK_ERROR)
            log.info("activation %s of %s answered with an error: %s", aid, item.msg.action.qualified, err)
            self._ack(item.msg, item.entry, None, acks.error_outcome(str(err), err.status_code, now_ms()))
            return
        plan = item.plan
        if self._registered.get(plan.app.name) != plan:
            self.scheduler.add_app(plan.app, plan.profiles, plan.specs)
            self._registered[plan.app.name] = plan
        self.runs[aid] = Run(item.msg, plan, item.entry)
        self.events.append(Arrival(Request(aid, plan.app.name, float(item.entry.accepted_ms))))

    def _send_dispatch(self, d: Dispatch, t: int) -> None:
        runs = [self.runs[j.request_id] for j in d.jobs]
        fplan = runs[0].plan.functions[d.function]
        meta = fplan.action
        action = protocol.ActionRef(meta.path, meta.name, meta.version, meta.kind, meta.timeout_ms, meta.memory_mb)
        reqs = tuple(protocol.RunRequest(r.activation_id, str(r.msg.transid[0]), r.input_for(d.function),
                                         t + meta.timeout_ms, r.msg.user.namespace) for r in runs)
        msg = protocol.DispatchMessage(d.batch_id, d.node, d.app, d.function, action, d.config, d.fit.slice,
                                       d.fit.destroy, reqs)
        self.inflight[d.batch_id] = InFlight(d, time.monotonic())
        for r in runs:
            r.batches.add(d.batch_id)
        self.bus.send(self.topics.dispatch(d.node), protocol.encode(msg))
        self.metrics.decisions.inc()
        self.metrics.batch_size.observe(len(d.jobs))
        self.stats["dispatches"] += 1

    def _result(self, rm: protocol.ResultMessage) -> None:
        if not rm.batch_id.startswith(self.s.incarnation + "-"):
            self.stats["ignored_results"] += 1
            return  # a batch of an earlier incarnation: its activations are being finished anew
        flight = self.inflight.pop(rm.batch_id, None)
        if flight is None:
            return  # a duplicate, or the batch was declared lost
        d = flight.dispatch
        by_id = {r.activation_id: r for r in rm.results}
        for job in d.jobs:
            run = self.runs.get(job.request_id)
            if run is None:
                continue
            run.batches.discard(d.batch_id)
            r = by_id.get(job.request_id)
            if r is None:
                why = rm.error or f"agent {rm.node} returned no result for it"
                res = FunctionResult(STATUS_WHISK_ERROR, {"error": f"{run.plan.functions[d.function].short}: {why}"},
                                     now_ms(), now_ms())
            else:
                res = FunctionResult(r.status_code, r.result, r.start_ms, r.end_ms, r.init_ms, r.logs, r.timeout)
            run.record(d.function, res)
            if res.status_code != 0:
                self.events.append(Cancel(run.activation_id))
                self._finish(run, run.failed(d.function))
        self.events.append(BatchDone(rm.batch_id, ok=True))

    def _finish(self, run: Run, outcome: Outcome) -> None:
        if self.runs.pop(run.activation_id, None) is None:
            return
        self._ack(run.msg, run.entry, run.plan.action, outcome)

    def _fail(self, run: Run, message: str) -> None:
        self.events.append(Cancel(run.activation_id))
        t = now_ms()
        self._finish(run, acks.error_outcome(message, STATUS_WHISK_ERROR, t))

    def _ack(self, msg: wire.ActivationMessage, entry: LedgerEntry, action, outcome: Outcome) -> None:
        record = acks.activation_record(msg, action, outcome)
        data = acks.ack_bytes(msg, record, self.registry.instance(entry.topic))
        topic = wire.completed_topic(msg.root_controller, self.s.topic_prefix)
        kind = "combined" if msg.blocking else "completion"
        self.pending_acks.append(PendingAck(entry, data, record, topic, entry.accepted_ms, kind))

    def _send_acks(self) -> None:
        """Ledger ``acking`` (with the bytes) → produce; once the broker confirms, ledger ``done``.

        The ack's bytes are in Redis before it can reach Kafka, so a restart either finds it on
        ``completed{C}`` or sends those same bytes: never two acks, never none.
        """
        batch, self.pending_acks = self.pending_acks, []
        if not batch:
            return
        new_topics = {p.topic for p in batch} - self._ack_topics
        if new_topics:
            self.bus.ensure_topics((t, "completed") for t in new_topics)
            self._ack_topics |= new_topics
        self.ledger.mark_acking((p.entry, p.data, p.record) for p in batch)
        for p in batch:
            self._unconfirmed.append((self.bus.send(p.topic, p.data), p))
        t = now_ms()
        for p in batch:
            self.metrics.ack_latency.observe(max(0, t - p.accepted_ms) / 1000)
            self.metrics.acks.labels(p.kind).inc()
        self.stats["acks"] += len(batch)

    def _confirm_acks(self, wait: bool = False) -> None:
        """Mark ``done`` the acks the broker took; send again those it refused."""
        if wait:
            self.bus.flush()
        keep, done = [], []
        for fut, p in self._unconfirmed:
            if not fut.is_done:
                keep.append((fut, p))
            elif fut.succeeded():
                done.append(p.entry.activation_id)
            else:
                log.warning("ack of %s not taken by Kafka (%s); sending it again", p.entry.activation_id,
                            type(fut.exception).__name__)
                keep.append((self.bus.send(p.topic, p.data), p))
        self._unconfirmed = keep
        if done:
            self.ledger.mark_done(done)

    # -- agents and health ----------------------------------------------------------------------------
    def _heartbeat(self, hb: protocol.Heartbeat, mono: float) -> None:
        joined = self.registry.heartbeat(hb, mono)
        if joined is None:
            return
        log.info("agent %s is alive as invoker%d (%d MB)", hb.node, joined.invoker_id, hb.memory_mb)
        self.bus.ensure_topics([(self.topics.invoker(joined.invoker_id), "invoker"),
                                (self.topics.dispatch(hb.node), "esg")])
        self._wanted_invokers = max(self._wanted_invokers, joined.invoker_id + 1)
        self._last_ping = 0.0  # ping at once: the controller learns of the new invoker now

    def _ping(self) -> None:
        for ping in self.registry.pings():
            self.bus.send(self.topics.health, ping)

    def _answer_health_tests(self) -> None:
        waiting, self.health_waiting = self.health_waiting, {}
        for ht in waiting.values():
            topic = wire.completed_topic(ht.msg.root_controller, self.s.topic_prefix)
            if topic not in self._ack_topics:
                self.bus.ensure_topics([(topic, "completed")])
                self._ack_topics.add(topic)
            self.bus.send(topic, acks.health_ack(ht.msg, self.registry.instance(ht.topic)))

    def _agent_lost(self, node: str) -> None:
        lost = [b for b, f in self.inflight.items() if f.dispatch.node == node]
        log.warning("agent %s lost (no heartbeat for %.1f s): %d batches in flight", node,
                    self.s.agent_timeout_s, len(lost))
        t = now_ms()
        for b in lost:
            d = self.inflight.pop(b).dispatch
            for job in d.jobs:
                run = self.runs.get(job.request_id)
                if run is None:
                    continue
                run.batches.discard(b)
                if t + self._margin_ms(run) > controller_deadline_ms(run.msg, run.plan.action.timeout_ms):
                    self._fail(run, f"agent {node} was lost while running {run.plan.functions[d.function].short}")
            self.events.append(BatchLost(b))
        self._last_ping = 0.0

    def _margin_ms(self, run: Run) -> int:
        """Time kept in hand before the controller's deadline: the margin plus a re-run of the action."""
        return int(self.s.deadline_margin_s * 1000) + run.plan.action.timeout_ms

    def _watchdog(self) -> None:
        t = now_ms()
        for run in list(self.runs.values()):
            deadline = controller_deadline_ms(run.msg, run.plan.action.timeout_ms)
            if t + self.s.deadline_margin_s * 1000 > deadline:
                self._fail(run, "the ESG scheduler could not finish the activation before the controller's "
                                "deadline (no agent had room for it, or its agent was lost)")

    # -- the activation reader (its own thread) --------------------------------------------------------
    def _read_activations(self) -> None:
        consumer = self.bus.consumer(self.s.group_id)
        assigned: list[TopicPartition] = []
        try:
            while not self.stop_event.is_set():
                want = self._wanted_invokers
                if len(assigned) != want:
                    positions = {tp: consumer.position(tp) for tp in assigned}
                    self.bus.ensure_topics((self.topics.invoker(n), "invoker") for n in range(want))
                    assigned = [TopicPartition(self.topics.invoker(n), 0) for n in range(want)]
                    consumer.assign(assigned)
                    for tp, pos in positions.items():
                        consumer.seek(tp, pos)
                if not assigned:
                    time.sleep(0.05)
                    continue
                batches = consumer.poll(timeout_ms=POLL_MS)
                if not batches:
                    continue
                records = [r for tp in sorted(batches) for r in batches[tp]]
                try:
                    handed = self._take(records)
                except (redis.RedisError, KafkaError) as exc:
                    log.error("cannot record activations (%s); retrying", type(exc).__name__)
                    for tp, recs in batches.items():
                        consumer.seek(tp, recs[0].offset)
                    time.sleep(0.5)
                    continue
                # In the ledger now: the main loop may start on them while the commit is under way.
                for item in handed:
                    if isinstance(item, Accepted):
                        self._resolve(item)
                    self.inbox.put(item)
                consumer.commit()
        finally:
            consumer.close(autocommit=False)

    def _take(self, records) -> list:
        """Parse, dead-letter the malformed, ledger the new; what the main loop should see, in order."""
        t = now_ms()
        out: list = []
        fresh: list[tuple[wire.ActivationMessage, int, str]] = []
        dead = False
        for rec in records:
            n = self.topics.invoker_index(rec.topic)
            try:
                msg = wire.parse_activation(rec.value)
            except wire.WireError as exc:
                self._dead_letter(rec, f"not an ActivationMessage: {exc}")
                dead = True
                continue
            if msg.is_health_test:
                out.append(HealthTest(msg, n))
                continue
            fresh.append((msg, n, rec.value.decode("utf-8")))
        if fresh:
            new = self.ledger.accept([(m.activation_id, n, t, raw) for m, n, raw in fresh])
            for (m, n, raw), is_new in zip(fresh, new):
                if is_new:
                    out.append(Accepted(m, LedgerEntry(m.activation_id, "open", n, t, raw)))
        if dead:
            self.bus.flush()
        return out

    def _resolve(self, item: Accepted) -> None:
        msg = item.msg
        key = (msg.action.qualified, msg.revision)
        mono = time.monotonic()
        hit = self._plans.get(key)
        if hit is not None and mono - hit[0] < PLAN_TTL_S:
            item.plan = hit[1]
            return
        try:
            meta = self.metadata.action(msg.action.qualified, msg.revision, cache=msg.revision is not None)
            plan = plan_for(meta, msg.revision, lambda fqn: self.metadata.action(fqn, None, cache=False),
                            self.profiles)
        except ActivationError as exc:
            item.error = exc
            return
        except Exception as exc:  # a bug must not lose the activation: it is answered as a system error
            log.exception("planning %s failed", msg.action.qualified)
            item.error = ActivationError(f"the ESG scheduler could not plan {msg.action.qualified}: "
                                         f"{type(exc).__name__}", STATUS_WHISK_ERROR)
            return
        if hit is not None and hit[1] == plan:
            plan = hit[1]
        self._plans[key] = (mono, plan)
        item.plan = plan

    def _dead_letter(self, rec, reason: str) -> None:
        log.warning("dead letter: %s offset %d: %s", rec.topic, rec.offset, reason)
        headers = [("esg-reason", reason.encode()), ("esg-topic", rec.topic.encode()),
                   ("esg-offset", str(rec.offset).encode())]
        self.bus.producer.send(self.topics.dead_letter, rec.value if rec.value is not None else b"",
                               headers=headers)
        self.metrics.dead_letters.labels(rec.topic).inc()
        self.stats["dead_letters"] += 1

    # -- the agent reader (its own thread) -------------------------------------------------------------
    def _read_agents(self) -> None:
        consumer = self.bus.consumer(None)
        tps = [TopicPartition(self.topics.heartbeat, 0), TopicPartition(self.topics.results, 0)]
        consumer.assign(tps)
        consumer.seek_to_end(*tps)
        try:
            while not self.stop_event.is_set():
                batches = consumer.poll(timeout_ms=POLL_MS)
                dead = False
                for tp in sorted(batches):
                    for rec in batches[tp]:
                        try:
                            m = protocol.decode(rec.value)
                        except protocol.ProtocolError as exc:
                            self._dead_letter(rec, str(exc))
                            dead = True
                            continue
                        if isinstance(m, protocol.Heartbeat | protocol.ResultMessage):
                            self.inbox.put(m)
                        else:
                            self._dead_letter(rec, f"unexpected {type(m).__name__} on {rec.topic}")
                            dead = True
                if dead:
                    self.bus.flush()
        finally:
            consumer.close(autocommit=False)

    # -- recovery -------------------------------------------------------------------------------------
    def _recover(self) -> None:
        """Finish what an earlier incarnation accepted but did not answer, each exactly once."""
        left = self.ledger.unfinished()
        if not left:
            return
        acking = {e.activation_id: e for e in left if e.state == "acking"}
        sent = self._acked_ids(set(acking)) if acking else set()
        resend = [e for a, e in acking.items() if a not in sent]
        for e in resend:
            topic = wire.completed_topic(wire.parse_activation(e.raw).root_controller, self.s.topic_prefix)
            self.bus.send(topic, e.ack.encode())
        self.bus.flush()
        self.ledger.mark_done(acking)
        reopened = 0
        for e in left:
            if e.state != "open":
                continue
            try:
                msg = wire.parse_activation(e.raw)
            except wire.WireError:
                self.ledger.mark_done([e.activation_id])
                continue
            item = Accepted(msg, e)
            self._resolve(item)
            self.inbox.put(item)
            reopened += 1
        log.info("recovery: %d activations to run again, %d acks already sent, %d acks resent",
                 reopened, len(acking) - len(resend), len(resend))

    def _acked_ids(self, wanted: set[str]) -> set[str]:
        """The ids among ``wanted`` that already have an ack on ``completed{C}`` (read from the start)."""
        consumer = self.bus.consumer(None)
        tp = TopicPartition(self.topics.completed, 0)
        found: set[str] = set()
        try:
            consumer.assign([tp])
            consumer.seek_to_beginning(tp)
            end = consumer.end_offsets([tp])[tp]
            deadline = time.monotonic() + 60
            while consumer.position(tp) < end and time.monotonic() < deadline:
                for recs in consumer.poll(timeout_ms=200).values():
                    for rec in recs:
                        try:
                            ack = wire.parse_ack(rec.value)
                        except wire.WireError:
                            continue
                        aid = getattr(ack, "activation_id", None) or (
                            ack.response if isinstance(ack.response, str) else ack.response["activationId"])
                        if aid in wanted:
                            found.add(aid)
        finally:
            consumer.close(autocommit=False)
        return found


def connect_redis(url: str) -> redis.Redis:
    """A Redis client that answered PING; failures name the server without its password."""
    where = redact_url(url)
    try:
        client = redis.Redis.from_url(url, socket_timeout=10, socket_connect_timeout=3)
        client.ping()
    except redis.AuthenticationError:
        raise ServiceError(f"Redis at {where} refused the password") from None
    except (redis.RedisError, ValueError, OSError) as exc:
        text = str(exc)
        if "@" in text or ":" in url and url.split("@")[0] in text:
            text = type(exc).__name__
        if "password" in text.lower() or "auth" in text.lower():
            raise ServiceError(f"Redis at {where} needs a password (put it in the URL)") from None
        raise ServiceError(f"cannot reach Redis at {where}: {text}") from None
    return client


def serve(settings: Settings, ready: Callable[[SchedulerService], None] | None = None) -> None:
    svc = SchedulerService(settings)
    try:
        svc.start()
        if ready is not None:
            ready(svc)
        svc.run()
    finally:
        svc.close()

