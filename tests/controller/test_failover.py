"""Faults, one at a time, against the real broker and a real Redis: schedulers as ``esg scheduler``
processes (a leader and a standby), agents on the real channel. Each test counts what went wrong --
activations lost (never answered), answered twice, run twice -- and all must be zero (at most once,
answered exactly once: docs/deployment.md, "Failover").

* the leader killed (``kill -9``) under load: the standby takes over; no invoker goes offline at the
  controller (no gap of 10 s in its pings);
* the leader stopped (``SIGSTOP``) longer than its lease, then continued: it must not act, and it rejoins
  as a standby;
* the leader cut off from Redis (a proxy in front of Redis, cut): the standby takes over, the leader
  steps down once it sees Redis again;
* two schedulers started at once: one leads;
* a scheduler paused longer than the agent timeout while long actions run: no agent is declared lost
  from the scheduler's own stall, nothing runs again;
* an agent paused longer than the agent timeout: what it had started is answered with an error and
  never run elsewhere; what it had not started runs elsewhere, once;
* Redis restarted without persistence: agents make their consumer groups again, the scheduler notices
  the lost ledger, answers what was in flight, and serves new calls;
* Redis wiped and the scheduler restarted: every activation the lost ledger held is answered, none run.
"""

from __future__ import annotations

import re
import signal
import time

import pytest
import redis

from esg_cli.servers import start_redis
from tests.agent.agent_harness import AgentProcess
from tests.controller.chaos import Load, PingWatch, RedisProxy, Scheduler, answer, faults, wait_for
from tests.controller.conftest import SCHEDULER_KEY
from tests.controller.test_channel_kill9 import SLOW, runs
from tests.controller.test_service_basic import put

pytestmark = pytest.mark.timeout(240)

NONE = {"lost": [], "duplicated": [], "double": []}
FAST = ("--lease-s", "1", "--agent-timeout-s", "3")


@pytest.fixture
def own_redis():
    """A redis-server of the test's own (a test restarts, wipes or cuts it)."""
    server = start_redis()
    yield server
    server.stop()


@pytest.fixture
def schedulers():
    started: list[Scheduler] = []
    yield started
    for s in started:
        s.stop()


def start(schedulers, settings, tmp_path, name: str, redis_url: str | None = None, *extra: str) -> Scheduler:
    s = Scheduler(settings, tmp_path / f"{name}.log", redis_url, *FAST, *extra, name=name)
    schedulers.append(s)
    return s


def leading(s: Scheduler) -> bool:
    return "leading as epoch" in s.text()


def leader_and_standby(schedulers, settings, tmp_path, leader_redis: str | None = None) -> tuple[Scheduler, Scheduler]:
    """``a`` leading (through ``leader_redis``, when given) and ``b`` standing by."""
    a = start(schedulers, settings, tmp_path, "a", leader_redis)
    wait_for(lambda: leading(a), 60, "a to lead")
    b = start(schedulers, settings, tmp_path, "b")
    wait_for(lambda: "ready, standing by" in b.text(), 60, "b to stand by")
    return a, b


def alone(schedulers, settings, tmp_path) -> Scheduler:
    """One scheduler, leading."""
    s = start(schedulers, settings, tmp_path, "s")
    wait_for(lambda: leading(s), 60, "the scheduler to lead")
    return s


def check_results(driver, load: Load) -> None:
    for aid in load.ids:
        if driver.published[aid]["blocking"]:
            assert answer(driver.acks[aid].record["response"]) == {"statusCode": 0, "result": load.params[aid]}, aid


def test_kill_9_of_the_leader_under_load(settings_factory, agent_factory, driver, standin, schedulers, tmp_path,
                                         prefix, kafka_bootstrap):
    put(standin, "work")
    settings = settings_factory()
    a, b = leader_and_standby(schedulers, settings, tmp_path)
    agents = [agent_factory(n, vcpus=4, run_delay_s=0.02) for n in ("node-a", "node-b")]
    driver.wait_healthy(2, timeout=30)
    watch = PingWatch(kafka_bootstrap, prefix)
    try:
        load = Load(driver, "guest/work", 15)
        wait_for(lambda: sum(1 for x in load.ids if driver.acks[x].completions) >= 20, 30, "20 acks")
        a.kill()
        wait_for(lambda: leading(b), 30, "b to take over")
        time.sleep(3)
        ids = load.stop()
        assert faults(driver, ids, [x for ag in agents for x in ag.ran]) == NONE
        assert load.refused == 0                        # the controller never answered a call with 503
        check_results(driver, load)
        times = sorted(t for x in ids if (t := driver.acks[x].first_ack_s) is not None)
        gap = max(t2 - t1 for t1, t2 in zip(times, times[1:]))
        assert gap < 10, gap                              # every call was answered long before the controller's
        assert watch.largest_gap() < 10                   # no invoker went offline at the controller
    finally:
        watch.close()


