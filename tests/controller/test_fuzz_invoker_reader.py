"""Fuzzed wire, black box: the scheduler's ``invoker{N}`` reader against the real broker and Redis.

Each example publishes mutated copies of a real ActivationMessage (tests/fuzz.py) on ``invoker0``, then a
good activation behind them. Every bad message must end in a dead-letter record holding its original
bytes (when it is not an ActivationMessage) or in an answer (when it still is one: unknown fields, another
action, ...), the good message behind them must be answered with its result, and the service must keep
running: no crash, no hang, nothing lost.
"""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from controller_plugin import wire
from tests.controller.test_service_basic import put
from tests.fuzz import FUZZ, mutated

# The service's and the Kafka clients' threads use the random module while an example draws its
# mutations, which hypothesis notices (and warns about) although the draws do not depend on it.
pytestmark = [pytest.mark.integration,
              pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisDeprecationWarning")]
EXAMPLES = 150


class DeadLetters:
    def __init__(self, kafka: str, topic: str) -> None:
        self.consumer = KafkaConsumer(bootstrap_servers=kafka, group_id=None, enable_auto_commit=False,
                                      auto_offset_reset="earliest", fetch_max_wait_ms=20)
        tp = TopicPartition(topic, 0)
        self.consumer.assign([tp])
        self.consumer.seek_to_beginning(tp)
        self.seen: list = []

    def wait_for(self, raw: bytes, timeout: float = 15.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            hit = next((r for r in self.seen if r.value == raw), None)
            if hit is not None:
                self.seen.remove(hit)
                return hit
            for recs in self.consumer.poll(timeout_ms=100).values():
                self.seen.extend(recs)
        raise AssertionError(f"no dead letter for {raw[:120]!r}")

    def close(self) -> None:
        self.consumer.close()


def test_bad_messages_are_dead_lettered_or_answered_and_the_good_one_behind_them_is_answered(
        service_factory, agent_factory, driver, standin, kafka_bootstrap, prefix, redis_client):
    put(standin, "hello", None)
    svc = service_factory()
    agent_factory("node-a")
    driver.wait_healthy(1, timeout=10)
    topic = wire.invoker_topic(0, prefix)
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, acks=1, max_request_size=4 * 1024 * 1024)
    letters = DeadLetters(kafka_bootstrap, prefix + "esgdeadletter")
    counter = iter(range(10**9))

    @settings(FUZZ, max_examples=EXAMPLES)
    @given(st.data())
    def example(data):
        n = f"{next(counter):09d}"    # the same shape and length every example: hypothesis replays draws
        base = driver.message("guest/hello", {"n": n, "text": "héllo"})
        raws = data.draw(st.lists(mutated(base), min_size=1, max_size=2))
        for raw in raws:
            producer.send(topic, raw)
        producer.flush()
        good = driver.publish("guest/hello", {"n": n}, invoker=0)
        driver.flush()
        assert driver.wait(good, 30)["response"]["result"] == {"n": n}       # nothing lost behind them
        for raw in raws:
            try:
                msg = wire.parse_activation(raw)
            except wire.WireError as exc:
                letter = letters.wait_for(raw)
                reason = dict(letter.headers)["esg-reason"].decode()
                assert exc.field in reason and dict(letter.headers)["esg-topic"].decode() == topic
                continue
            assert driver.poll_record(msg.activation_id, 30, msg.user.namespace) is not None  # answered, not lost
        assert not svc.errors and all(t.is_alive() for t in svc._threads)

    try:
        example()
        assert next(counter) >= EXAMPLES       # every example ran against the service
    finally:
        producer.close()
        letters.close()
