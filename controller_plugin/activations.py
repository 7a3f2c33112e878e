"""The activation reader: OpenWhisk's ``invoker{N}`` topics in, the ledger first, then the main loop.

It runs in its own thread and owns the Kafka consumer (librdkafka's, :meth:`Bus.activation_consumer`;
group ``esg-scheduler``, partitions assigned, not subscribed). Per poll: malformed messages go to the
dead-letter topic; health test actions are handed on as they are; every other activation is inserted
into the Redis ledger in one round trip (a known id is a redelivery and is dropped) and only then may
the poll's offsets be committed (explicit offsets, those after the poll's last messages: never the
consumer's position, which librdkafka's prefetching runs ahead of). Commits are asynchronous and at
most every :data:`COMMIT_EVERY_S` (a commit not made only redelivers what the ledger already has, and
the ledger drops it), so a steady trickle of activations does not cost a commit each. Before each
commit a ledger checkpoint goes to Kafka (:mod:`controller_plugin.checkpoint`), so a ledger Redis loses
is noticed; and only the leader commits (:class:`~controller_plugin.lease.Lease`: a reader whose lease
is gone stops, and a ledger write it still tries is fenced). Each new
activation gets its plan (:class:`~controller_plugin.plans.PlanCache`) here, off the main loop, and goes
to the main loop's inbox as :class:`Accepted` -- the poll's together in one :class:`Polled`, and only once
the ledger said it is new: a redelivery never reaches the main loop, so it is never dispatched a second
time (at most once; the ledger's round trip is the price). The main loop widens the set of topics read
(:meth:`ActivationReader.want`) as agents join as new virtual invokers.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import redis
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from controller_plugin import wire
from controller_plugin.arguments import ParameterKeys, prepare
from controller_plugin.bus import Bus, BusError, Topics
from controller_plugin.checkpoint import Checkpoint, Checkpoints, OpenRange
from controller_plugin.deadletters import DeadLetters
from controller_plugin.lease import Lease, is_fenced
from controller_plugin.ledger import Ledger, LedgerEntry
from controller_plugin.metadata import ActivationError, AppPlan
from controller_plugin.plans import PlanCache

log = logging.getLogger("esg.scheduler")

POLL_MS = 50
COMMIT_EVERY_S = 0.5
#: The most messages taken from the consumer at once (kafka-python's ``max_poll_records`` before).
MAX_RECORDS = 500


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class Accepted:
    """An activation in the ledger, with its plan or the reason it cannot run."""

    msg: wire.ActivationMessage
    entry: LedgerEntry
    plan: AppPlan | None = None
    error: ActivationError | None = None
    args: Any = None
    """The run arguments: ``content`` with locked arguments unlocked and init arguments taken out."""
    init_env: dict[str, Any] = field(default_factory=dict)
    """The init arguments: the environment of a worker started for it."""


@dataclass
class HealthTest:
    """A controller's health test action, sent to the virtual invoker ``topic``."""

    msg: wire.ActivationMessage
    topic: int


@dataclass(frozen=True)
class Polled:
    """One poll's activations and health tests, in the order they were read: handed to the main loop
    as one inbox item (a hand-off per message cost both threads a lock and a wake-up each)."""

    items: tuple[Accepted | HealthTest, ...]


def _offsets(ledgered: dict[tuple[str, int], int]) -> list[TopicPartition]:
    return [TopicPartition(topic, partition, offset) for (topic, partition), offset in ledgered.items()]


@dataclass
class Leading:
    """What the reader of a leader needs besides the consumer: the lease (only the leader commits), the
    ledger generation and checkpoints it writes before each commit, the activations still open (their
    offsets bound the checkpoints' ranges), where ``completed{C}`` stands, and where to start reading
    (after a ledger loss: past what was checked)."""

    lease: Lease
    generation: str
    checkpoints: Checkpoints | None
    open: OpenRange
    completed_at: Callable[[], int] = lambda: -1
    start_at: dict[str, int] = field(default_factory=dict)


