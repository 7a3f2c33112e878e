"""Kafka in and out, at OpenWhisk's boundary only: the producer, topic creation with OpenWhisk's settings.

The scheduler reads activations on ``invoker{N}`` (with its own group ``esg-scheduler``, never
OpenWhisk's ``invoker{N}``; assigned rather than subscribed: no group join and no rebalance; manual
commits) and writes acks to ``completed{C}``, pings to ``health`` and malformed input to its dead-letter
topic. Everything between the scheduler and its agents goes over Redis (:mod:`controller_plugin.channel`).
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterable

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
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


class Bus:
    def __init__(self, bootstrap: str, client_id: str = "esg-scheduler", timeout_ms: int = 5000) -> None:
        self.bootstrap = bootstrap
        probe(bootstrap)
        try:
            self.admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id=client_id + "-admin",
                                          request_timeout_ms=timeout_ms)
            # linger 0: an ack leaves at once; under load the sender batches what queued meanwhile.
            self.producer = KafkaProducer(bootstrap_servers=bootstrap, client_id=client_id, acks=1,
                                          linger_ms=0, max_request_size=2 * wire.MAX_MESSAGE_BYTES + 1024,
                                          request_timeout_ms=timeout_ms, max_block_ms=timeout_ms)
        except (KafkaError, OSError, ValueError) as exc:
            why = "no broker answered" if "NoBrokersAvailable" in type(exc).__name__ else str(exc)
            raise BusError(f"cannot reach Kafka at {bootstrap}: {why}") from None
        self._known: set[str] = set()

    def ensure_topics(self, topics: Iterable[tuple[str, str]]) -> None:
        """Create each ``(name, kind)`` topic that does not exist yet, 1 partition, with ``kind``'s settings."""
        wanted = [(n, k) for n, k in topics if n not in self._known]
        if not wanted:
            return
        existing = set(self.admin.list_topics())
        new = [NewTopic(n, 1, 1, topic_configs=topic_settings(k)) for n, k in wanted if n not in existing]
        if new:
            try:
                self.admin.create_topics(new, timeout_ms=5000)
            except TopicAlreadyExistsError:
                pass
            for t in new:
                log.info("created topic %s", t.name)
        self._known.update(n for n, _ in wanted)

    def send(self, topic: str, value: bytes):
        return self.producer.send(topic, value)

    def flush(self, timeout_s: float = 10.0) -> None:
        self.producer.flush(timeout=timeout_s)

    def consumer(self, group_id: str | None, **kw) -> KafkaConsumer:
        return KafkaConsumer(bootstrap_servers=self.bootstrap, group_id=group_id, enable_auto_commit=False,
                             auto_offset_reset="earliest", client_id=f"esg-scheduler-{group_id or 'reader'}",
                             request_timeout_ms=31000, fetch_max_wait_ms=FETCH_WAIT_MS, max_poll_records=500, **kw)

    def close(self) -> None:
        for c in (self.producer, self.admin):
            try:
                c.close(timeout=2) if c is self.producer else c.close()
            except Exception:  # closing on the way out: nothing more to do
                pass
