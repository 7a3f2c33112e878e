"""Ledger checkpoints beside the Kafka offsets: how a scheduler notices that Redis lost its ledger.

The ledger lives in Redis (``controller_plugin/ledger.py``) and an activation's ``invoker{N}`` offset is
committed only once the ledger has it. If Redis then loses data -- a restart without persistence, a
wipe, a host crash within the last second of ``appendfsync everysec`` -- the committed offsets say
"taken" for activations nobody remembers: they would never be answered. So before each commit the
activation reader writes a **checkpoint** to the Kafka topic ``{prefix}esgledger{C}``
(:func:`checkpoint_topic`), next to the offsets it is about to commit:

* the ledger's ``generation`` (a random id kept in Redis, made with the ledger) and ``seq`` (how many
  activations the ledger has accepted, counted in Redis by the same script that accepts them);
* per ``invoker{N}`` topic, ``high`` (the offsets being committed) and ``low`` (the offset of the oldest
  activation still unanswered, :class:`OpenRange`), and ``completed_from`` (where ``completed{C}`` stood
  when that oldest one was accepted);
* the leader ``epoch`` (so epochs keep rising even after Redis lost its counter).

A scheduler taking the lead reads the latest checkpoint (:meth:`Checkpoints.latest`) and compares it
with Redis (:func:`loss`): another generation, or none, or fewer accepted activations than the
checkpoint counted, means Redis lost ledger entries. It says so loudly, and every activation in
``[low, high)`` of each topic that the ledger does not hold and whose ack is not on ``completed{C}`` is
answered with a whisk error saying it may have run (:mod:`controller_plugin.takeover`) -- never run
again, never forgotten -- and reading resumes at ``high``.

What a checkpoint cannot cover: activations the ledger accepted after the last checkpoint (at most
:data:`controller_plugin.activations.COMMIT_EVERY_S` of them) are read again after a total loss and,
being unknown, run; one of them that had been dispatched before the loss runs twice. Redis with
``appendfsync always`` (or a replica) is the deployment's way to lose nothing (docs/deployment.md).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass, field

from confluent_kafka import KafkaException, Producer
from kafka import TopicPartition

log = logging.getLogger("esg.scheduler")

#: How many of the topic's last records are read to find the latest checkpoint (stale leaders may have
#: written a few after the newest one).
TAIL = 64


def checkpoint_topic(prefix: str, controller_id: str) -> str:
    return f"{prefix}esgledger{controller_id}"


@dataclass(frozen=True)
class Checkpoint:
    generation: str
    epoch: int
    seq: int
    t_ms: int
    partitions: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Per ``invoker{N}`` topic: (low, high)."""
    completed_from: int = -1

    def encode(self) -> bytes:
        return json.dumps({"generation": self.generation, "epoch": self.epoch, "seq": self.seq, "t_ms": self.t_ms,
                           "partitions": {t: {"low": lo, "high": hi} for t, (lo, hi) in self.partitions.items()},
                           "completed_from": self.completed_from}, separators=(",", ":")).encode()

    @staticmethod
    def decode(raw: bytes | None) -> Checkpoint | None:
        """The checkpoint in ``raw``; None for anything else (never raises)."""
        try:
            d = json.loads(raw or b"")
            parts = {str(t): (int(p["low"]), int(p["high"])) for t, p in d["partitions"].items()}
            return Checkpoint(str(d["generation"]), int(d["epoch"]), int(d["seq"]), int(d["t_ms"]), parts,
                              int(d.get("completed_from", -1)))
        except (ValueError, KeyError, TypeError, AttributeError):
            return None


