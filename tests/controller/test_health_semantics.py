"""Invoker health as OpenWhisk's controller judges it (``InvokerSupervision.scala``, ``CommonLoadBalancer``).

The controller driver keeps each invoker's ring buffer (10 results, tolerance 3): these tests pin its
transitions, and show that apps which always fail or always time out are the apps' errors, never the
invokers': every virtual invoker stays Healthy. Health test actions are answered for a node only while
its agent lives, once per testing controller.
"""

from __future__ import annotations

import time

import pytest

from controller_plugin import wire
from controller_plugin.bus import Bus
from esg_cli.controller_driver import BUFFER_SIZE, SUCCESS, SYSTEM_ERROR, TIMEOUT, ControllerDriver, Invoker
from tests.controller.test_service_basic import put


@pytest.fixture
def bare_driver(kafka_bootstrap, prefix):
    d = ControllerDriver(kafka_bootstrap, prefix=prefix, retest_s=3600)
    yield d
    d.close()


def _feed(d: ControllerDriver, status: str, results: list[str]) -> list[str]:
    """One invoker starting in ``status`` fed ``results``; its state after each."""
    now = time.monotonic()
    with d._lock:
        d.invokers[7] = Invoker(7, status=status, last_ping_s=now + 3600, test_sent_s=now)
    seen = []
    for r in results:
        with d._lock:
            d._finished(7, r, now)
            seen.append(d.invokers[7].status)
    return seen


def test_ring_buffer_transitions_are_openwhisks(bare_driver):
    d = bare_driver
    # a fresh buffer: the first system error already makes it Unhealthy (<= tolerance entries)
    assert _feed(d, "healthy", [SYSTEM_ERROR]) == ["unhealthy"]
    # after a run of successes, it takes more than 3 system errors among the last 10
    assert _feed(d, "healthy", [SUCCESS] * 10 + [SYSTEM_ERROR] * 4)[-5:] == ["healthy"] * 4 + ["unhealthy"]
    assert _feed(d, "healthy", [SUCCESS] * 10 + [TIMEOUT] * 4)[-2:] == ["healthy", "unresponsive"]
    # Unhealthy: a success makes it Healthy again only once fewer than 4 of the last 10 are errors
    seen = _feed(d, "healthy", [SUCCESS] * 6 + [SYSTEM_ERROR] * 4 + [SUCCESS] * 7)
    assert seen[9:] == ["unhealthy"] * 7 + ["healthy"]
    assert list(d.invokers[7].buffer) == [SYSTEM_ERROR] * 3 + [SUCCESS] * 7
    assert len(d.invokers[7].buffer) == BUFFER_SIZE
    # Offline stays Offline whatever completes; only a ping brings it back
    assert _feed(d, "offline", [SUCCESS, SYSTEM_ERROR]) == ["offline", "offline"]


def test_entering_unhealthy_sends_the_health_test_action(bare_driver, kafka_bootstrap, prefix):
    from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
    from kafka.admin import NewTopic

    tp = TopicPartition(wire.invoker_topic(7, prefix), 0)
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    admin.create_topics([NewTopic(tp.topic, 1, 1)])
    admin.close()
    consumer = KafkaConsumer(bootstrap_servers=kafka_bootstrap, group_id=None, enable_auto_commit=False)
    try:
        consumer.assign([tp])
        consumer.seek_to_end(tp)
        consumer.position(tp)
        _feed(bare_driver, "healthy", [SYSTEM_ERROR])
        msgs = []
        deadline = time.monotonic() + 5
        while not msgs and time.monotonic() < deadline:
            msgs = [wire.parse_activation(r.value) for recs in consumer.poll(timeout_ms=200).values() for r in recs]
    finally:
        consumer.close()
    assert len(msgs) == 1 and msgs[0].is_health_test and msgs[0].transid == bare_driver.health_transid


def test_forced_completion_counts_as_a_timeout(service_factory, agent_factory, driver, standin):
    put(standin, "silent", None, limits={"timeout": 100})
    service_factory()
    a = agent_factory("node-a")
    driver.wait_healthy(1, timeout=10)
    a.answering = False
    driver.std_time_limit_s, driver.timeout_addon_s = 0.05, 0.1   # forced after 0.2 s instead of 3 min
    aid = driver.invoke("guest/silent", {}, blocking=False)
    deadline = time.monotonic() + 5
    while not driver.acks[aid].forced and time.monotonic() < deadline:
        time.sleep(0.05)
    assert driver.acks[aid].forced and TIMEOUT in driver.buffers()[0]   # (then a test action brings it back)


