"""The activation reader on librdkafka, against the real broker and Redis: the group's committed offset of
``invoker{N}`` never runs ahead of the ledger (a reader stopped while the ledger refuses commits nothing,
so the next one reads those activations again), it covers what the ledger took, and the next reader of
the group starts right after it: nothing read twice, nothing skipped."""

from __future__ import annotations

import queue
import threading
import time

import pytest
import redis
from confluent_kafka import Consumer, TopicPartition

from controller_plugin import wire
from controller_plugin.activations import Accepted, ActivationReader, Polled
from controller_plugin.bus import Bus, Topics
from controller_plugin.deadletters import DeadLetters
from controller_plugin.lease import Lease
from controller_plugin.ledger import Ledger
from controller_plugin.metrics import Metrics

pytestmark = pytest.mark.integration

GROUP = "esg-scheduler"


class PlainReader(ActivationReader):
    """The reader without plans: what it hands on is under test here, not the plans."""

    def accepted(self, msg, entry) -> Accepted:
        return Accepted(msg, entry)


def leased(redis_client, prefix: str) -> Lease:
    """The lease a leader holds: the ledger's writes are fenced by it."""
    lease = Lease(redis_client, prefix + "0", "reader-test")
    assert lease.try_acquire()
    return lease


class RefusingLedger:
    """A ledger whose Redis fails every insert."""

    def __init__(self) -> None:
        self.asked = threading.Event()

    def accept(self, entries, owner=""):
        self.asked.set()
        raise redis.ConnectionError("refused")


def committed(kafka: str, topic: str) -> int:
    c = Consumer({"bootstrap.servers": kafka, "group.id": GROUP, "enable.auto.commit": False})
    try:
        return c.committed([TopicPartition(topic, 0)], timeout=10)[0].offset
    finally:
        c.close()


class Running:
    """A reader in its own thread, as the service runs it; stopped (and its consumer closed) on leaving."""

    def __init__(self, bus: Bus, prefix: str, ledger) -> None:
        topics = Topics(prefix, "0")
        self.inbox: queue.Queue = queue.Queue()
        self.reader = PlainReader(bus, topics, ledger, None, DeadLetters(bus, topics.dead_letter, Metrics()),
                                  self.inbox, GROUP, 1, "incarnation-1")
        self.reader.open()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.reader.run, args=(self.stop,), daemon=True)

    def __enter__(self) -> Running:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(10)
        assert not self.thread.is_alive()

    def ledgered(self, count: int, timeout: float = 15.0) -> tuple[list[str], list[str]]:
        """The ids handed on as accepted (only once the ledger took them as new), once ``count`` are; twice."""
        accepted: list[str] = []
        deadline = time.monotonic() + timeout
        while len(accepted) < count and time.monotonic() < deadline:
            try:
                item = self.inbox.get(timeout=0.1)
            except queue.Empty:
                continue
            if isinstance(item, Polled):
                accepted += [a.msg.activation_id for a in item.items if isinstance(a, Accepted)]
        return accepted, list(accepted)


def test_offsets_are_committed_only_for_what_the_ledger_took_and_the_next_reader_starts_after_them(
        kafka_bootstrap, redis_client, driver, prefix):
    topic = wire.invoker_topic(0, prefix)
    bus = Bus(kafka_bootstrap)
    bus.ensure_topics([(topic, "invoker")])     # as the service does at start
    try:
        first = [driver.publish("guest/hello", {"i": i}, invoker=0) for i in range(3)]
        driver.flush()

        refusing = RefusingLedger()
        with Running(bus, prefix, refusing) as r:
            assert refusing.asked.wait(15)
            time.sleep(0.7)          # past a commit time: nothing may be committed all the same
        assert committed(kafka_bootstrap, topic) < 0

        ledger = Ledger(redis_client, prefix + "0", prefix, fence=leased(redis_client, prefix))
        with Running(bus, prefix, ledger) as r:
            accepted, new = r.ledgered(3)
            assert accepted == first and sorted(new) == sorted(first)
        assert committed(kafka_bootstrap, topic) == 3

        second = [driver.publish("guest/hello", {"i": i}, invoker=0) for i in range(3, 5)]
        driver.flush()
        with Running(bus, prefix, ledger) as r:
            accepted, new = r.ledgered(2)
            time.sleep(0.3)          # anything else it would hand on
            while not r.inbox.empty():
                item = r.inbox.get()
                if isinstance(item, Polled):
                    accepted += [a.msg.activation_id for a in item.items if isinstance(a, Accepted)]
            assert accepted == second and sorted(new) == sorted(second)
        assert committed(kafka_bootstrap, topic) == 5
    finally:
        bus.close()


def test_a_reader_that_widens_to_a_new_invoker_topic_keeps_its_place_on_the_first(kafka_bootstrap, redis_client,
                                                                                   driver, prefix):
    """Agents join as new virtual invokers while it reads: the new topic is added, the first one is not
    read again from its committed offset (what was fetched and handed on is not handed on twice)."""
    bus = Bus(kafka_bootstrap)
    bus.ensure_topics([(wire.invoker_topic(0, prefix), "invoker")])
    ledger = Ledger(redis_client, prefix + "0", prefix, fence=leased(redis_client, prefix))
    try:
        with Running(bus, prefix, ledger) as r:
            a = [driver.publish("guest/hello", {"i": i}, invoker=0) for i in range(3)]
            driver.flush()
            accepted, _ = r.ledgered(3)
            assert accepted == a
            bus.ensure_topics([(wire.invoker_topic(1, prefix), "invoker")])
            r.reader.want(2)
            b = [driver.publish("guest/hello", {"i": i}, invoker=n) for i, n in ((3, 1), (4, 0), (5, 1))]
            driver.flush()
            accepted, new = r.ledgered(3)
            assert sorted(accepted) == sorted(b) and sorted(new) == sorted(b)
    finally:
        bus.close()