def test_a_leader_stopped_past_its_lease_does_not_act_and_rejoins_as_a_standby(
        settings_factory, agent_factory, driver, standin, schedulers, tmp_path):
    put(standin, "work")
    settings = settings_factory()
    a, b = leader_and_standby(schedulers, settings, tmp_path)
    agent = agent_factory("node-a", vcpus=4, run_delay_s=0.02)
    driver.wait_healthy(1, timeout=30)
    load = Load(driver, "guest/work", 10)
    wait_for(lambda: sum(1 for x in load.ids if driver.acks[x].completions) >= 10, 30, "10 acks")
    a.signal(signal.SIGSTOP)
    wait_for(lambda: leading(b), 30, "b to take over")
    time.sleep(1.0)
    a.signal(signal.SIGCONT)
    wait_for(lambda: "rejoining as a standby" in a.text(), 30, "a to step down and stand by")
    time.sleep(1.5)
    ids = load.stop()
    assert faults(driver, ids, agent.ran) == NONE
    assert load.refused == 0
    check_results(driver, load)
    text = a.text()
    assert "stepping down" in text and text.count("leading as epoch") == 1     # it did not lead again
    assert "ready, standing by" in text.split("rejoining as a standby")[1]


def test_a_leader_cut_off_from_redis_is_replaced_and_steps_down(settings_factory, agent_factory, driver, standin,
                                                               schedulers, own_redis, tmp_path):
    put(standin, "work")
    settings = settings_factory(redis_url=own_redis.url)
    proxy = RedisProxy(own_redis.host, own_redis.port)
    try:
        a, b = leader_and_standby(schedulers, settings, tmp_path, proxy.url())
        agent = agent_factory("node-a", redis=own_redis.url, vcpus=4, run_delay_s=0.02)
        driver.wait_healthy(1, timeout=30)
        load = Load(driver, "guest/work", 10)
        wait_for(lambda: sum(1 for x in load.ids if driver.acks[x].completions) >= 10, 30, "10 acks")
        proxy.cut()
        wait_for(lambda: leading(b), 30, "b to take over")
        time.sleep(1.0)
        proxy.heal()
        wait_for(lambda: "stepping down" in a.text(), 30, "a to step down")
        time.sleep(1.0)
        ids = load.stop()
        assert faults(driver, ids, agent.ran) == NONE
        assert load.refused == 0
        check_results(driver, load)
    finally:
        proxy.close()


def test_two_schedulers_started_at_once_elect_one_leader(settings_factory, agent_factory, driver, standin,
                                                         schedulers, tmp_path):
    put(standin, "work")
    settings = settings_factory()
    pair = [start(schedulers, settings, tmp_path, n) for n in ("a", "b")]
    wait_for(lambda: all("esg scheduler: ready" in s.text() for s in pair), 60, "both to start")
    agent = agent_factory("node-a", vcpus=4, run_delay_s=0.02)
    driver.wait_healthy(1, timeout=30)
    load = Load(driver, "guest/work", 10)
    time.sleep(2.0)
    ids = load.stop()
    assert faults(driver, ids, agent.ran) == NONE
    assert load.refused == 0
    assert sorted(leading(s) for s in pair) == [False, True]
    assert sum(s.text().count("ready, standing by") for s in pair) == 1


def test_a_scheduler_paused_longer_than_the_agent_timeout_declares_no_agent_lost(
        settings_factory, driver, standin, schedulers, tmp_path, redis_url, prefix):
    standin.put_action("guest/slow", {"exec": {"kind": "python:3", "code": SLOW}})
    settings = settings_factory()
    s = alone(schedulers, settings, tmp_path)
    agent = AgentProcess(tmp_path, redis_url, standin.url, "node-a", prefix, "--fake-gpu", "A30", "--vcpus", "4",
                         "--openwhisk-auth", SCHEDULER_KEY)
    try:
        driver.wait_healthy(1, timeout=30)
        params = [{"i": i, "sleep": 6} for i in range(4)]
        ids = [driver.publish("guest/slow", p, blocking=i % 2 == 0) for i, p in enumerate(params)]
        driver.flush()
        wait_for(lambda: runs(agent.output()) == 4, 30, "the agent to start all four")
        s.signal(signal.SIGSTOP)                        # longer than the agent timeout (3 s) and the lease (1 s)
        time.sleep(4.5)
        s.signal(signal.SIGCONT)
        assert faults(driver, ids, [], timeout=60) == NONE
        for aid, p in zip(ids, params):                # each ran once, on the agent that had started it
            if driver.published[aid]["blocking"]:
                assert answer(driver.acks[aid].record["response"]) == {"statusCode": 0, "result": {"i": p["i"]}}
        assert runs(agent.output()) == 4
        assert "agent node-a lost" not in s.text()        # its heartbeats queued meanwhile were read first
        # its own batches, taken over again after the pause: awaited (or their results found), none revoked
        assert re.search(r"takeover \(epoch 2\): 4 open .* [0-4] batches running adopted, 0 revoked", s.text())
    finally:
        agent.stop()