def test_apps_that_always_fail_or_time_out_leave_every_invoker_healthy(service_factory, agent_factory, driver,
                                                                       standin):
    def raises(v):
        raise RuntimeError("boom")

    def too_slow(v):
        raise TimeoutError

    put(standin, "fails", None)
    put(standin, "errs", None)
    put(standin, "slow", None, limits={"timeout": 500})
    service_factory()
    handlers = {"guest/fails": raises, "guest/errs": lambda v: {"error": "no"}, "guest/slow": too_slow}
    agent_factory("node-a", handlers=handlers)
    agent_factory("node-b", handlers=handlers)
    driver.wait_healthy(2, timeout=10)
    ids = [driver.publish(f"guest/{name}", {"i": i}, blocking=False)
           for i in range(12) for name in ("fails", "errs", "slow")]
    driver.flush()
    assert driver.wait_acked(ids, timeout=30) == []
    statuses = {driver.poll_record(a, 10)["response"]["statusCode"] for a in ids}
    assert statuses == {1, 2}                                             # application and developer errors
    assert not any(driver.acks[a].is_system_error for a in ids)
    assert driver.states() == {0: "healthy", 1: "healthy"}
    assert sum(len(b) for b in driver.buffers().values()) >= 2 * BUFFER_SIZE   # every completion was counted
    assert all(set(b) == {SUCCESS} for b in driver.buffers().values())


def test_health_test_is_answered_only_while_that_nodes_agent_lives(service_factory, agent_factory, driver,
                                                                   kafka_bootstrap, prefix):
    service_factory()
    agent_factory("node-a")
    driver.wait_healthy(1, timeout=10)
    n_before = len(driver.health_acks)
    # the topic is there, as an invoker's is before a controller tests it; the scheduler reads it only
    # once an agent stands behind invoker1. (Sent to a topic not yet created, the test waited on the
    # driver's Kafka client: its metadata back-off took 0.1 s to over 30 s under load.)
    bus = Bus(kafka_bootstrap)
    try:
        bus.ensure_topics([(wire.invoker_topic(1, prefix), "invoker")])
    finally:
        bus.close()
    driver._send_health_test(1)                  # invoker1: no agent behind it yet
    time.sleep(1.5)
    assert [a for a in driver.health_acks[n_before:] if a["instance"]["instance"] == 1] == []
    agent_factory("node-b")                      # node-b becomes invoker1: the pending test is answered
    deadline = time.monotonic() + 30
    while not any(a["instance"]["instance"] == 1 for a in driver.health_acks[n_before:]):
        assert time.monotonic() < deadline, "the health test of invoker1 was never answered"
        time.sleep(0.05)


def test_each_controller_gets_its_own_health_test_answer(service_factory, agent_factory, driver, kafka_bootstrap,
                                                         prefix):
    service_factory()
    agent_factory("node-a")
    second = ControllerDriver(kafka_bootstrap, prefix=prefix, controller_id="1", retest_s=2.0)
    try:
        driver.wait_healthy(1, timeout=10)
        second.wait_healthy(1, timeout=10)     # both controllers' tests on invoker0 answered, each on its topic
        assert second.health_acks[0]["transid"] == second.health_transid
    finally:
        second.close()


def test_activations_failed_before_the_controllers_deadline_leave_the_invoker_healthy(service_factory,
                                                                                      agent_factory, driver,
                                                                                      standin):
    put(standin, "stuck", None)
    service_factory(deadline_margin_s=178.5)          # deadline 180 s: failed ~1.5 s after each call
    agent_factory("node-a").answering = False         # the agent takes every batch and never answers
    driver.wait_healthy(1, timeout=10)
    ids = [driver.publish("guest/stuck", {"i": i}, blocking=False) for i in range(5)]
    driver.flush()
    assert driver.wait_acked(ids, timeout=15) == []
    assert [driver.acks[a].is_system_error for a in ids] == [False] * 5   # five system errors: Unhealthy
    assert driver.states() == {0: "healthy"}


def test_an_ack_that_arrives_while_its_waiter_first_asks_is_not_missed(bare_driver, monkeypatch):
    """The waiter and the consumer thread both make an activation's ack log on first sight; made at the
    same moment, each would have its own, and the waiter would never see the ack. A slow log makes
    that moment wide: the waiter still gets its answer."""
    import threading

    from controller_plugin import acks
    from esg_cli import controller_driver

    made = []

    class SlowLog(controller_driver.AckLog):
        def __init__(self) -> None:
            made.append(self)
            if len(made) == 1:      # the waiter's: slow enough for the consumer thread to come meanwhile
                time.sleep(0.3)
            super().__init__()

    monkeypatch.setattr(bare_driver, "acks", controller_driver.defaultdict(SlowLog))
    msg = wire.parse_activation(wire.encode(bare_driver.message("guest/f", {"i": 1}, blocking=False)))
    ack = acks.health_ack(msg, wire.InvokerInstance(0, 1024))   # a plain completion: msg's own transid
    got: list[object] = []
    waiter = threading.Thread(target=lambda: got.append(bare_driver.wait_acked([msg.activation_id], timeout=3)))
    waiter.start()
    time.sleep(0.05)                                            # the waiter is making its log now
    bare_driver._on_ack(ack)
    waiter.join()
    assert got == [[]]
    assert bare_driver.acks[msg.activation_id].completions == 1
