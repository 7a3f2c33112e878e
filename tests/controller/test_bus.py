"""The scheduler's producer (librdkafka): what the ack pipeline reads of each message it produced -- taken
by the broker, or not, once the delivery reports are polled -- and the bytes as they were sent."""

from __future__ import annotations

import time
import uuid

import pytest
from kafka import KafkaConsumer, TopicPartition

from controller_plugin.bus import Bus
from esg_cli.servers import start_broker

pytestmark = pytest.mark.integration


def test_a_message_the_broker_took_is_reported_taken_once_polled(kafka_bootstrap):
    bus = Bus(kafka_bootstrap)
    topic = f"bus{uuid.uuid4().hex[:8]}"
    try:
        bus.ensure_topics([(topic, "completed")])
        sent = [bus.send(topic, f"ack-{i}".encode(), headers=[("h", b"v")] if i == 0 else None) for i in range(3)]
        deadline = time.monotonic() + 10
        while not all(d.is_done for d in sent) and time.monotonic() < deadline:
            bus.poll()          # the ack pipeline's confirm: no flush, only the reports that came in
            time.sleep(0.01)
        assert all(d.is_done and d.succeeded() and d.exception is None for d in sent)
    finally:
        bus.close()
    consumer = KafkaConsumer(bootstrap_servers=kafka_bootstrap, enable_auto_commit=False)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    got = []
    deadline = time.monotonic() + 10
    while len(got) < 3 and time.monotonic() < deadline:
        for recs in consumer.poll(timeout_ms=200).values():
            got += recs
    consumer.close()
    assert [r.value for r in got] == [b"ack-0", b"ack-1", b"ack-2"]
    assert [(k, bytes(v)) for k, v in got[0].headers] == [("h", b"v")]


def test_a_message_no_broker_took_is_reported_failed():
    """The ack pipeline sends an ack again when its delivery failed: the failure must be reported."""
    topic = f"bus{uuid.uuid4().hex[:8]}"
    with start_broker() as broker:
        bus = Bus(broker.address, delivery_timeout_ms=1000)
        bus.ensure_topics([(topic, "completed")])
    try:
        d = bus.send(topic, b"ack")
        bus.flush(10)
        assert d.is_done and not d.succeeded() and d.exception is not None
    finally:
        bus.close()


def test_invoker_topics_take_the_brokers_default_replication(kafka_bootstrap):
    """Created with replication factor -1 (the broker's ``default.replication.factor``), which the real
    broker accepts; not a fixed 1 that would leave a replicated Kafka's invoker topics unreplicated."""
    bus = Bus(kafka_bootstrap)
    topic = f"invoker{uuid.uuid4().int % 10_000}x"
    asked = []
    create = bus.admin.create_topics

    def recording(new_topics, **kw):
        asked.extend(new_topics)
        return create(new_topics, **kw)

    bus.admin.create_topics = recording
    try:
        bus.ensure_topics([(topic, "invoker")])
        assert [(t.name, t.num_partitions, t.replication_factor) for t in asked] == [(topic, 1, -1)]
        assert topic in set(bus.admin.list_topics())
    finally:
        bus.close()
