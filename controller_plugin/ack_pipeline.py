"""The ack pipeline: every accepted activation ends in exactly one ack on ``completed{C}``.

It owns the ledger's later states (``controller_plugin/ledger.py``) and the acks on their way out:

1. :meth:`AckPipeline.answer` turns an :class:`Answer` into the WhiskActivation record and the ack's
   bytes (Combined for a blocking call, Completion otherwise: ``controller_plugin/acks.py``);
2. :meth:`AckPipeline.send` stores them in the ledger as ``acking`` (with the activation record, and
   deleting the request's intermediate data in the same round trip), then produces them;
3. :meth:`AckPipeline.confirm` marks ``done`` what the broker took and produces again what it refused.

The bytes are in Redis before they can reach Kafka, so after a crash :meth:`AckPipeline.recover`
either finds an ``acking`` ack on ``completed{C}`` or sends those same bytes: never two acks, never
none. It returns the ``open`` entries, which the service runs again.

Health test actions are answered here too (:meth:`AckPipeline.health`), outside the ledger: the
controller recognises their acks by the transid alone.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from kafka import TopicPartition

from controller_plugin import acks, wire
from controller_plugin.bus import Bus, Topics
from controller_plugin.ledger import Ledger, LedgerEntry
from controller_plugin.metadata import ActionMeta
from controller_plugin.metrics import Metrics
from controller_plugin.requests_state import Outcome

log = logging.getLogger("esg.scheduler")


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True)
class Answer:
    """How one accepted activation ends: what its ack says, and the data keys its request leaves."""

    msg: wire.ActivationMessage
    entry: LedgerEntry
    action: ActionMeta | None
    outcome: Outcome
    data_keys: tuple[str, ...] = ()


@dataclass
class _Pending:
    entry: LedgerEntry
    data: bytes
    record: dict[str, Any] | None
    topic: str
    kind: str
    data_keys: tuple[str, ...] = field(default=())


class AckPipeline:
    def __init__(self, bus: Bus, ledger: Ledger, topics: Topics, metrics: Metrics) -> None:
        self.bus = bus
        self.ledger = ledger
        self.topics = topics
        self.metrics = metrics
        self.count = 0
        self._pending: list[_Pending] = []
        self._unconfirmed: list[tuple[Any, _Pending]] = []
        self._ack_topics: set[str] = {topics.completed}

    def answer(self, a: Answer, instance: wire.InvokerInstance) -> None:
        record = acks.activation_record(a.msg, a.action, a.outcome)
        data = acks.ack_bytes(a.msg, record, instance)
        topic = wire.completed_topic(a.msg.root_controller, self.topics.prefix)
        kind = "combined" if a.msg.blocking else "completion"
        self._pending.append(_Pending(a.entry, data, record, topic, kind, a.data_keys))

    def health(self, msg: wire.ActivationMessage, instance: wire.InvokerInstance) -> None:
        """Answer a health test action: identical transid, ``isSystemError: false``."""
        topic = wire.completed_topic(msg.root_controller, self.topics.prefix)
        self._ensure_topics({topic})
        self.bus.send(topic, acks.health_ack(msg, instance))

    def busy(self) -> bool:
        return bool(self._pending or self._unconfirmed)

    def send(self) -> None:
        """Ledger ``acking`` (with the bytes), then produce."""
        batch, self._pending = self._pending, []
        if not batch:
            return
        self._ensure_topics({p.topic for p in batch})
        self.ledger.mark_acking(((p.entry, p.data, p.record) for p in batch),
                                forget=[k for p in batch for k in p.data_keys])
        for p in batch:
            self._unconfirmed.append((self.bus.send(p.topic, p.data), p))
        t = now_ms()
        for p in batch:
            self.metrics.ack_latency.observe(max(0, t - p.entry.accepted_ms) / 1000)
            self.metrics.acks.labels(p.kind).inc()
        self.count += len(batch)

    def confirm(self, wait: bool = False) -> None:
        """Mark ``done`` the acks the broker took; send again those it refused."""
        if not self._unconfirmed:
            return
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

    def _ensure_topics(self, topics: set[str]) -> None:
        new = topics - self._ack_topics
        if new:
            self.bus.ensure_topics((t, "completed") for t in new)
            self._ack_topics |= new

    # -- after a crash --------------------------------------------------------------------------------
    def recover(self) -> list[LedgerEntry]:
        """Finish the acks an earlier incarnation stored; return the entries it left unanswered."""
        left = self.ledger.unfinished()
        if not left:
            return []
        acking = {e.activation_id: e for e in left if e.state == "acking"}
        sent = self._acked_ids(set(acking)) if acking else set()
        resend = [e for a, e in acking.items() if a not in sent]
        for e in resend:
            topic = wire.completed_topic(wire.parse_activation(e.raw).root_controller, self.topics.prefix)
            self._ensure_topics({topic})
            self.bus.send(topic, e.ack.encode())
        self.bus.flush()
        self.ledger.mark_done(acking)
        reopened = []
        for e in left:
            if e.state != "open":
                continue
            try:
                wire.parse_activation(e.raw)
            except wire.WireError:
                self.ledger.mark_done([e.activation_id])
                continue
            reopened.append(e)
        log.info("recovery: %d activations to run again, %d acks already sent, %d acks resent",
                 len(reopened), len(acking) - len(resend), len(resend))
        return reopened

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