def test_an_agent_paused_longer_than_the_agent_timeout_runs_nothing_that_went_elsewhere(
        service_factory, agent_factory, driver, standin, tmp_path, redis_url, prefix):
    standin.put_action("guest/slow", {"exec": {"kind": "python:3", "code": SLOW}})
    service_factory(agent_timeout_s=1.5)
    a = AgentProcess(tmp_path, redis_url, standin.url, "node-a", prefix, "--fake-gpu", "A30", "--vcpus", "4",
                     "--max-batches", "1", "--openwhisk-auth", SCHEDULER_KEY)
    try:
        driver.wait_healthy(1, timeout=30)
        params = [{"i": i, "sleep": 3} for i in range(3)]
        ids = [driver.publish("guest/slow", p, blocking=True) for p in params]
        driver.flush()
        wait_for(lambda: runs(a.output()) == 1, 30, "node-a to start one")
        b = agent_factory("node-b", vcpus=4, handlers={"guest/slow": lambda v: {"i": v["i"]}})
        driver.wait_healthy(2, timeout=30)
        a.proc.send_signal(signal.SIGSTOP)            # longer than the agent timeout: node-a is lost
        time.sleep(4.0)
        a.proc.send_signal(signal.SIGCONT)
        assert faults(driver, ids, b.ran, timeout=60) == NONE
        records = [driver.acks[x].record["response"] for x in ids]
        failed = [r for r in records if r["statusCode"] != 0]
        assert len(failed) == 1 and "node-a was lost" in failed[0]["result"]["error"]   # it had started there
        assert sorted(r["result"]["i"] for r in records if r["statusCode"] == 0) == sorted(
            set(range(3)) - {next(p["i"] for p, r in zip(params, records) if r["statusCode"] != 0)})
        time.sleep(3.5)                                 # node-a finishes what it had started, nothing more
        assert runs(a.output()) == 1 and len(b.ran) == 2
    finally:
        a.stop()


def test_a_redis_restart_without_persistence_loses_nothing_silently_and_the_cluster_serves_again(
        settings_factory, agent_factory, driver, standin, schedulers, own_redis, tmp_path):
    put(standin, "work")
    settings = settings_factory(redis_url=own_redis.url)
    s = alone(schedulers, settings, tmp_path)
    agent = agent_factory("node-a", redis=own_redis.url, vcpus=4,
                          handlers={"guest/work": lambda v: (time.sleep(0.3), v)[1]})
    driver.wait_healthy(1, timeout=30)
    load = Load(driver, "guest/work", 8)
    wait_for(lambda: sum(1 for x in load.ids if driver.acks[x].completions) >= 8, 30, "8 acks")
    port = own_redis.port
    own_redis.stop()                                    # no persistence: its data is gone
    restarted = start_redis(port=port)
    try:
        wait_for(lambda: "LEDGER LOST" in s.text(), 60, "the scheduler to notice the lost ledger")
        wait_for(lambda: agent.channel.recoveries >= 1, 30, "the agent to make its consumer group again")
        time.sleep(3.0)
        ids = load.stop()
        # what the lost ledger held is answered as a system error, which the controller counts against the
        # invoker's health: a few calls may be refused (503) until its health test passes again
        assert faults(driver, ids, agent.ran, timeout=60) == NONE
        answered_late = [x for x in ids if driver.acks[x].record and driver.acks[x].record["response"]["statusCode"] == 3]
        after = [driver.invoke("guest/work", {"after": i}, timeout=30) for i in range(3)]   # the cluster serves again
        assert [answer(r["response"]) for r in after] == [{"statusCode": 0, "result": {"after": i}} for i in range(3)]
        for x in answered_late:
            assert "ledger was lost" in driver.acks[x].record["response"]["result"]["error"]
    finally:
        restarted.stop()


def test_a_redis_wipe_and_a_scheduler_restart_answer_every_activation_the_lost_ledger_held(
        settings_factory, agent_factory, driver, standin, schedulers, own_redis, tmp_path):
    put(standin, "work")
    settings = settings_factory(redis_url=own_redis.url)
    s = alone(schedulers, settings, tmp_path)
    agent = agent_factory("node-a", redis=own_redis.url, vcpus=16)
    agent.answering = False                              # the batches wait, read and not started
    driver.wait_healthy(1, timeout=30)
    ids = [driver.publish("guest/work", {"i": i}, blocking=i % 2 == 0) for i in range(10)]
    driver.flush()
    wait_for(lambda: len({r.activation_id for b in agent.batches for r in b.requests}) == 10, 30, "10 dispatched")
    time.sleep(1.5)                                      # their offsets committed, a checkpoint beside them
    redis.Redis.from_url(own_redis.url).flushall()
    s.kill()
    s2 = start(schedulers, settings, tmp_path, "s2")
    wait_for(lambda: "ledger loss:" in s2.text(), 60, "the new scheduler to check the lost ledger's range")
    assert faults(driver, ids, agent.ran, timeout=60) == NONE
    for x in ids:
        assert driver.acks[x].completions == 1 and driver.acks[x].is_system_error
    assert "LEDGER LOST" in s2.text() and "10 answered now with an error" in s2.text()
    agent.answering = True
    rec = driver.invoke("guest/work", {"after": 1}, timeout=30)       # and it serves again
    assert answer(rec["response"]) == {"statusCode": 0, "result": {"after": 1}}