def loss(generation: str | None, seq: int, ckpt: Checkpoint | None) -> str | None:
    """Why Redis's ledger is not the one the checkpoint saw (None: it is, or there is no checkpoint)."""
    if ckpt is None:
        return None
    if generation is None:
        return (f"Redis holds no ledger, but the last checkpoint in Kafka names ledger {ckpt.generation} with "
                f"{ckpt.seq} activations accepted: Redis lost its data")
    if generation != ckpt.generation:
        return (f"Redis holds ledger {generation}, but the last checkpoint in Kafka names ledger {ckpt.generation}: "
                "Redis lost its data and a new ledger was started since")
    if seq < ckpt.seq:
        return (f"Redis's ledger counts {seq} activations accepted, the last checkpoint in Kafka {ckpt.seq}: "
                "Redis lost its latest writes (a restart from an older append-only file or snapshot?)")
    return None


class OpenRange:
    """Activations accepted and not yet answered for good, with their offsets (thread-safe: the main
    loop adds and removes, the activation reader reads the low-water marks for its checkpoints)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[str, tuple[str, int, int]] = {}

    def add(self, activation_id: str, topic: str, offset: int, completed_from: int) -> None:
        if offset < 0:
            return
        with self._lock:
            self._open[activation_id] = (topic, offset, completed_from)

    def remove(self, activation_ids) -> None:
        with self._lock:
            for a in activation_ids:
                self._open.pop(a, None)

    def lows(self) -> tuple[dict[str, int], int]:
        """The oldest open offset of each topic, and the least ``completed{C}`` offset among them (-1: none)."""
        with self._lock:
            items = list(self._open.values())
        lows: dict[str, int] = {}
        ck = -1
        for topic, off, c in items:
            if topic not in lows or off < lows[topic]:
                lows[topic] = off
            if c >= 0 and (ck < 0 or c < ck):
                ck = c
        return lows, ck

    def __len__(self) -> int:
        return len(self._open)


class Checkpoints:
    """Writes checkpoints (its own small producer: the reader thread waits for each delivery before it
    commits) and reads the latest."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.bootstrap = bootstrap
        self._producer: Producer | None = None

    def write(self, ckpt: Checkpoint, timeout_s: float = 5.0) -> bool:
        """Produce ``ckpt`` and wait until the broker took it; False when it did not in time."""
        if self._producer is None:
            self._producer = Producer({"bootstrap.servers": self.bootstrap, "client.id": "esg-scheduler-checkpoints",
                                       "acks": "all", "linger.ms": 0, "socket.nagle.disable": True,
                                       "message.timeout.ms": int(timeout_s * 1000), "log.connection.close": False},
                                      logger=log)
        outcome: list = []
        try:
            self._producer.produce(self.topic, ckpt.encode(), on_delivery=lambda err, _m: outcome.append(err))
            self._producer.flush(timeout_s)
        except (BufferError, KafkaException) as exc:
            log.warning("could not write a ledger checkpoint: %s", exc)
            return False
        return bool(outcome) and outcome[0] is None

    def latest(self, consumer_factory) -> Checkpoint | None:
        """The newest checkpoint (highest epoch, then seq) among the topic's last :data:`TAIL` records;
        None when there is none. ``consumer_factory()``: a kafka-python consumer with no group."""
        consumer = consumer_factory()
        tp = TopicPartition(self.topic, 0)
        best: Checkpoint | None = None
        try:
            consumer.assign([tp])
            end = consumer.end_offsets([tp])[tp]
            if not end:
                return None
            consumer.seek(tp, max(0, end - TAIL))
            deadline = time.monotonic() + 30
            while consumer.position(tp) < end and time.monotonic() < deadline:
                for recs in consumer.poll(timeout_ms=200).values():
                    for rec in recs:
                        c = Checkpoint.decode(rec.value)
                        if c is not None and (best is None or (c.epoch, c.seq) > (best.epoch, best.seq)):
                            best = c
        finally:
            consumer.close(autocommit=False)
        return best

    def close(self) -> None:
        if self._producer is not None:
            try:
                self._producer.flush(2)
            except Exception:  # closing on the way out: nothing more to do
                pass
            self._producer = None
