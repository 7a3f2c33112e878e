"""Connecting the agent to Kafka: reachability check, topics, an assigned consumer and a producer."""

from __future__ import annotations

import socket
import time

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.errors import KafkaError, TopicAlreadyExistsError


class KafkaUnavailable(RuntimeError):
    """No broker answered at the given address."""


def check_reachable(bootstrap: str, timeout_s: float = 3.0) -> None:
    """Raise :class:`KafkaUnavailable` unless some ``host:port`` of ``bootstrap`` accepts a connection."""
    errors = []
    for hostport in bootstrap.split(","):
        host, _, port = hostport.strip().rpartition(":")
        try:
            with socket.create_connection((host or "localhost", int(port)), timeout=timeout_s):
                return
        except (OSError, ValueError) as e:
            errors.append(f"{hostport.strip()}: {getattr(e, 'strerror', None) or e}")
    raise KafkaUnavailable(f"cannot reach Kafka at {bootstrap} ({'; '.join(errors)})")


def ensure_topics(bootstrap: str, topics: list[str], timeout_s: float = 10.0) -> None:
    """Create the topics that do not exist yet (one partition each); existing ones are left alone."""
    try:
        admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="esg-agent-admin",
                                 request_timeout_ms=int(timeout_s * 1000),
                                 bootstrap_timeout_ms=int(timeout_s * 1000))
    except KafkaError as e:
        raise KafkaUnavailable(f"cannot reach Kafka at {bootstrap}: {e}") from None
    try:
        existing = set(admin.list_topics())
        missing = [t for t in topics if t not in existing]
        for t in missing:
            try:
                admin.create_topics([NewTopic(t, num_partitions=1, replication_factor=1)])
            except TopicAlreadyExistsError:
                pass
    except KafkaError as e:
        raise KafkaUnavailable(f"Kafka at {bootstrap} failed to list or create topics: {e}") from None
    finally:
        admin.close()


def open_consumer(bootstrap: str, topic: str, group_id: str,
                  timeout_s: float = 10.0) -> tuple[KafkaConsumer, list[TopicPartition]]:
    """A consumer of ``group_id`` (manual commits, resuming at the group's committed offsets) and the
    partitions of ``topic`` it is to ``assign()`` (no group join: Tansu joins are slow)."""
    # A short fetch wait: the broker may hold an empty fetch for the whole wait even when a dispatch
    # arrives meanwhile, and every millisecond here is dispatch latency.
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group_id, enable_auto_commit=False,
                             auto_offset_reset="earliest", client_id=group_id, fetch_max_wait_ms=20)
    deadline = time.monotonic() + timeout_s
    parts = consumer.partitions_for_topic(topic)
    while not parts and time.monotonic() < deadline:
        time.sleep(0.1)
        parts = consumer.partitions_for_topic(topic)
    if not parts:
        consumer.close()
        raise KafkaUnavailable(f"topic {topic} has no partitions on Kafka at {bootstrap}")
    return consumer, [TopicPartition(topic, p) for p in sorted(parts)]


def open_producer(bootstrap: str) -> KafkaProducer:
    # acks=1 (a leader's ack is enough: results are deduplicated by batch id), so no idempotence: said
    # explicitly, or kafka-python warns at every start that it turns idempotence off
    return KafkaProducer(bootstrap_servers=bootstrap, acks=1, retries=5, linger_ms=0,
                         client_id="esg-agent", enable_idempotence=False)
