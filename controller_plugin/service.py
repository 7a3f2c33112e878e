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
  acks on ``completed{C}`` and recovery after a crash.

**The main loop** (the caller's thread, :meth:`SchedulerService.run`) waits on the inbox and wakes at
once for each item: accepted activations and results go into ``Workflows``; a step turns them into
dispatches and answers. The acks are produced at once; then one Redis pipeline per turn carries the
turn's dispatches and the ledger writes of its acks (one round trip, retried while Redis fails). Once
a second, and whenever an agent joins, it pings ``health`` as each live agent's virtual invoker; it
answers the controller's health test actions once any agent is alive; it expires silent agents
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

from agent_channel.connect import ChannelError, connect, redact_url
from agent_channel.keys import Keys
from controller_plugin import wire
from controller_plugin.ack_pipeline import AckPipeline, Answer
from controller_plugin.activations import Accepted, ActivationReader, HealthTest, Ledgered
from controller_plugin.bus import Bus, BusError, Topics
from controller_plugin.channel import SchedulerChannel
from controller_plugin.deadletters import DeadLetters
from controller_plugin.dispatcher import Dispatcher
from controller_plugin.health import AgentRegistry
from controller_plugin.ledger import Ledger
from controller_plugin.metadata import MetadataClient, ProfileStore
from controller_plugin.metrics import Metrics
from controller_plugin.plans import PlanCache
from controller_plugin.settings import Settings
from controller_plugin.workflows import Send, Workflows
from esg import protocol
from esg.policies import make_policy
from esg.policies.base import PolicyContext
from esg.scheduler import Scheduler

log = logging.getLogger("esg.scheduler")

#: The most inbox items folded into one turn of the main loop.
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
        self.inbox: queue.Queue = queue.Queue()
        self.stop_event = threading.Event()
        self.errors: list[str] = []
        self.ledger = Ledger(self.redis, keys.scope, settings.topic_prefix)
        self.dead_letters = DeadLetters(self.bus, self.topics.dead_letter, self.metrics)
        self.registry = AgentRegistry(self.ledger.invoker_id, self.ledger.invoker_ids(), settings.agent_timeout_s)
        self.reader = ActivationReader(
            self.bus, self.topics, self.ledger,
            PlanCache(MetadataClient(settings.openwhisk_api, settings.openwhisk_auth),
                      ProfileStore(settings.profiles_dir)),
            self.dead_letters, self.inbox, settings.group_id, self.registry.invoker_count(), settings.incarnation)
        self.dispatcher = Dispatcher(SchedulerChannel(self.redis, keys), self.registry, settings.incarnation,
                                     self.metrics)
        policy = make_policy(settings.policy, PolicyContext(apps={}, profiles={}))
        core = Scheduler({}, policy, batch_ids=(f"{settings.incarnation}-{i}" for i in itertools.count()))
        self.workflows = Workflows(core, keys.results, self.metrics, settings.deadline_margin_s)
        self.acks = AckPipeline(self.bus, self.ledger, self.topics, self.metrics)
        self.health_waiting: dict[int, HealthTest] = {}
        self._threads: list[threading.Thread] = []
        self._last_ping = 0.0
        self._last_watchdog = 0.0

    @property
    def stats(self) -> dict[str, int]:
        return {"acks": self.acks.count, "dispatches": self.dispatcher.count,
                "dead_letters": self.dead_letters.count, "ignored_results": self.dispatcher.ignored}

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
            self.metrics.serve(self.s.metrics_port)
        try:
            self.dispatcher.channel.open()
            self.dispatcher.purge_earlier(sorted(self.registry.ids))
            reopened = self.acks.recover()
        except redis.RedisError as exc:
            raise ServiceError(f"Redis at {redact_url(self.s.redis_url)} failed during start-up: "
                               f"{type(exc).__name__}") from None
        for e in reopened:
            self.inbox.put(self.reader.accepted(wire.parse_activation(e.raw), e, known_new=True))
        self._spawn(lambda: self.reader.run(self.stop_event), "esg-activations")
        self._spawn(lambda: self.dispatcher.read_loop(self.stop_event, self.inbox.put, self.dead_letters),
                    "esg-agents")

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
            self.acks.finish()
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
            while len(items) < MAX_ITEMS_PER_TURN:
                items.append(self.inbox.get_nowait())
        except queue.Empty:
            pass
        mono, t = time.monotonic(), now_ms()
        for item in items:
            self._take(item, mono, t)
        for agent, lost in self.dispatcher.expire(mono):
            log.warning("agent %s lost (no heartbeat for %.1f s): %d batches in flight", agent.node,
                        self.s.agent_timeout_s, len(lost))
            for d in lost:
                self._answer(self.workflows.lost(d, agent.node, t))
            self._last_ping = 0.0
        if mono - self._last_ping >= self.s.ping_interval_s:
            self._last_ping = mono
            self._ping()
        if self.health_waiting and self.registry.any_alive():
            self._answer_health_tests()
        if mono - self._last_watchdog >= 1.0:
            self._last_watchdog = mono
            self._answer(self.workflows.overdue(t))
        sends: list[Send] = []
        if self.workflows.busy():
            sends, answers = self.workflows.step(t, self.dispatcher.snapshot())
            self._answer(answers)
        self.acks.produce()
        self._write(sends)
        self.acks.confirm()

    def _write(self, sends: list[Send]) -> None:
        """The turn's dispatches and ledger writes, one round trip; retried (whole) while Redis fails.
        A repeated dispatch reaches its agent twice and runs once (agents skip a batch id they took)."""
        while True:
            pipe = self.redis.pipeline(transaction=False)
            n = self.dispatcher.stage(pipe, sends)
            if n + self.acks.stage(pipe) == 0:
                return
            try:
                replies = pipe.execute()
                break
            except redis.RedisError as exc:
                log.error("Redis refused the dispatches and ledger writes (%s); retrying", exc)
                if self.stop_event.wait(0.5):
                    raise
        self.dispatcher.sent(sends, replies[:n])
        self.acks.written()

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
        elif isinstance(item, protocol.ResultMessage):
            d = self.dispatcher.complete(item)
            if d is not None:
                self._answer(self.workflows.record(d, item, t))
        elif isinstance(item, protocol.Heartbeat):
            self._heartbeat(item, mono)
        elif isinstance(item, HealthTest):
            self.health_waiting[item.topic] = item

    def _answer(self, answers: Iterable[Answer]) -> None:
        for a in answers:
            self.acks.answer(a, self.registry.instance(a.entry.topic))

    # -- posing as the invokers -----------------------------------------------------------------------
    def _heartbeat(self, hb: protocol.Heartbeat, mono: float) -> None:
        joined = self.dispatcher.heartbeat(hb, mono)
        if joined is None:
            return
        log.info("agent %s is alive as invoker%d (%d MB)", hb.node, joined.invoker_id, hb.memory_mb)
        self.bus.ensure_topics([(self.topics.invoker(joined.invoker_id), "invoker")])
        self.reader.want(joined.invoker_id + 1)
        self._last_ping = 0.0  # ping at once: the controller learns of the new invoker now

    def _ping(self) -> None:
        for ping in self.registry.pings():
            self.bus.send(self.topics.health, ping)
        self.metrics.agents.set(len(self.registry.live()))

    def _answer_health_tests(self) -> None:
        waiting, self.health_waiting = self.health_waiting, {}
        for ht in waiting.values():
            self.acks.health(ht.msg, self.registry.instance(ht.topic))
