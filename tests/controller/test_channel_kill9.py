"""``kill -9`` on either end of the Redis channel, with the real ``esg agent`` and the real scheduler.

Nothing accepted is lost, nothing is answered twice, and nothing runs twice (``docs/architecture.md`` §7,
at most once):

* an agent killed while it holds pending dispatches answers, when it restarts in time, those it had
  started with an error (they may have run part way: not run again) and runs those it had not; if it
  stays dead, the scheduler answers the started ones with an error once the agent timeout passes and
  runs the unstarted ones elsewhere;
* a scheduler killed between dispatch and result finishes each open activation exactly once when it
  restarts: it adopts the batches its agents had started and answers them with their results.
"""

from __future__ import annotations

import json
import re
import signal
import time

import pytest

from agent_channel.keys import AGENT_GROUP, Keys
from tests.agent.agent_harness import AgentProcess
from tests.controller.chaos import answer
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


def runs(agent_log: str) -> int:
    """How many activations the agent ran (its log line per batch: ``batch B: ACTION xN on vCPUs ...``)."""
    return sum(int(m) for m in re.findall(r"batch \S+: \S+ x(\d+) on vCPUs", agent_log))


def check_exactly_once(driver, ids: list[str], params: list[dict], timeout: float) -> None:
    assert driver.wait_acked(ids, timeout=timeout) == [], "activations never answered"
    time.sleep(1.5)  # late duplicates would show up here
    assert driver.duplicates() == {}
    for aid, p in zip(ids, params):
        if driver.published[aid]["blocking"]:
            assert driver.acks[aid].record["response"] == {"statusCode": 0, "result": {"i": p["i"]}, "size": len(json.dumps({"i": p["i"]}))}, aid
        assert driver.acks[aid].is_system_error is False


def test_agent_killed_with_pending_batches_answers_the_started_ones_after_a_restart(
        service_factory, driver, standin, redis_client, redis_url, prefix, tmp_path):
    slow_action(standin)
    service_factory(agent_timeout_s=30)         # the restart comes well within the agent timeout
    a = agent(tmp_path, redis_url, standin, "node-a", prefix, "--max-batches", "2")
    first = a
    try:
        driver.wait_healthy(1, timeout=30)
        params = [{"i": i, "sleep": 1.5} for i in range(6)]
        ids = [driver.publish("guest/slow", p, blocking=i % 2 == 0) for i, p in enumerate(params)]
        driver.flush()
        wait_for(lambda: pending(redis_client, prefix, "node-a") == 2, 30, "two batches taken by node-a")
        wait_for(lambda: runs(first.output()) == 2, 30, "node-a to start both")
        a.kill()
        assert not any(driver.acks[i].completions for i in ids)
        assert pending(redis_client, prefix, "node-a") == 2        # still held for node-a
        a = agent(tmp_path, redis_url, standin, "node-a", prefix, "--max-batches", "2")
        assert driver.wait_acked(ids, timeout=60) == []
        time.sleep(1.5)  # late duplicates would show up here
        assert driver.duplicates() == {}
        records = {aid: answer(driver.wait(aid, timeout=10)["response"]) for aid in ids}
        failed = [aid for aid, r in records.items() if r["statusCode"] != 0]
        assert len(failed) == 2                        # the two it had started: may have run, not run again
        for aid in failed:
            assert records[aid]["statusCode"] == 2 and "is not run again" in records[aid]["result"]["error"]
        for aid, p in zip(ids, params):
            if aid not in failed:
                assert records[aid] == {"statusCode": 0, "result": {"i": p["i"]}}
        assert "resuming 2 dispatch(es) taken before a restart" in a.output()
        assert runs(first.output()) == 2 and runs(a.output()) == 4     # six activations, six runs
        assert pending(redis_client, prefix, "node-a") == 0
        assert redis_client.xlen(Keys(prefix).dispatch("node-a")) == 0
    finally:
        a.stop()
        first.stop()


def test_agent_killed_for_good_has_its_started_batches_answered_and_its_others_run_elsewhere(
        service_factory, driver, standin, redis_client, redis_url, prefix, tmp_path):
    slow_action(standin)
    service_factory(agent_timeout_s=1.5)
    a = agent(tmp_path, redis_url, standin, "node-a", prefix)
    b = None
    try:
        driver.wait_healthy(1, timeout=30)
        params = [{"i": i, "sleep": 60} for i in range(3)]          # node-a's runs sleep long: it dies first
        ids = [driver.publish("guest/slow", p, blocking=True) for p in params]
        driver.flush()
        wait_for(lambda: runs(a.output()) == 3, 30, "every batch started by node-a")
        b = agent(tmp_path, redis_url, standin, "node-b", prefix)
        driver.wait_healthy(2, timeout=30)
        assert pending(redis_client, prefix, "node-a") == 3 and not any(driver.acks[i].completions for i in ids)
        a.kill()
        assert driver.wait_acked(ids, timeout=60) == []
        time.sleep(1.5)
        assert driver.duplicates() == {}
        for aid in ids:                                # started on node-a: answered with an error, not run again
            r = driver.acks[aid].record["response"]
            assert r["statusCode"] == 2 and "node-a was lost" in r["result"]["error"], r
            assert driver.acks[aid].is_system_error is False
        assert pending(redis_client, prefix, "node-a") == 0          # taken back from node-a's stream ...
        assert redis_client.xlen(Keys(prefix).dispatch("node-a")) == 0
        a = agent(tmp_path, redis_url, standin, "node-a", prefix)    # ... so a restarted node-a runs none
        wait_for(lambda: "reading" in a.output(), 30, "node-a to start again")
        time.sleep(1.0)
        assert "resuming" not in a.output() and runs(a.output()) == 0 and runs(b.output()) == 0
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
    # the new scheduler awaited the running batches, or found their results if they ended meanwhile: none
    # was sent again
    assert re.search(r"takeover \(epoch 2\): 4 open and 0 acking activations, [0-4] batches running adopted, "
                     r"0 revoked", text), text
    assert runs(a.output()) == 4                           # each activation ran once
