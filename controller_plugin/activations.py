"""The activation reader: OpenWhisk's ``invoker{N}`` topics in, the ledger first, then the main loop.

It runs in its own thread and owns the Kafka consumer (group ``esg-scheduler``, partitions assigned,
not subscribed). Per poll: malformed messages go to the dead-letter topic; health test actions are
handed on as they are; every other activation is inserted into the Redis ledger in one round trip (a
known id is a redelivery and is dropped) and only then is the poll's offset committed (asynchronously:
a lost commit only redelivers what the ledger already has). Each new activation gets its plan
(:class:`~controller_plugin.plans.PlanCache`) here, off the main loop, and goes to the main loop's inbox
as :class:`Accepted`. The main loop widens the set of topics read (:meth:`ActivationReader.want`) as
agents join as new virtual invokers.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass

import redis
from kafka import TopicPartition
from kafka.errors import KafkaError

from controller_plugin import wire
from controller_plugin.bus import Bus, Topics
from controller_plugin.deadletters import DeadLetters
from controller_plugin.ledger import Ledger, LedgerEntry
from controller_plugin.metadata import ActivationError, AppPlan
from controller_plugin.plans import PlanCache

log = logging.getLogger("esg.scheduler")

POLL_MS = 50


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class Accepted:
    """An activation in the ledger, with its plan or the reason it cannot run."""

    msg: wire.ActivationMessage
    entry: LedgerEntry
    plan: AppPlan | None = None
    error: ActivationError | None = None


@dataclass
class HealthTest:
    """A controller's health test action, sent to the virtual invoker ``topic``."""

    msg: wire.ActivationMessage
    topic: int


class ActivationReader:
    def __init__(self, bus: Bus, topics: Topics, ledger: Ledger, plans: PlanCache, dead_letters: DeadLetters,
                 inbox: queue.Queue, group_id: str, invokers: int) -> None:
        self.bus = bus
        self.topics = topics
        self.ledger = ledger
        self.plans = plans
        self.dead_letters = dead_letters
        self.inbox = inbox
        self.group_id = group_id
        self._wanted = invokers

    def want(self, invokers: int) -> None:
        """Read ``invoker{0..invokers-1}`` from now on (never fewer than before)."""
        self._wanted = max(self._wanted, invokers)

    @property
    def wanted(self) -> int:
        return self._wanted

    def accepted(self, msg: wire.ActivationMessage, entry: LedgerEntry) -> Accepted:
        """``msg`` with its plan, or with the error that answers it."""
        plan = self.plans.plan(msg)
        if isinstance(plan, ActivationError):
            return Accepted(msg, entry, error=plan)
        return Accepted(msg, entry, plan=plan)

    # -- the thread ---------------------------------------------------------------------------------
    def run(self, stop: threading.Event) -> None:
        consumer = self.bus.consumer(self.group_id)
        assigned: list[TopicPartition] = []
        try:
            while not stop.is_set():
                want = self._wanted
                if len(assigned) != want:
                    positions = {tp: consumer.position(tp) for tp in assigned}
                    self.bus.ensure_topics((self.topics.invoker(n), "invoker") for n in range(want))
                    assigned = [TopicPartition(self.topics.invoker(n), 0) for n in range(want)]
                    consumer.assign(assigned)
                    for tp, pos in positions.items():
                        consumer.seek(tp, pos)
                if not assigned:
                    stop.wait(0.05)
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
                    stop.wait(0.5)
                    continue
                consumer.commit_async()
                # In the ledger now: the main loop may start on them while the commit is under way.
                for item in handed:
                    self.inbox.put(self.accepted(item.msg, item.entry) if isinstance(item, Accepted) else item)
        finally:
            consumer.close(autocommit=False)

    def _take(self, records) -> list[Accepted | HealthTest]:
        """Parse, dead-letter the malformed, ledger the new; what the main loop should see, in order."""
        t = now_ms()
        out: list[Accepted | HealthTest] = []
        fresh: list[tuple[wire.ActivationMessage, int, str]] = []
        dead = False
        for rec in records:
            n = self.topics.invoker_index(rec.topic)
            try:
                msg = wire.parse_activation(rec.value)
            except wire.WireError as exc:
                self.dead_letters.put(rec.value, f"not an ActivationMessage: {exc}", rec.topic, rec.offset)
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
            self.dead_letters.flush()
        return out
