"""The ack pipeline: every accepted activation ends in exactly one ack on ``completed{C}``.

It owns the ledger's later states (``controller_plugin/ledger.py``) and the acks on their way out:

1. :meth:`AckPipeline.answer` turns an :class:`Answer` into the WhiskActivation record and the ack's
   bytes (Combined for a blocking call, Completion otherwise: ``controller_plugin/acks.py``). An
   activation the ledger has not yet confirmed as new (:meth:`awaiting`) is held until it has
   (:meth:`ledgered`): a redelivered one is never answered twice;
2. :meth:`AckPipeline.produce` produces the acks; :meth:`AckPipeline.stage` then adds to the loop's
   Redis pipeline, in the same turn, their ``acking`` entries (with the bytes and the activation
   record), the deletion of the answered requests' intermediate data, and the ``done`` marks;
3. :meth:`AckPipeline.confirm` collects the ``done`` marks of what the broker took (written with the
   next batch, or within :data:`DONE_EVERY_S`) and produces again what it refused.

After a crash :meth:`AckPipeline.recover` looks up every ``open`` or ``acking`` entry on
``completed{C}``: an ack found there went out (whatever the entry says), an ``acking`` one not found is
sent from its stored bytes; never two acks, never none. Every ``acking`` entry's record is stored
again. It returns the ``open`` entries without an ack, which the service runs again.

Health test actions are answered here too (:meth:`AckPipeline.health`), outside the ledger: the
controller recognises their acks by the transid alone.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from kafka import TopicPartition

from controller_plugin import acks, wire
from controller_plugin.activation_store import StoreError
from controller_plugin.bus import Bus, Topics
from controller_plugin.ledger import Ledger, LedgerEntry
from controller_plugin.metadata import ActionMeta
from controller_plugin.metrics import Metrics
from controller_plugin.record_writer import RecordWriter
from controller_plugin.requests_state import Outcome

log = logging.getLogger("esg.scheduler")

DONE_EVERY_S = 0.5


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
    record_json: bytes
    """``record`` as JSON, encoded once for the ack and the ledger."""
    topic: str
    kind: str
    data_keys: tuple[str, ...] = field(default=())


class AckPipeline:
    def __init__(self, bus: Bus, ledger: Ledger, topics: Topics, metrics: Metrics,
                 records: RecordWriter | None = None) -> None:
        self.bus = bus
        self.records = records
        self._unstored: set[str] = set()
        self._sent: set[str] = set()
        self.ledger = ledger
        self.topics = topics
        self.metrics = metrics
        self.count = 0
        self._awaiting: set[str] = set()
        self._held: dict[str, _Pending] = {}
        self._pending: list[_Pending] = []
        self._produced: list[_Pending] = []
        self._unconfirmed: list[tuple[Any, _Pending]] = []
        self._done: list[str] = []
        self._done_s = time.monotonic()
        self._staged = (0, 0)
        self._ack_topics: set[str] = {topics.completed}

    def awaiting(self, activation_id: str) -> None:
        """``activation_id`` is not known to be new yet: hold its ack until :meth:`ledgered` says so."""
        self._awaiting.add(activation_id)

    def holds(self, activation_id: str) -> bool:
        """Whether an answer of ``activation_id`` would be held (the ledger's verdict not in yet)."""
        return activation_id in self._awaiting

    def ledgered(self, new: Iterable[str], known: Iterable[str]) -> list[str]:
        """The ledger's verdict: release the held acks of the new ones, drop those of the known ones;
        the known ids that were awaiting it (their runs are redeliveries, to drop too)."""
        for a in new:
            self._awaiting.discard(a)
            held = self._held.pop(a, None)
            if held is not None:
                self._pending.append(held)
        dropped = []
        for a in known:
            if a in self._awaiting:
                self._awaiting.discard(a)
                self._held.pop(a, None)
                dropped.append(a)
        return dropped

    def answer(self, a: Answer, instance: wire.InvokerInstance) -> None:
        record = acks.activation_record(a.msg, a.action, a.outcome)
        record_json = wire.encode(record)
        data = acks.ack_bytes(a.msg, record, instance, record_json)
        topic = wire.completed_topic(a.msg.root_controller, self.topics.prefix)
        kind = "combined" if a.msg.blocking else "completion"
        p = _Pending(a.entry, data, record, record_json, topic, kind, a.data_keys)
        if a.entry.activation_id in self._awaiting:
            self._held[a.entry.activation_id] = p
        else:
            self._pending.append(p)

    def health(self, msg: wire.ActivationMessage, instance: wire.InvokerInstance) -> None:
        """Answer a health test action: identical transid, ``isSystemError: false``."""
        topic = wire.completed_topic(msg.root_controller, self.topics.prefix)
        self._ensure_topics({topic})
        self.bus.send(topic, acks.health_ack(msg, instance))

    def produce(self) -> None:
        """Produce the acks answered since the last call."""
        batch, self._pending = self._pending, []
        if not batch:
            return
        self._ensure_topics({p.topic for p in batch})
        for p in batch:
            self._unconfirmed.append((self.bus.send(p.topic, p.data), p))
        self._produced += batch
        t = now_ms()
        kinds: dict[str, int] = {}
        for p in batch:
            self.metrics.ack_latency.observe(max(0, t - p.entry.accepted_ms) / 1000)
            kinds[p.kind] = kinds.get(p.kind, 0) + 1
        for kind, n in kinds.items():   # a label's look-up takes the metric's lock: once a kind a turn
            self.metrics.acks.labels(kind).inc(n)
        self.count += len(batch)

    def stage(self, pipe) -> int:
        """Add the ledger writes of the produced acks (and the due ``done`` marks) to ``pipe``; how many
        commands. :meth:`written` forgets them once the pipeline ran; staging again repeats them."""
        batch = list(self._produced)
        due = self._done and (batch or time.monotonic() - self._done_s >= DONE_EVERY_S)
        done = list(self._done) if due else []
        self._staged = (len(batch), len(done))
        if not batch and not done:
            return 0
        return self.ledger.stage_acking(pipe, ((p.entry, p.data, p.record_json) for p in batch),
                                        forget=[k for p in batch for k in p.data_keys], done=done)

    def written(self) -> None:
        n_batch, n_done = self._staged
        if self.records is not None:
            for p in self._produced[:n_batch]:
                if p.record is not None:
                    self._unstored.add(p.entry.activation_id)
                    self.records.put(p.record)
        del self._produced[:n_batch]
        if n_done:
            del self._done[:n_done]
            self._done_s = time.monotonic()
        self._staged = (0, 0)

    def confirm(self, wait: bool = False) -> None:
        """Collect ``done`` marks for the acks the broker took; send again those it refused. ``wait``:
        flush the producer first."""
        if wait:
            self.bus.flush()
        else:
            self.bus.poll()
        keep = []
        for fut, p in self._unconfirmed:
            if not fut.is_done:
                keep.append((fut, p))
            elif fut.succeeded():
                self._acked(p.entry.activation_id)
            else:
                log.warning("ack of %s not taken by Kafka (%s); sending it again", p.entry.activation_id,
                            type(fut.exception).__name__)
                keep.append((self.bus.send(p.topic, p.data), p))
        self._unconfirmed = keep

    def _acked(self, activation_id: str) -> None:
        if activation_id in self._unstored:
            self._sent.add(activation_id)   # done once its record is stored too
        else:
            self._done.append(activation_id)

    def stored(self, ids: Iterable[str]) -> None:
        """The activation store took these records: their entries are done once their acks are."""
        for a in ids:
            self._unstored.discard(a)
            if a in self._sent:
                self._sent.discard(a)
                self._done.append(a)

    def finish(self) -> None:
        """On the way out: produce what is answered, write it and every ``done`` mark to the ledger."""
        self.produce()
        self.confirm(wait=True)
        self._done_s = 0.0
        pipe = self.ledger.r.pipeline(transaction=False)
        if self.stage(pipe):
            pipe.execute()
        self.written()
        if self.records is not None and self.records.backlog():
            self.stored(self.records.write_now())
            pipe = self.ledger.r.pipeline(transaction=False)
            if self.stage(pipe):
                pipe.execute()
            self.written()

    def _ensure_topics(self, topics: set[str]) -> None:
        new = topics - self._ack_topics
        if new:
            self.bus.ensure_topics((t, "completed") for t in new)
            self._ack_topics |= new

    # -- after a crash --------------------------------------------------------------------------------
    def recover(self) -> list[LedgerEntry]:
        """Finish the acks an earlier incarnation produced or stored; return the entries to run again."""
        left = self.ledger.unfinished()
        if not left:
            return []
        sent = self._acked_ids({e.activation_id for e in left})
        resend = [e for e in left if e.state == "acking" and e.activation_id not in sent]
        for e in resend:
            topic = self.topics.completed
            if e.raw is not None:
                topic = wire.completed_topic(wire.parse_activation(e.raw).root_controller, self.topics.prefix)
            self._ensure_topics({topic})
            self.bus.send(topic, e.ack.encode())
        self.bus.flush()
        reopened, finished = [], [e.activation_id for e in left if e.state == "acking" or e.activation_id in sent]
        for e in left:
            if e.state != "open" or e.activation_id in sent:
                continue
            try:
                wire.parse_activation(e.raw or "")
            except wire.WireError:
                finished.append(e.activation_id)
                continue
            reopened.append(e)
        finished = self._store_again([e for e in left if e.state == "acking"], finished)
        self.ledger.mark_done(finished)
        log.info("recovery: %d activations to run again, %d acks already sent, %d acks resent",
                 len(reopened), len(sent), len(resend))
        return reopened

    def _store_again(self, acking: list[LedgerEntry], finished: list[str]) -> list[str]:
        """Store the records of ``acking`` entries (once more, perhaps); ``finished`` without the ids whose
        record could not be stored (their entries stay for the next start)."""
        if self.records is None:
            return finished
        records = []
        for e in acking:
            if not e.record:
                continue
            try:
                records.append(json.loads(e.record))
            except ValueError:
                log.warning("recovery: the stored record of %s is not JSON; not stored", e.activation_id)
        if not records:
            return finished
        try:
            for aid, reason in self.records.store.put_many(records):
                log.error("the activation store refused the record of %s: %s", aid, reason)
        except StoreError as exc:
            log.error("recovery: %s; the records of %d activations are stored at the next start", exc, len(records))
            keep = {r["activationId"] for r in records}
            return [a for a in finished if a not in keep]
        return finished

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
