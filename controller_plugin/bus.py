"""Kafka in and out, at OpenWhisk's boundary only: the producer, topic creation with OpenWhisk's settings.

The scheduler reads activations on ``invoker{N}`` (with its own group ``esg-scheduler``, never
OpenWhisk's ``invoker{N}``; assigned rather than subscribed: no group join and no rebalance; manual
commits) and writes acks to ``completed{C}``, pings to ``health`` and malformed input to its dead-letter
topic. Everything between the scheduler and its agents goes over Redis (:mod:`controller_plugin.channel`).

**Two clients.** The activations' consumer (:meth:`Bus.activation_consumer`) and what the scheduler
produces (every ack) go through librdkafka (``confluent_kafka``), whose fetcher and sender run in C off
the interpreter's lock: a Python client's network thread costs the scheduler more CPU per ack than its
own main loop, and adds 1.6-2.6 ms to a trickle's hop from the controller to the reader
(docs/results/2026-11-28-live-path-runs.md, run J).
Topic administration and the one-off read of ``completed{C}`` at recovery
(:meth:`Bus.consumer`) stay on kafka-python. :class:`Delivery` stands for the broker's answer to one
message: the producer's delivery reports fill it in when the bus is polled (:meth:`Bus.poll`,
:meth:`Bus.flush`).
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterable

from confluent_kafka import Consumer, KafkaException, Producer
from kafka import KafkaAdminClient, KafkaConsumer
from kafka.admin import NewTopic
from kafka.errors import KafkaError, TopicAlreadyExistsError

from controller_plugin import wire

log = logging.getLogger("esg.scheduler")

DEAD_LETTER_TOPIC = "esgdeadletter"
#: How long the broker may hold a fetch with no data. Short: an activation waits on it when the broker
#: does not answer a parked fetch as soon as data arrives.
FETCH_WAIT_MS = 20
_DEAD_LETTER_CONFIG = {"retention.ms": "172800000", "max.message.bytes": str(2 * wire.MAX_MESSAGE_BYTES)}


class BusError(Exception):
    """Kafka is unreachable or refused a request."""


def probe(bootstrap: str, timeout_s: float = 3.0) -> None:
    """Fail fast, by name, when no bootstrap server accepts a connection (clients would retry for long)."""
    errors = []
    for server in bootstrap.split(","):
        host, _, port = server.strip().rpartition(":")
        try:
            with socket.create_connection((host or "localhost", int(port)), timeout=timeout_s):
                return
        except (OSError, ValueError) as exc:
            errors.append(getattr(exc, "strerror", None) or str(exc))
    raise BusError(f"cannot reach Kafka at {bootstrap}: {'; '.join(e for e in errors if e) or 'no answer'}")


class Topics:
    """The topic names of one deployment (OpenWhisk's prefix applies to all of them)."""

    def __init__(self, prefix: str, controller_id: str) -> None:
        self.prefix = prefix
        self.completed = wire.completed_topic(controller_id, prefix)
        self.health = wire.health_topic(prefix)
        self.dead_letter = prefix + DEAD_LETTER_TOPIC

    def invoker(self, n: int) -> str:
        return wire.invoker_topic(n, self.prefix)

    def invoker_index(self, topic: str) -> int:
        return int(topic[len(self.prefix) + len("invoker"):])


def topic_settings(kind: str) -> dict[str, str]:
    if kind in wire.TOPIC_CONFIGS:
        return wire.topic_config(kind)
    return dict(_DEAD_LETTER_CONFIG)


#: How long a produce may wait for room in the producer's queue before it fails.
QUEUE_WAIT_S = 5.0


class Delivery:
    """The broker's answer to one produced message, once the producer's delivery report came in:
    ``is_done``, then ``exception`` (None: the broker took it)."""

    __slots__ = ("is_done", "exception", "offset")

    def __init__(self) -> None:
        self.is_done = False
        self.exception: Exception | None = None
        self.offset = -1
        """Where the broker put it (-1: not known)."""

    def succeeded(self) -> bool:
        return self.is_done and self.exception is None

    def report(self, err, msg) -> None:
        """The producer's delivery callback (run by :meth:`Bus.poll` or :meth:`Bus.flush`)."""
        if err is not None:
            self.exception = KafkaException(err)
        elif msg is not None:
            self.offset = msg.offset()
        self.is_done = True


def producer_settings(bootstrap: str, client_id: str, timeout_ms: int, delivery_timeout_ms: int = 120_000) -> dict:
    """librdkafka's settings for the scheduler's producer: an ack leaves at once (``linger.ms`` 0, no
    Nagle delay); under load the sender batches what queued meanwhile. A message the broker has not
    taken within ``delivery_timeout_ms`` (two minutes, kafka-python's delivery timeout) is reported
    failed, and sent again by its caller."""
    return {"bootstrap.servers": bootstrap, "client.id": client_id, "acks": 1, "linger.ms": 0,
            "socket.nagle.disable": True, "message.max.bytes": 2 * wire.MAX_MESSAGE_BYTES + 1024,
            "request.timeout.ms": timeout_ms, "message.timeout.ms": delivery_timeout_ms,
            "log.connection.close": False}


def activation_consumer_settings(bootstrap: str, group_id: str, timeout_ms: int = 5000) -> dict:
    """librdkafka's settings for the activations' consumer: the group only holds committed offsets (the
    partitions are assigned, never subscribed: no join, no rebalance); nothing is committed or stored
    for the caller (it commits explicit offsets once the ledger has the activations); a partition with
    no committed offset starts at its beginning, as kafka-python's ``auto_offset_reset="earliest"``
    did; a fetch waits at most :data:`FETCH_WAIT_MS` on the broker, as before."""
    return {"bootstrap.servers": bootstrap, "group.id": group_id, "client.id": f"esg-scheduler-{group_id}",
            "enable.auto.commit": False, "enable.auto.offset.store": False, "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": FETCH_WAIT_MS, "socket.nagle.disable": True,
            "fetch.message.max.bytes": 2 * wire.MAX_MESSAGE_BYTES + 1024,
            "socket.timeout.ms": max(timeout_ms, 10_000), "log.connection.close": False}


BROKER_DEFAULT_REPLICATION = -1
"""CreateTopics' replication factor that means the broker's ``default.replication.factor`` (KIP-464,
Kafka 2.4 and later)."""


class Bus:
    def __init__(self, bootstrap: str, client_id: str = "esg-scheduler", timeout_ms: int = 5000,
                 delivery_timeout_ms: int = 120_000) -> None:
        self.bootstrap = bootstrap
        probe(bootstrap)
        try:
            self.admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id=client_id + "-admin",
                                          request_timeout_ms=timeout_ms)
            self.producer = Producer(producer_settings(bootstrap, client_id, timeout_ms, delivery_timeout_ms),
                                     logger=log)
        except (KafkaError, KafkaException, OSError, ValueError) as exc:
            why = "no broker answered" if "NoBrokersAvailable" in type(exc).__name__ else str(exc)
            raise BusError(f"cannot reach Kafka at {bootstrap}: {why}") from None
        self._known: set[str] = set()

    def ensure_topics(self, topics: Iterable[tuple[str, str]]) -> None:
        """Create each ``(name, kind)`` topic that does not exist yet, 1 partition, with ``kind``'s settings
        and the broker's default replication factor (``default.replication.factor``; -1 asks for it), so a
        three-broker Kafka replicates the invoker topics as it replicates the others."""
        wanted = [(n, k) for n, k in topics if n not in self._known]
        if not wanted:
            return
        existing = set(self.admin.list_topics())
        new = [NewTopic(n, 1, BROKER_DEFAULT_REPLICATION, topic_configs=topic_settings(k))
               for n, k in wanted if n not in existing]
        if new:
            try:
                self.admin.create_topics(new, timeout_ms=5000)
            except TopicAlreadyExistsError:
                pass
            for t in new:
                log.info("created topic %s", t.name)
        self._known.update(n for n, _ in wanted)

    def send(self, topic: str, value: bytes, headers: list[tuple[str, bytes]] | None = None) -> Delivery:
        """Produce ``value`` on ``topic``; the :class:`Delivery` is filled in by a later :meth:`poll`.
        Waits (at most :data:`QUEUE_WAIT_S`) while the producer's queue is full; :class:`BusError` after."""
        delivery = Delivery()
        waited = 0.0
        while True:
            try:
                self.producer.produce(topic, value, headers=headers, on_delivery=delivery.report)
                return delivery
            except BufferError:
                if waited >= QUEUE_WAIT_S:
                    raise BusError(f"the producer's queue stayed full for {QUEUE_WAIT_S:.0f} s") from None
                self.producer.poll(0.1)
                waited += 0.1

    def poll(self) -> None:
        """Take the delivery reports that came in (fills in the :class:`Delivery` of each)."""
        self.producer.poll(0)

    def flush(self, timeout_s: float = 10.0) -> None:
        self.producer.flush(timeout_s)

    def activation_consumer(self, group_id: str, on_commit=None) -> Consumer:
        """A librdkafka consumer in ``group_id`` (see :func:`activation_consumer_settings`); nothing assigned.
        ``on_commit(err, partitions)`` is called for each asynchronous commit, when the consumer is polled."""
        settings = activation_consumer_settings(self.bootstrap, group_id)
        if on_commit is not None:
            settings["on_commit"] = on_commit
        try:
            return Consumer(settings, logger=log)
        except (KafkaException, ValueError) as exc:
            raise BusError(f"cannot read from Kafka at {self.bootstrap}: {exc}") from None

    def consumer(self, group_id: str | None, **kw) -> KafkaConsumer:
        """A kafka-python consumer (recovery's one-off read of ``completed{C}``)."""
        return KafkaConsumer(bootstrap_servers=self.bootstrap, group_id=group_id, enable_auto_commit=False,
                             auto_offset_reset="earliest", client_id=f"esg-scheduler-{group_id or 'reader'}",
                             request_timeout_ms=31000, fetch_max_wait_ms=FETCH_WAIT_MS, max_poll_records=500, **kw)

    def close(self) -> None:
        try:
            self.producer.flush(2)
        except Exception:  # closing on the way out: nothing more to do
            pass
        try:
            self.admin.close()
        except Exception:
            pass
