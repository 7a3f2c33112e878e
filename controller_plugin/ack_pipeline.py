"""The ack pipeline: every accepted activation ends in exactly one ack on ``completed{C}``.

It owns the ledger's later states (``controller_plugin/ledger.py``) and the acks on their way out:

1. :meth:`AckPipeline.answer` turns an :class:`Answer` into the WhiskActivation record and the ack's
   bytes (Combined for a blocking call, Completion otherwise: ``controller_plugin/acks.py``);
2. :meth:`AckPipeline.stage` adds to the loop's Redis pipeline their ``acking`` entries (with the bytes
   and the activation record, and the deletion of the answered requests' intermediate data: one fenced
   script, so only the leader's pass) and the ``done`` marks; once that pipeline ran,
   :meth:`AckPipeline.produce` produces the acks it wrote -- never one the ledger refused. The ack goes
   to Kafka only after the leader's token was checked in Redis, in the same turn (``controller_plugin/lease.py``);
3. :meth:`AckPipeline.confirm` collects the ``done`` marks of what the broker took (written with the
   next batch, or within :data:`DONE_EVERY_S`) and produces again what it refused.

After a crash, or when a standby takes over, the ``acking`` entries are resolved by
:meth:`AckPipeline.resolve` (a little later: an ack a stalled former leader still held times out in its
producer first): each is looked up on ``completed{C}`` (from where it stood when the activation was
accepted): an ack found there went out, one not found is sent from its stored bytes; never two acks,
never none. Every ``acking`` entry's record is stored again. ``open`` entries never had an ack: the
service resumes them (:mod:`controller_plugin.takeover`).

Health test actions are answered here too (:meth:`AckPipeline.health`), outside the ledger: the
controller recognises their acks by the transid alone.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable
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
                 records: RecordWriter | None = None, on_done: Callable[[list[str]], None] | None = None) -> None:
        self.bus = bus
        self.on_done = on_done
        """Told the ids whose ``done`` marks were written (they are finished for good)."""
        self.may_send: Callable[[], bool] = lambda: True
        """Whether an ack refused by the broker may be produced again (this scheduler still leads)."""
        self.completed_at = -1
        """The offset after the last ack the broker took on ``completed{C}`` (-1: none seen yet)."""
        self.records = records
        self._unstored: set[str] = set()
        self._sent: set[str] = set()
        self.ledger = ledger
        self.topics = topics
        self.metrics = metrics
        self.count = 0
        self._pending: list[_Pending] = []
        """Answered, their ``acking`` entries not yet written."""
        self._ready: list[_Pending] = []
        """Written to the ledger: to produce."""
        self._unconfirmed: list[tuple[Any, _Pending]] = []
        self._done: list[str] = []
        self._done_s = time.monotonic()
        self._staged = (0, 0)
        self._ack_topics: set[str] = {topics.completed}

    def answer(self, a: Answer, instance: wire.InvokerInstance) -> None:
        record = acks.activation_record(a.msg, a.action, a.outcome)
        record_json = wire.encode(record)
        data = acks.ack_bytes(a.msg, record, instance, record_json)
        topic = wire.completed_topic(a.msg.root_controller, self.topics.prefix)
        kind = "combined" if a.msg.blocking else "completion"
        self._pending.append(_Pending(a.entry, data, record, record_json, topic, kind, a.data_keys))

    def health(self, msg: wire.ActivationMessage, instance: wire.InvokerInstance) -> None:
        """Answer a health test action: identical transid, ``isSystemError: false``."""
        topic = wire.completed_topic(msg.root_controller, self.topics.prefix)
        self._ensure_topics({topic})
        self.bus.send(topic, acks.health_ack(msg, instance))

    def produce(self) -> None:
        """Produce the acks whose ``acking`` entries were written since the last call."""
        batch, self._ready = self._ready, []
        if not batch:
            return
        self._ensure_topics({p.topic for p in batch})
        for p in batch:
            self._unconfirmed.append((self.bus.send(p.topic, p.data), p))
        t = now_ms()
        kinds: dict[str, int] = {}
        for p in batch:
            self.metrics.ack_latency.observe(max(0, t - p.entry.accepted_ms) / 1000)
            kinds[p.kind] = kinds.get(p.kind, 0) + 1
        for kind, n in kinds.items():   # a label's look-up takes the metric's lock: once a kind a turn
            self.metrics.acks.labels(kind).inc(n)
        self.count += len(batch)

    def stage(self, pipe) -> int:
        """Add the ledger writes of the answered acks (and the due ``done`` marks) to ``pipe``; how many
        commands. :meth:`written` passes them on to :meth:`produce` once the pipeline ran; staging again
        repeats them."""
        batch = list(self._pending)
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
            for p in self._pending[:n_batch]:
                if p.record is not None:
                    self._unstored.add(p.entry.activation_id)
                    self.records.put(p.record)
        self._ready += self._pending[:n_batch]
        del self._pending[:n_batch]
        if n_done:
            finished = self._done[:n_done]
            del self._done[:n_done]
            self._done_s = time.monotonic()
            if self.on_done is not None:
                self.on_done(finished)
        self._staged = (0, 0)

    def drop_unwritten(self) -> int:
        """Forget the answers whose ``acking`` entries were not written (this scheduler lost the lease: the
        next leader answers them); how many."""
        n = len(self._pending)
        self._pending, self._staged = [], (0, 0)
        return n

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
                if p.topic == self.topics.completed and fut.offset >= self.completed_at:
                    self.completed_at = fut.offset + 1
                self._acked(p.entry.activation_id)
            elif self.may_send():
                log.warning("ack of %s not taken by Kafka (%s); sending it again", p.entry.activation_id,
                            type(fut.exception).__name__)
                keep.append((self.bus.send(p.topic, p.data), p))
            else:   # the lease is gone: the next leader finds its entry 'acking' and resolves it
                log.warning("ack of %s not taken by Kafka (%s); left to the next leader", p.entry.activation_id,
                            type(fut.exception).__name__)
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
        """On the way out: write what is answered to the ledger, produce it, then write every ``done``
        mark."""
        self._write_now()
        self.produce()
        self.confirm(wait=True)
        self._done_s = 0.0
        self._write_now()
        if self.records is not None and self.records.backlog():
            self.stored(self.records.write_now())
            self._write_now()

    def _write_now(self) -> None:
        pipe = self.ledger.r.pipeline(transaction=False)
        if self.stage(pipe):
            pipe.execute()
        self.written()

    def _ensure_topics(self, topics: set[str]) -> None:
        new = topics - self._ack_topics
        if new:
            self.bus.ensure_topics((t, "completed") for t in new)
            self._ack_topics |= new

    # -- after a crash, or a change of leader ---------------------------------------------------------
    def resolve(self, acking: list[LedgerEntry]) -> int:
        """Finish ``acking`` entries an earlier leader wrote: look each ack up on ``completed{C}``, send the
        stored bytes of those not there, store every record again, mark them done; how many were sent.
        The caller checked the lease just before (the resent acks go to Kafka at once)."""
        if not acking:
            return 0
        starts = [e.completed_from for e in acking]
        sent = self._acked_ids({e.activation_id for e in acking}, min(starts) if min(starts) >= 0 else 0)
        resend = [e for e in acking if e.activation_id not in sent]
        for e in resend:
            topic = self.topics.completed
            if e.raw:
                try:
                    topic = wire.completed_topic(wire.parse_activation(e.raw).root_controller, self.topics.prefix)
                except wire.WireError:
                    pass
            self._ensure_topics({topic})
            self.bus.send(topic, (e.ack or "").encode())
        self.bus.flush()
        finished = self._store_again(acking, [e.activation_id for e in acking])
        self.ledger.mark_done(finished)
        if self.on_done is not None:
            self.on_done(finished)
        log.info("recovery: %d acks of an earlier leader already sent, %d resent", len(sent), len(resend))
        return len(resend)

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

    def _acked_ids(self, wanted: set[str], start: int = 0) -> set[str]:
        """The ids among ``wanted`` that already have an ack on ``completed{C}`` (read from ``start``)."""
        return acked_ids(self.bus, self.topics.completed, wanted, start)


def acked_ids(bus: Bus, topic: str, wanted: set[str], start: int = 0) -> set[str]:
    """The ids among ``wanted`` that have an ack on ``topic`` (a ``completed{C}``), read from ``start``."""
    consumer = bus.consumer(None)
    tp = TopicPartition(topic, 0)
    found: set[str] = set()
    try:
        consumer.assign([tp])
        if start > 0:
            consumer.seek(tp, start)
        else:
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
