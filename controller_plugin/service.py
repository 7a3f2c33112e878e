"""The ESG scheduler service: OpenWhisk's Kafka topics on one side, the agents' Redis channel on the other.

It wires four parts, each owning its own state, and runs the main loop:

* :class:`~controller_plugin.activations.ActivationReader` (its own thread) -- the Kafka consumer of
  ``invoker{N}``: ledger first, then commit, then each activation's plan, to the inbox;
* :class:`~controller_plugin.workflows.Workflows` -- the core scheduler and each activation's progress
  through its app (no I/O);
* :class:`~controller_plugin.dispatcher.Dispatcher` -- the agents (heartbeats, virtual invoker ids),
  the Redis channel to them and the batches in flight; its reader thread delivers results and
  heartbeats to the inbox;
* :class:`~controller_plugin.ack_pipeline.AckPipeline` -- the ledger's ``acking``/``done`` states, the
  acks on ``completed{C}`` and recovery after a crash; its
  :class:`~controller_plugin.record_writer.RecordWriter` (its own thread) writes every activation record
  to OpenWhisk's activation store.

**The main loop** (the caller's thread, :meth:`SchedulerService.run`) waits on the inbox and wakes at
once for each item (a poll's activations come as one, a read's results and heartbeats as one:
:mod:`controller_plugin.inbox`): accepted activations and results go into ``Workflows``; a step turns them into
dispatches and answers. The dispatches go out first (one Redis round trip: the agents run them while
the loop goes on); then the turn's acks are encoded and produced, and one more pipeline carries the
ledger writes of its acks and the decision log's entries (each round trip retried while Redis fails). Once
a second, and whenever an agent joins, it pings ``health`` as each live agent's virtual invoker; it
answers a controller's health test action for invoker N while the agent behind N is alive (one pending
test per invoker and controller: several controllers test the same invoker); it expires silent agents
(their batches run again or fail) and fails what would reach the controller's deadline unanswered.

Batch ids carry this incarnation's id, so results for batches of an earlier process are ignored; what
that process left unanswered is found in the ledger at start and finished exactly once.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable

import redis
from kafka.errors import KafkaError

from agent_channel import protocol
from agent_channel.connect import ChannelError, connect, redact_url
from agent_channel.keys import Keys
from controller_plugin import wire
from controller_plugin.ack_pipeline import AckPipeline, Answer
from controller_plugin.activation_store import ActivationStore, StoreError
from controller_plugin.activations import Accepted, ActivationReader, HealthTest, Ledgered
from controller_plugin.bus import Bus, BusError, Topics
from controller_plugin.channel import SchedulerChannel
from controller_plugin.deadletters import DeadLetters
from controller_plugin.decisions import DecisionLog, decisions_key, status_key
from controller_plugin.dispatcher import Dispatcher
from controller_plugin.health import AgentRegistry
from controller_plugin.inbox import Inbox
from controller_plugin.ledger import Ledger
from controller_plugin.metadata import MetadataClient, ProfileStore
from controller_plugin.metrics import Metrics
from controller_plugin.online import OnlineStore
from controller_plugin.plans import PlanCache
from controller_plugin.record_writer import RecordWriter, Stored
from controller_plugin.settings import Settings
from controller_plugin.workflows import PrewarmSend, Send, Workflows
from esg.events import Dispatch
from esg.explore import Explorer
from esg.online import Observation
from esg.policies import make_policy
from esg.policies.base import PolicyContext
from esg.scheduler import Scheduler

log = logging.getLogger("esg.scheduler")

#: The most messages folded into one turn of the main loop (a poll's or a read's count as theirs).
MAX_ITEMS_PER_TURN = 5000


class ServiceError(Exception):
    """A dependency is missing or unreachable at start-up; the message names it."""


def now_ms() -> int:
    return int(time.time() * 1000)


class _Stop:
    """Put in the inbox to end the main loop."""


class SchedulerService:
    def __init__(self, settings: Settings) -> None:
        self.s = settings
        try:
            self.redis = connect(settings.redis_url)
        except ChannelError as exc:
            raise ServiceError(str(exc)) from None
        try:
            self.bus = Bus(settings.kafka)
        except BusError as exc:
            raise ServiceError(str(exc)) from None
        self.topics = Topics(settings.topic_prefix, settings.controller_id)
        keys = Keys(settings.topic_prefix, settings.controller_id)
        self.metrics = Metrics()
        self.inbox = Inbox()
        self.stop_event = threading.Event()
        self.errors: list[str] = []
        self.ledger = Ledger(self.redis, keys.scope, settings.topic_prefix)
        self.dead_letters = DeadLetters(self.bus, self.topics.dead_letter, self.metrics)
        self.registry = AgentRegistry(self.ledger.invoker_id, self.ledger.invoker_ids(), settings.agent_timeout_s)
        self.online = OnlineStore(self.redis, settings.topic_prefix) if settings.online_profiles else None
        self.plans = PlanCache(MetadataClient(settings.openwhisk_api, settings.openwhisk_auth),
                               ProfileStore(settings.profiles_dir, self.online, settings.shared_profiles))
        self._observed: list[tuple[Observation, float | None]] = []
        self.reader = ActivationReader(
            self.bus, self.topics, self.ledger, self.plans,
            self.dead_letters, self.inbox, settings.group_id, self.registry.invoker_count(), settings.incarnation,
            settings.parameter_keys)
        self.dispatcher = Dispatcher(SchedulerChannel(self.redis, keys), self.registry, settings.incarnation,
                                     self.metrics)
        policy = make_policy(settings.policy, PolicyContext(apps={}, profiles={},
                                                            stage_overhead_ms=settings.stage_overhead_ms))
        explorer = Explorer(settings.explore_fraction) if settings.online_profiles else None
        # pre-warm ids carry the incarnation too: an agent skips an id it has taken before. No holds: the
        # dispatcher hands the step the same snapshot every turn now, which would let the core skip a
        # waiting queue while nothing it depends on changed; live, that lowered the twin cluster's hit
        # rate (tests/e2e/test_live_vs_emulated.py: 39-48 % in four runs with holds, 52-53 % in three
        # without), so the live step places every waiting head at every turn, as it did when the
        # snapshot was rebuilt each turn
        core = Scheduler({}, policy, batch_ids=(f"{settings.incarnation}-{i}" for i in itertools.count()),
                         keep_holds=False, explorer=explorer, admission_control=settings.admission_control,
                         prewarm=settings.prewarm,
                         prewarm_ids=(f"{settings.incarnation}-w{i}" for i in itertools.count()))
        self.workflows = Workflows(core, keys.results, self.metrics, settings.deadline_margin_s, settings.deadline)
        self.records = None
        if settings.activation_store:
            store = ActivationStore(settings.activation_store)
            try:
                store.ensure()
            except StoreError as exc:
                self.bus.close()
                self.redis.close()
                raise ServiceError(str(exc)) from None
            self.records = RecordWriter(store, self.inbox.put)
        else:
            log.warning("no activation store (--activation-store): the controller cannot read the records of "
                        "non-blocking calls or of acks too large for Kafka")
        self.acks = AckPipeline(self.bus, self.ledger, self.topics, self.metrics, self.records)
        self.decisions = DecisionLog(decisions_key(keys.scope))
        self.status_key = status_key(keys.scope)
        self.health_waiting: dict[tuple[int, str], HealthTest] = {}
        self._answers: list[Answer] = []
        """The turn's answers, encoded and produced once its dispatches went out."""
        self._results: list[tuple[Dispatch, protocol.BatchResult]] = []
        """The turn's answered batches, put in the decision log once its dispatches went out."""
        self._threads: list[threading.Thread] = []
        self._last_ping = 0.0
        self._last_watchdog = 0.0

    @property
    def stats(self) -> dict[str, int]:
        return {"acks": self.acks.count, "dispatches": self.dispatcher.count, "prewarms": self.dispatcher.prewarms,
                "dead_letters": self.dead_letters.count, "ignored_results": self.dispatcher.ignored,
                "stale_starts": self.dispatcher.stale_starts}

    # -- start and stop ---------------------------------------------------------------------------------
    def start(self) -> None:
        log.info("esg scheduler starting: %s", self.s.describe())
        base = [(self.topics.completed, "completed"), (self.topics.health, "health"),
                (self.topics.dead_letter, "deadletter")]
        base += [(self.topics.invoker(n), "invoker") for n in range(self.reader.wanted)]
        try:
            self.bus.ensure_topics(base)
        except (KafkaError, OSError) as exc:
            raise ServiceError(f"Kafka at {self.s.kafka} refused topic creation: {exc}") from None
        if self.s.metrics_port is not None:
            self.metrics.serve(self.s.metrics_port, self.s.metrics_host)
        try:
            self.dispatcher.channel.open()
            self.dispatcher.purge_earlier(sorted(self.registry.ids))
            reopened = self.acks.recover()
        except redis.RedisError as exc:
            raise ServiceError(f"Redis at {redact_url(self.s.redis_url)} failed during start-up: "
                               f"{type(exc).__name__}") from None
        for e in reopened:
            self.inbox.put(self.reader.accepted(wire.parse_activation(e.raw), e, known_new=True))
        try:
            self.reader.open()
        except BusError as exc:
            raise ServiceError(str(exc)) from None
        self._spawn(lambda: self.reader.run(self.stop_event), "esg-activations")
        self._spawn(lambda: self.dispatcher.read_loop(self.stop_event, self.inbox.put, self.dead_letters),
                    "esg-agents")
        if self.records is not None:
            writer = self.records
            self._spawn(lambda: writer.run(self.stop_event), "esg-records")

    def _spawn(self, fn: Callable[[], None], name: str) -> None:
        def run() -> None:
            try:
                fn()
            except Exception as exc:  # a reader died: stop the service rather than hang silently
                log.exception("%s failed", name)
                self.errors.append(f"{name}: {exc}")
                self.inbox.put(_Stop())
        t = threading.Thread(target=run, name=name, daemon=True)
        t.start()
        self._threads.append(t)

    def stop(self) -> None:
        self.stop_event.set()
        self.inbox.put(_Stop())

    def close(self) -> None:
        self.stop_event.set()
        for t in self._threads:
            t.join(timeout=5)
        try:
            while True:  # records stored while the loop was ending
                item = self.inbox.get_nowait()
                if isinstance(item, Stored):
                    self.acks.stored(item.ids)
        except queue.Empty:
            pass
        try:
            self._hand_on_answers()  # a turn stopped before they reached the acks (while Redis refused)
            self.acks.finish()
        except Exception:  # best effort on the way out; the ledger finishes it at the next start
            log.warning("could not send the last acks; the next start finishes them")
        self.plans.close()
        self.bus.close()
        self.redis.close()
        if self.records is not None:
            self.records.store.close()
        self.metrics.close()

    def run(self, duration_s: float | None = None) -> None:
        """The main loop, until :meth:`stop` (or ``duration_s``)."""
        end = None if duration_s is None else time.monotonic() + duration_s
        while not self.stop_event.is_set():
            if end is not None and time.monotonic() > end:
                break
            self.tick(self._wait_s())
        if self.errors:
            raise ServiceError("; ".join(self.errors))

    def _wait_s(self, longest: float = 0.02) -> float:
        """How long the loop may wait for the inbox: until a held queue's timer (as the emulator wakes
        at it), at most ``longest``."""
        wake = self.workflows.wake_at_ms
        if wake is None:
            return longest
        return min(longest, max(0.0, (wake - time.time() * 1000) / 1000))

    # -- the loop -------------------------------------------------------------------------------------
    def tick(self, wait_s: float = 0.02) -> None:
        """One turn: take what the inbox has, step, send the step's dispatches (their own round trip,
        first), then encode and produce the turn's acks, log its answered batches and write the ledger
        and the decision log.

        The dispatches go before the acks' work so that the agents run them while this thread does the
        rest of the turn: with a node's batches in flight bounded by its vCPUs, a burst of a plain action
        otherwise ran in lockstep -- the agent idle while the scheduler answered a read's results, the
        scheduler idle while the agent ran what it sent -- and the node's window of batches was full a
        quarter of the time (``benchmarks/bench_agent_cpu.py --window``; docs/live-path.md, run N)."""
        items = self.inbox.take(wait_s, MAX_ITEMS_PER_TURN)
        mono, t = time.monotonic(), now_ms()
        for item in items:
            self._take(item, mono, t)
        for agent, lost in self.dispatcher.expire(mono):
            log.warning("agent %s lost (no heartbeat for %.1f s): %d batches in flight", agent.node,
                        self.s.agent_timeout_s, len(lost))
            for d in lost:
                self._answer(self.workflows.lost(d, agent.node, t))
            self.decisions.forget([d.batch_id for d in lost])
            self._last_ping = 0.0
        if mono - self._last_ping >= self.s.ping_interval_s:
            self._last_ping = mono
            self._ping()
        if self.health_waiting:
            self._answer_health_tests()
        if mono - self._last_watchdog >= 1.0:
            self._last_watchdog = mono
            self._answer(self.workflows.overdue(t))
            self.decisions.status(self.status_key, self.workflows.scheduler.queue_lengths(),
                                  self.workflows.last_waiting, t)
            self.metrics.set_queues(self.workflows.scheduler.queues, t)    # also once the queues are idle
            self.metrics.set_waiting(self.workflows.last_waiting)
        if self.workflows.busy(t):
            began = time.perf_counter()
            sends, prewarms, answers = self.workflows.step(t, self.dispatcher.snapshot())
            self.metrics.step_time.observe(time.perf_counter() - began)
            if self.workflows.unsent_prewarms:
                self.dispatcher.forget_view()   # their reservations are on the kept snapshot
            for o in self.workflows.last_outcomes:
                self.decisions.outcome(o)
            self._answer(answers)
            self._write(sends, t, prewarms)
        self._hand_on_answers()
        results, self._results = self._results, []
        for d, rm in results:
            agent = self.registry.agents.get(d.node)
            sent, decided = self.decisions.done(d, rm, agent.heartbeat.gpu_model if agent else None, t)
            self.metrics.batch_done(d, decided, sent, t, rm.run_ms, rm.cold)
        self.acks.produce()
        self._write_ledger()
        self.acks.confirm()
        self._learn()

    def _learn(self) -> None:
        """The turn's measured batches into the learned profiles; a table that changed is planned afresh.
        Learning is best effort: Redis failing here loses these samples, never an activation."""
        if not self._observed or self.online is None:
            return
        observed, self._observed = self._observed, []
        try:
            learned = self.online.record(observed)
        except redis.RedisError as exc:
            log.warning("could not record %d measured batches (%s)", len(observed), type(exc).__name__)
            return
        for x in learned:
            if x.drift_ms is not None:
                log.warning("profile %s drifted at %s: %.1f ms in the table, %.1f ms measured; table updated",
                            x.table, x.config.label(), x.was_ms or 0.0, x.drift_ms)
                self.metrics.profile_events.labels("drift").inc()
            else:
                log.info("profile %s: %s measured", x.table, x.config.label())
                self.metrics.profile_events.labels("measured").inc()
        if learned:
            self.plans.drop()

    def _write(self, sends: list[Send], decided_ms: int | None = None, prewarms: list[PrewarmSend] | None = None
               ) -> None:
        """The turn's dispatches and pre-warms, one round trip (a node's in one script call); retried
        (whole) while Redis fails. A repeated dispatch or pre-warm reaches its agent twice and runs once
        (agents skip an id they took)."""
        prewarms = prewarms or []
        if not sends and not prewarms:
            return
        staged = None

        def stage(pipe: redis.client.Pipeline) -> int:
            nonlocal staged
            staged = self.dispatcher.stage(pipe, sends, prewarms)
            return staged.commands

        replies = self._round_trip(stage, "the dispatches", "dispatches")
        if replies is None or staged is None:
            return
        self.dispatcher.sent(sends, staged.entry_ids(replies)[:len(sends)])
        self.dispatcher.prewarmed(prewarms, time.monotonic(), now_ms())
        self.decisions.sent([s.dispatch for s in sends], decided_ms=decided_ms)

    def _write_ledger(self) -> None:
        """The ledger writes of the turn's acks and the decision log's entries, one round trip; retried
        (whole) while Redis fails."""
        if self._round_trip(lambda pipe: self.acks.stage(pipe) + self.decisions.stage(pipe),
                            "the ledger writes", "ledger") is not None:
            self.decisions.written()
            self.acks.written()

    def _round_trip(self, stage: Callable[[redis.client.Pipeline], int], what: str, label: str) -> list | None:
        """One pipeline of what ``stage`` puts in it (the number of commands it staged), executed and
        retried whole, staged afresh, while Redis fails; None when it staged nothing. Stopping while
        Redis fails raises the last error. Each try is timed (``esg_redis_round_trip_seconds{what=label}``)."""
        while True:
            pipe = self.redis.pipeline(transaction=False)
            if stage(pipe) == 0:
                return None
            began = time.perf_counter()
            try:
                replies = pipe.execute()
                self.metrics.round_trip(label, time.perf_counter() - began)
                return replies
            except redis.RedisError as exc:
                self.metrics.round_trip(label, time.perf_counter() - began)
                log.error("Redis refused %s (%s); retrying", what, exc)
                if self.stop_event.wait(0.5):
                    raise

    def _take(self, item: object, mono: float, t: int) -> None:
        if isinstance(item, _Stop):
            self.stop_event.set()
        elif isinstance(item, Accepted):
            if not item.known_new and item.msg.activation_id not in self.workflows.runs:
                self.acks.awaiting(item.msg.activation_id)
            answer = self.workflows.accept(item, t)
            if answer is not None:
                self._answer([answer])
        elif isinstance(item, Ledgered):
            for aid in self.acks.ledgered(item.new, item.known):
                log.info("activation %s was delivered again; already answered", aid)
                self.workflows.drop(aid)
        elif isinstance(item, protocol.BatchResult):
            d = self.dispatcher.complete(item)
            if d is not None:
                if self.online is not None and (obs := self.workflows.observation(d, item)) is not None:
                    self._observed.append(obs)
                self._answer(self.workflows.record(d, item, t))
                self._results.append((d, item))     # into the decision log after the turn's dispatches
        elif isinstance(item, protocol.Heartbeat):
            self._heartbeat(item, mono)
        elif isinstance(item, Stored):
            self.acks.stored(item.ids)
        elif isinstance(item, HealthTest):
            self.health_waiting[(item.topic, item.msg.root_controller.as_string)] = item

    def _hand_on_answers(self) -> None:
        """The turn's answers (:meth:`_answer`) to the ack pipeline, in the order they came."""
        answered, self._answers = self._answers, []
        for a in answered:
            self.acks.answer(a, self.registry.instance(a.entry.topic))

    def _answer(self, answers: Iterable[Answer]) -> None:
        """Answer at the end of the turn, after its dispatches went out (:meth:`tick`); an answer the
        ledger's verdict may still drop (a redelivery) is held at once, so that a verdict taken later in
        the same turn finds it."""
        for a in answers:
            if self.acks.holds(a.entry.activation_id):
                self.acks.answer(a, self.registry.instance(a.entry.topic))
            else:
                self._answers.append(a)

    # -- posing as the invokers -----------------------------------------------------------------------
    def _heartbeat(self, hb: protocol.Heartbeat, mono: float) -> None:
        joined = self.dispatcher.heartbeat(hb, mono)
        if self.dispatcher.warmed:
            t = now_ms()
            self.workflows.poke()
            for w in self.dispatcher.take_warmed():
                self.decisions.prewarm(w.prewarm, w.sent_ms, t, hb.gpu_model, w.ready, w.done)
        if joined is None:
            return
        log.info("agent %s is alive as invoker%d (%d MB)", hb.node, joined.invoker_id, hb.memory_mb)
        self.bus.ensure_topics([(self.topics.invoker(joined.invoker_id), "invoker")])
        self.reader.want(joined.invoker_id + 1)
        self._last_ping = 0.0  # ping at once: the controller learns of the new invoker now

    def _ping(self) -> None:
        for ping in self.registry.pings():
            self.bus.send(self.topics.health, ping)
        self.metrics.set_nodes([a.node for a in self.registry.live()], self.registry.agents)

    def _answer_health_tests(self) -> None:
        for key, ht in list(self.health_waiting.items()):
            if self.registry.alive_as(ht.topic):
                del self.health_waiting[key]
                self.acks.health(ht.msg, self.registry.instance(ht.topic))
