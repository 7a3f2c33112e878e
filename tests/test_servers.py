"""The real local servers, and the Tansu/kafka-python behaviour the scheduler relies on.

Each test here pins one point of ``esg_cli.servers``' docstring: if a Tansu or kafka-python upgrade
changes it, the failing test says which assumption broke.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
import uuid

import pytest
import redis
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.structs import OffsetAndMetadata

from esg_cli.servers import FAST_GROUP_SETTINGS, ServerError, start_broker, start_redis

pytestmark = pytest.mark.integration

# Generous bounds: they catch "waits for the 45 s default session timeout", not slowness.
JOIN_DEADLINE_S = 10.0


def new_topic(bootstrap: str, **configs: str) -> str:
    name = f"t-{uuid.uuid4().hex[:10]}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=1, topic_configs=configs)])
    finally:
        admin.close()
    return name


def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks=1)
    try:
        for value in values:
            producer.send(topic, value).get(timeout=10)
    finally:
        producer.close()


def group_consumer(bootstrap: str, topic: str, group: str, **settings) -> KafkaConsumer:
    return KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                         auto_offset_reset="earliest", **{**FAST_GROUP_SETTINGS, **settings})


def take(consumer: KafkaConsumer, n: int, deadline_s: float = JOIN_DEADLINE_S) -> list[bytes]:
    """Poll until ``n`` records arrived (never more: ``max_records`` caps each poll) or the deadline."""
    got: list[bytes] = []
    end = time.monotonic() + deadline_s
    while len(got) < n and time.monotonic() < end:
        for records in consumer.poll(timeout_ms=100, max_records=n - len(got)).values():
            got += [r.value for r in records]
    return got


# --- Kafka (Tansu) ---------------------------------------------------------------------------------


def test_broker_serves_metadata_and_creates_topics_with_openwhisk_settings(kafka_bootstrap):
    topic = new_topic(kafka_bootstrap, **{"retention.ms": "172800000", "max.message.bytes": "1054644"})
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    try:
        assert topic in admin.list_topics()
    finally:
        admin.close()
    consumer = KafkaConsumer(bootstrap_servers=kafka_bootstrap)
    try:
        assert consumer.partitions_for_topic(topic) == {0}
    finally:
        consumer.close()


def test_produced_messages_are_consumed_in_order(kafka_bootstrap):
    topic = new_topic(kafka_bootstrap)
    produce(kafka_bootstrap, topic, [b'{"n":0}', b'{"n":1}', b'{"n":2}'])
    consumer = KafkaConsumer(bootstrap_servers=kafka_bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False)
    consumer.assign([TopicPartition(topic, 0)])
    try:
        assert take(consumer, 3) == [b'{"n":0}', b'{"n":1}', b'{"n":2}']
    finally:
        consumer.close()


def test_group_consumer_with_fast_settings_joins_within_seconds(kafka_bootstrap):
    topic = new_topic(kafka_bootstrap)
    produce(kafka_bootstrap, topic, [b"hello"])
    start = time.monotonic()
    consumer = group_consumer(kafka_bootstrap, topic, f"g-{topic}")
    try:
        assert take(consumer, 1) == [b"hello"]
    finally:
        consumer.close()
    assert time.monotonic() - start < JOIN_DEADLINE_S


def test_committed_offset_survives_a_consumer_restart(kafka_bootstrap):
    topic = new_topic(kafka_bootstrap)
    produce(kafka_bootstrap, topic, [b"m0", b"m1", b"m2", b"m3", b"m4"])
    group = f"g-{topic}"

    first = group_consumer(kafka_bootstrap, topic, group)
    assert take(first, 2) == [b"m0", b"m1"]
    first.commit()
    assert first.committed(TopicPartition(topic, 0)) == 2
    first.close()

    # Read but not committed: a restart sees these again.
    second = group_consumer(kafka_bootstrap, topic, group)
    assert take(second, 2) == [b"m2", b"m3"]
    second.close()

    third = group_consumer(kafka_bootstrap, topic, group)
    assert take(third, 3) == [b"m2", b"m3", b"m4"]
    # An explicit offset (the next record to read) is honoured as well.
    third.commit({TopicPartition(topic, 0): OffsetAndMetadata(4, "", -1)})
    third.close()

    fourth = group_consumer(kafka_bootstrap, topic, group)
    assert take(fourth, 1) == [b"m4"]
    fourth.close()


def test_assigned_partition_commits_per_group_without_a_join(kafka_bootstrap):
    topic = new_topic(kafka_bootstrap)
    produce(kafka_bootstrap, topic, [b"a", b"b", b"c"])
    tp = TopicPartition(topic, 0)
    group = f"g-{topic}"

    def assigned() -> KafkaConsumer:
        c = KafkaConsumer(bootstrap_servers=kafka_bootstrap, group_id=group, enable_auto_commit=False,
                          auto_offset_reset="earliest")
        c.assign([tp])
        return c

    first = assigned()
    assert take(first, 2) == [b"a", b"b"]
    first.commit()
    first.close()
    second = assigned()
    assert take(second, 1) == [b"c"]
    second.close()


def test_killed_member_is_replaced_and_the_group_resumes_after_its_commit(kafka_bootstrap):
    """A ``kill -9`` leaves the group without a LeaveGroup; the next member still takes over."""
    topic = new_topic(kafka_bootstrap)
    produce(kafka_bootstrap, topic, [b"m0", b"m1", b"m2"])
    group = f"g-{topic}"
    child = textwrap.dedent(f"""
        import time
        from kafka import KafkaConsumer
        c = KafkaConsumer({topic!r}, bootstrap_servers={kafka_bootstrap!r}, group_id={group!r},
                          enable_auto_commit=False, auto_offset_reset="earliest", **{FAST_GROUP_SETTINGS!r})
        got = 0
        while got < 2:
            got += sum(len(r) for r in c.poll(timeout_ms=100, max_records=2 - got).values())
        c.commit()
        print("committed", flush=True)
        time.sleep(60)
    """)
    proc = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "committed"
    finally:
        proc.kill()
        proc.wait(10)
    successor = group_consumer(kafka_bootstrap, topic, group)
    try:
        assert take(successor, 1, deadline_s=2 * JOIN_DEADLINE_S) == [b"m2"]
    finally:
        successor.close()


def test_missing_broker_binary_is_reported_by_name(monkeypatch):
    monkeypatch.setenv("CALF_TANSU_BIN", "/nonexistent/tansu")
    with pytest.raises(ServerError, match="Tansu broker binary not found"):
        start_broker()


# --- Redis -----------------------------------------------------------------------------------------


def test_redis_ping_set_get(redis_url):
    client = redis.Redis.from_url(redis_url)
    try:
        assert client.ping()
        client.set("esg:test", "value")
        assert client.get("esg:test") == b"value"
    finally:
        client.close()


def test_redis_with_password_rejects_anonymous_clients(redis_auth):
    url, password = redis_auth
    assert f":{password}@" in url
    client = redis.Redis.from_url(url)
    try:
        assert client.ping()
        client.set("esg:secret", "1")
        assert client.get("esg:secret") == b"1"
    finally:
        client.close()
    anonymous = redis.Redis.from_url(url.replace(f":{password}@", ""))
    try:
        with pytest.raises(redis.AuthenticationError):
            anonymous.get("esg:secret")
    finally:
        anonymous.close()


def test_a_taken_port_is_refused_not_mistaken_for_our_server(redis_url, kafka_bootstrap):
    redis_port = int(redis_url.rsplit(":", 1)[1].split("/")[0])
    with pytest.raises(ServerError, match=f"port 127.0.0.1:{redis_port} is not free"):
        start_redis(port=redis_port)
    broker_port = int(kafka_bootstrap.rsplit(":", 1)[1])
    with pytest.raises(ServerError, match=f"port 127.0.0.1:{broker_port} is not free"):
        start_broker(port=broker_port)


def test_stop_ends_the_process_and_frees_the_port():
    server = start_redis()
    with server:
        assert server.running()
    assert not server.running()
    assert not server.workdir.exists()
    with start_redis(port=server.port) as again:  # the port is free again
        assert again.running()
    server.stop()  # idempotent


def test_a_broker_stops_by_itself_while_a_client_is_still_connected():
    """Stopping ``esg up``'s or a test's broker ends it cleanly (status 0) even while a client still holds
    a connection: on SIGTERM tansu waits about 5 s for its connections, the whole grace period, and was
    then killed."""
    with start_broker() as broker:
        topic = new_topic(broker.address)
        produce(broker.address, topic, [b"hello"])
        consumer = group_consumer(broker.address, topic, f"g-{topic}")
        try:
            assert take(consumer, 1) == [b"hello"]
            broker.stop()
        finally:
            consumer.close()
    assert broker.process.returncode == 0, broker.log_tail()


def test_missing_redis_binary_is_reported_by_name(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ServerError, match="redis-server not found"):
        start_redis()


def test_a_server_that_exits_at_once_is_reported_not_waited_for(monkeypatch):
    monkeypatch.setenv("CALF_TANSU_BIN", "/bin/false")
    start = time.monotonic()
    with pytest.raises(ServerError, match="tansu broker exited with status 1"):
        start_broker()
    assert time.monotonic() - start < 10


def test_a_sentinel_url_reaches_the_master_it_monitors():
    """``redis+sentinel://HOST:PORT/MASTER/DB``: the client asks the Sentinel for the master (as the
    scheduler and the agents do with such a URL); a URL that names no master is refused by name."""
    import argparse

    from agent_channel.connect import connect
    from esg_cli.checks import redis_url
    from esg_cli.servers import start_redis, start_sentinel

    with start_redis() as master, start_sentinel(master) as sentinel:
        assert redis_url(sentinel.url) == sentinel.url
        client = connect(sentinel.url)
        try:
            client.set("esg:sentinel-test", "through the sentinel")
            assert redis.Redis.from_url(master.url).get("esg:sentinel-test") == b"through the sentinel"
        finally:
            client.delete("esg:sentinel-test")
            client.close()
    with pytest.raises(argparse.ArgumentTypeError, match="names its master"):
        redis_url("redis+sentinel://127.0.0.1:26379")