class ActivationReader:
    def __init__(self, bus: Bus, topics: Topics, ledger: Ledger, plans: PlanCache, dead_letters: DeadLetters,
                 inbox: queue.Queue, group_id: str, invokers: int, owner: str,
                 keys: ParameterKeys | None = None, leading: Leading | None = None) -> None:
        self.bus = bus
        self.leading = leading
        self.fenced = False
        """The ledger refused this reader's writes: another scheduler leads; the reader stopped."""
        self.keys = keys or ParameterKeys()
        self.owner = owner
        self.topics = topics
        self.ledger = ledger
        self.plans = plans
        self.dead_letters = dead_letters
        self.inbox = inbox
        self.group_id = group_id
        self._wanted = invokers
        self._consumer: Consumer | None = None
        self._last_error = ""
        self._commit_failed = False

    def want(self, invokers: int) -> None:
        """Read ``invoker{0..invokers-1}`` from now on (never fewer than before)."""
        self._wanted = max(self._wanted, invokers)

    @property
    def wanted(self) -> int:
        return self._wanted

    def accepted(self, msg: wire.ActivationMessage, entry: LedgerEntry) -> Accepted:
        """``msg`` with its plan and arguments, or with the error that answers it."""
        plan = self.plans.plan(msg)
        if isinstance(plan, ActivationError):
            return Accepted(msg, entry, error=plan)
        try:
            args, env = prepare(msg, self.keys)
        except ActivationError as exc:
            return Accepted(msg, entry, plan=plan, error=exc)
        return Accepted(msg, entry, plan=plan, args=args, init_env=env)

    def _checkpoint(self, ledgered: dict[tuple[str, int], int]) -> bool:
        """Write the ledger checkpoint for committing ``ledgered`` (True: it is in Kafka, commit now).
        Nothing is committed by a reader whose lease is gone."""
        lead = self.leading
        if lead is None:
            return True
        if not lead.lease.held():
            return False
        if lead.checkpoints is None:
            return True
        lows, ck = lead.open.lows()
        parts = {t: (min(lows.get(t, off), off), off) for (t, _), off in ledgered.items()}
        ckpt = Checkpoint(lead.generation, lead.lease.epoch, self.ledger.seq, now_ms(), parts,
                          ck if ck >= 0 else lead.completed_at())
        return lead.checkpoints.write(ckpt)

    # -- the thread ---------------------------------------------------------------------------------
    def open(self) -> None:
        """Create the consumer now, in the caller's thread (the service's start), so that a setting
        librdkafka refuses fails the start with its reason rather than a thread later."""
        if self._consumer is None:
            self._consumer = self.bus.activation_consumer(self.group_id, on_commit=self._committed)

    def _committed(self, err: KafkaError | None, partitions: list[TopicPartition]) -> None:
        """An asynchronous commit's outcome (called from the reader's own poll). One that failed is logged
        and made again at the next commit time; a commit never made only redelivers what the ledger
        already has, which drops it."""
        if err is not None and err.code() != KafkaError._NO_OFFSET:
            log.warning("committing the read offsets of %s failed: %s", ", ".join(p.topic for p in partitions),
                        err.str())
            self._commit_failed = True

    def run(self, stop: threading.Event) -> None:
        self.open()
        consumer, self._consumer = self._consumer, None
        assigned: set[str] = set()
        ledgered: dict[tuple[str, int], int] = {}   # per partition, the offset after the last one in the ledger
        uncommitted = False
        last_commit = 0.0
        try:
            while not stop.is_set():
                if self._commit_failed:
                    self._commit_failed, uncommitted = False, True
                if uncommitted and time.monotonic() - last_commit >= COMMIT_EVERY_S:
                    last_commit = time.monotonic()
                    if self._checkpoint(ledgered):
                        consumer.commit(offsets=_offsets(ledgered), asynchronous=True)
                        uncommitted = False
                want = self._wanted
                if len(assigned) != want:
                    topics = [self.topics.invoker(n) for n in range(want)]
                    self.bus.ensure_topics((t, "invoker") for t in topics)
                    # the new partitions only: those read already keep their position and what was
                    # fetched; a new one starts at the group's committed offset, else at its beginning
                    # (after a ledger loss: where the check of what the lost ledger held ended)
                    start = self.leading.start_at if self.leading is not None else {}
                    consumer.incremental_assign([TopicPartition(t, 0, start[t]) if t in start else TopicPartition(t, 0)
                                                 for t in topics if t not in assigned])
                    assigned.update(topics)
                if not assigned:
                    stop.wait(0.05)
                    continue
                records = self._poll(consumer)
                if not records:
                    continue
                fresh, polled = self._take(records)
                new = self._ledger(fresh, stop) if fresh else set()
                if new is None:
                    return  # stopping before the ledger answered: nothing of this poll is committed
                self._hand_on(polled, new)
                for rec in records:  # in the ledger now (or dead-lettered): committed at the next commit time
                    ledgered[(rec.topic(), rec.partition())] = rec.offset() + 1
                uncommitted = True
            if uncommitted and not self.fenced and self._checkpoint(ledgered):
                try:
                    consumer.commit(offsets=_offsets(ledgered), asynchronous=False)
                except KafkaException as exc:   # on the way out: the next start reads them again, the ledger drops them
                    log.warning("could not commit the read offsets at stop (%s)", exc)
        finally:
            consumer.close()

    def _poll(self, consumer: Consumer) -> list[Message]:
        """What the consumer has: waits at most :data:`POLL_MS` for the first message (``poll`` returns
        as soon as one is there), then takes what is already fetched behind it without waiting. Errors
        that the consumer reports in the stream are logged (each once until another comes); a fatal
        one stops the reader, and with it the service."""
        first = consumer.poll(POLL_MS / 1000)
        if first is None:
            return []
        got = [first, *consumer.consume(MAX_RECORDS - 1, 0)]
        records = []
        for m in got:
            err = m.error()
            if err is None:
                records.append(m)
                continue
            if err.fatal():
                raise BusError(f"reading {m.topic() or 'invoker topics'}: {err.str()}")
            if err.code() != KafkaError._PARTITION_EOF and err.str() != self._last_error:
                log.warning("reading %s: %s", m.topic() or "invoker topics", err.str())
                self._last_error = err.str()
        return records

    def _take(self, records: list[Message]) -> tuple[list[LedgerEntry], list[Accepted | HealthTest]]:
        """Parse and dead-letter the malformed: the ledger entries to insert, and what to hand on (in order)
        once the ledger took them."""
        t = now_ms()
        fresh: list[LedgerEntry] = []
        polled: list[Accepted | HealthTest] = []
        dead = False
        for rec in records:
            topic, value = rec.topic(), rec.value() or b""
            n = self.topics.invoker_index(topic)
            try:
                msg = wire.parse_activation(value)
            except wire.WireError as exc:
                self.dead_letters.put(value, f"not an ActivationMessage: {exc}", topic, rec.offset())
                dead = True
                continue
            if msg.is_health_test:
                polled.append(HealthTest(msg, n))
                continue
            completed = self.leading.completed_at() if self.leading is not None else -1
            entry = LedgerEntry(msg.activation_id, "open", n, t, value.decode("utf-8"), offset=rec.offset(),
                                completed_from=completed)
            fresh.append(entry)
            polled.append(self.accepted(msg, entry))
        if dead:
            self.dead_letters.flush()
        return fresh, polled

    def _hand_on(self, polled: list[Accepted | HealthTest], new: set[str]) -> None:
        """The poll's activations the ledger took as new, and its health tests, to the main loop in one item.
        A redelivery (an activation the ledger already had: taken before a restart or by a former leader)
        is dropped here, before it could run a second time."""
        kept = [p for p in polled if not isinstance(p, Accepted) or p.msg.activation_id in new]
        if len(kept) < len(polled):
            log.info("%d activation(s) delivered again, known to the ledger: dropped", len(polled) - len(kept))
        if kept:
            self.inbox.put(Polled(tuple(kept)))

    def _ledger(self, fresh: list[LedgerEntry], stop: threading.Event) -> set[str] | None:
        """Insert the entries (retrying while Redis fails); the ids that were new. None: stopping, or fenced
        (another scheduler leads: nothing of this poll is handed on or committed)."""
        while True:
            try:
                new = self.ledger.accept([(e.activation_id, e.topic, e.accepted_ms, e.raw or "", e.offset,
                                           e.completed_from) for e in fresh], self.owner)
                break
            except Exception as exc:
                if is_fenced(exc):
                    log.warning("the ledger refused the activations read: this scheduler no longer leads")
                    self.fenced = True
                    if self.leading is not None:
                        self.leading.lease.lose("the ledger refused a write with this scheduler's token")
                    return None
                if not isinstance(exc, redis.RedisError):
                    raise
                log.error("cannot record activations in the ledger (%s); retrying", type(exc).__name__)
                if stop.wait(0.5):
                    return None
        if self.leading is not None:
            for e, ok in zip(fresh, new):
                if ok:
                    self.leading.open.add(e.activation_id, self.topics.invoker(e.topic), e.offset, e.completed_from)
        return {e.activation_id for e, ok in zip(fresh, new) if ok}
