"""``kill -9`` on either end of the Redis channel, with the real ``esg agent`` and the real scheduler.

Nothing accepted is lost and nothing is answered twice (``docs/architecture.md`` §7):

* an agent killed while it holds pending dispatches either resumes them when it restarts in time, or
  the scheduler takes them back and runs them elsewhere once the agent timeout passes;
* a scheduler killed between dispatch and result finishes each open activation exactly once when it
  restarts (the results of its earlier incarnation are ignored; its activations run again).
"""

from __future__ import annotations

import json
import signal
import time

import pytest

from agent_channel.keys import AGENT_GROUP, Keys
from tests.agent.agent_harness import AgentProcess
from tests.controller.conftest import SCHEDULER_KEY
from tests.controller.test_service_reliability import start_scheduler, stop_scheduler, wait_for

pytestmark = pytest.mark.timeout(180)

SLOW = ("import time\n"
        "def main(a):\n"
        "    if time.time() * 1000 < a.get('quick_from_ms', float('inf')):\n"
        "        time.sleep(a.get('sleep', 1.5))\n"
        "    return {'i': a.get('i')}\n")


def slow_action(standin) -> None:
    """Sleeps ``sleep`` seconds, unless it starts after ``quick_from_ms`` (epoch ms; a sandboxed action
    sees nothing of the host a test could change meanwhile, so the time tells its runs apart)."""
    standin.put_action("guest/slow", {"exec": {"kind": "python:3", "code": SLOW}})


def agent(tmp_path, redis_url, standin, node, prefix, *extra) -> AgentProcess:
    return AgentProcess(tmp_path, redis_url, standin.url, node, prefix, "--fake-gpu", "A30", "--vcpus", "4",
                        "--openwhisk-auth", SCHEDULER_KEY, *extra)


def pending(redis_client, prefix: str, node: str) -> int:
    try:
        return int(redis_client.xpending(Keys(prefix).dispatch(node), AGENT_GROUP)["pending"])
    except Exception:  # noqa: BLE001 - no group yet
        return 0


def check_exactly_once(driver, ids: list[str], params: list[dict], timeout: float) -> None:
    assert driver.wait_acked(ids, timeout=timeout) == [], "activations never answered"
    time.sleep(1.5)  # late duplicates would show up here
    assert driver.duplicates() == {}
    for aid, p in zip(ids, params):
        if driver.published[aid]["blocking"]:
            assert driver.acks[aid].record["response"] == {"statusCode": 0, "result": {"i": p["i"]}, "size": len(json.dumps({"i": p["i"]}))}, aid
        assert driver.acks[aid].is_system_error is False


def test_agent_killed_with_pending_batches_resumes_them_after_a_restart(
        service_factory, driver, standin, redis_client, redis_url, prefix, tmp_path):
    slow_action(standin)
    service_factory(agent_timeout_s=30)         # the restart comes well within the agent timeout
    a = agent(tmp_path, redis_url, standin, "node-a", prefix, "--max-batches", "2")
    try:
        driver.wait_healthy(1, timeout=30)
        params = [{"i": i, "sleep": 1.5} for i in range(6)]
        ids = [driver.publish("guest/slow", p, blocking=i % 2 == 0) for i, p in enumerate(params)]
        driver.flush()
        wait_for(lambda: pending(redis_client, prefix, "node-a") == 2, 30, "two batches taken by node-a")
        a.kill()
        assert not any(driver.acks[i].completions for i in ids)
        assert pending(redis_client, prefix, "node-a") == 2        # still held for node-a
        a = agent(tmp_path, redis_url, standin, "node-a", prefix, "--max-batches", "2")
        check_exactly_once(driver, ids, params, timeout=60)
        assert "resuming 2 dispatch(es) taken before a restart" in a.output()
        assert pending(redis_client, prefix, "node-a") == 0
        assert redis_client.xlen(Keys(prefix).dispatch("node-a")) == 0
    finally:
        a.stop()


def test_agent_killed_for_good_has_its_batches_taken_back_and_run_elsewhere(
        service_factory, driver, standin, redis_client, redis_url, prefix, tmp_path):
    slow_action(standin)
    service_factory(agent_timeout_s=1.5)
    a = agent(tmp_path, redis_url, standin, "node-a", prefix)
    b = None
    try:
        driver.wait_healthy(1, timeout=30)
        # node-a's runs start before quick_from and sleep long; once it is killed, runs are quick
        quick_from = time.time() + 10
        params = [{"i": i, "sleep": 60, "quick_from_ms": quick_from * 1000} for i in range(3)]
        ids = [driver.publish("guest/slow", p, blocking=True) for p in params]
        driver.flush()
        wait_for(lambda: pending(redis_client, prefix, "node-a") == 3, 30, "every batch taken by node-a")
        b = agent(tmp_path, redis_url, standin, "node-b", prefix)
        driver.wait_healthy(2, timeout=30)
        assert pending(redis_client, prefix, "node-a") == 3 and not any(driver.acks[i].completions for i in ids)
        time.sleep(max(0.0, quick_from - time.time()))
        a.kill()
        check_exactly_once(driver, ids, params, timeout=60)
        assert pending(redis_client, prefix, "node-a") == 0          # taken back from node-a's stream ...
        assert redis_client.xlen(Keys(prefix).dispatch("node-a")) == 0
        a = agent(tmp_path, redis_url, standin, "node-a", prefix)    # ... so a restarted node-a runs none
        wait_for(lambda: "reading" in a.output(), 30, "node-a to start again")
        time.sleep(1.0)
        assert "resuming" not in a.output()
        assert "answered" in b.output()                                # node-b ran what node-a had taken
    finally:
        a.stop()
        if b is not None:
            b.stop()


def test_scheduler_killed_between_dispatch_and_result_finishes_each_activation_once(
        settings_factory, driver, standin, redis_client, redis_url, prefix, tmp_path):
    slow_action(standin)
    settings = settings_factory()
    log_path = tmp_path / "scheduler.log"
    proc = start_scheduler(settings, log_path)
    a = agent(tmp_path, redis_url, standin, "node-a", prefix, "--max-batches", "4")
    try:
        driver.wait_healthy(1, timeout=30)
        params = [{"i": i, "sleep": 2.0} for i in range(4)]
        ids = [driver.publish("guest/slow", p, blocking=i % 2 == 0) for i, p in enumerate(params)]
        driver.flush()
        wait_for(lambda: pending(redis_client, prefix, "node-a") == 4, 30, "every batch taken by node-a")
        proc.send_signal(signal.SIGKILL)                  # dispatched, running, no result yet
        proc.wait(10)
        assert not any(driver.acks[i].completions for i in ids)
        proc = start_scheduler(settings, log_path)
        check_exactly_once(driver, ids, params, timeout=90)
    finally:
        stop_scheduler(proc)
        a.stop()
    text = log_path.read_text(errors="replace")
    assert "recovery: 4 activations to run again" in text
