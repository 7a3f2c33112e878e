"""Reliability (``docs/architecture.md`` §7): lost agents, the controller's deadline, and kill -9 with exactly-once acks."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.controller.conftest import SCHEDULER_KEY
from tests.controller.test_service_basic import put


def wait_for(cond, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_lost_agent_batches_are_redispatched(service_factory, agent_factory, driver, standin):
    put(standin, "slow", None)
    svc = service_factory()
    a = agent_factory("node-a")
    a.answering = False
    driver.wait_healthy(1, timeout=10)
    aid = driver.invoke("guest/slow", {"v": 7}, blocking=False)
    wait_for(lambda: a.batches, 10, "the batch to reach node-a")
    b = agent_factory("node-b")
    a.heartbeating = False  # node-a dies with the batch
    assert driver.wait_acked([aid], timeout=15) == []
    rec = driver.wait(aid, timeout=5)
    assert rec["response"] == {"statusCode": 0, "result": {"v": 7}, "size": 8}
    assert b.batches and b.batches[0].requests[0].activation_id == aid
    assert driver.acks[aid].completions == 1
    assert svc.registry.ids == {"node-a": 0, "node-b": 1}


def test_lost_agent_near_controller_deadline_is_failed_as_developer_error(service_factory, agent_factory, driver,
                                                                          standin):
    # controller deadline = max(100 s, 60 s)·2 + 60 s = 260 s; a re-run (100 s) would not fit in 260 - 170.
    put(standin, "long", None, limits={"timeout": 100_000})
    service_factory(deadline_margin_s=170)
    a = agent_factory("node-a")
    a.answering = False
    driver.wait_healthy(1, timeout=10)
    aid = driver.invoke("guest/long", {}, blocking=False)
    wait_for(lambda: a.batches, 10, "the batch to reach node-a")
    a.heartbeating = False
    assert driver.wait_acked([aid], timeout=10) == []
    log = driver.acks[aid]
    assert log.completions == 1 and log.is_system_error is False   # a dead container is the action's failure
    rec = driver.wait(aid, timeout=5)
    assert rec["response"]["statusCode"] == 2 and "node-a" in rec["response"]["result"]["error"]


def test_no_agent_room_is_failed_before_controller_deadline(service_factory, agent_factory, driver, standin):
    put(standin, "stuck", None)
    service_factory(deadline_margin_s=178.5)  # deadline 180 s: fails ~1.5 s after the call
    agent_factory("node-a", vcpus=1).answering = False
    driver.wait_healthy(1, timeout=10)
    first = driver.invoke("guest/stuck", {}, blocking=False)   # occupies the only vCPU, never answered
    second = driver.invoke("guest/stuck", {}, blocking=True, timeout=10)
    assert second["response"]["statusCode"] == 2
    assert driver.wait_acked([first], timeout=5) == []
    assert driver.acks[first].is_system_error is False


def start_scheduler(settings, log_path: Path) -> subprocess.Popen:
    env = {**os.environ, "ESG_KAFKA": settings.kafka, "ESG_REDIS": settings.redis_url,
           "ESG_OPENWHISK_API": settings.openwhisk_api, "ESG_OPENWHISK_AUTH": SCHEDULER_KEY,
           "ESG_TOPIC_PREFIX": settings.topic_prefix, "ESG_ACTIVATION_STORE": settings.activation_store}
    log = open(log_path, "ab")
    return subprocess.Popen([sys.executable, "-m", "esg_cli.main", "scheduler", "--profiles",
                             str(settings.profiles_dir), "--agent-timeout-s", "2"],
                            env=env, stdout=log, stderr=subprocess.STDOUT, cwd=Path(__file__).parents[2])


def stop_scheduler(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


def test_kill_9_and_restart_answers_every_activation_exactly_once(settings_factory, agent_factory, driver,
                                                                  standin, tmp_path):
    put(standin, "work", None)
    settings = settings_factory()
    log_path = tmp_path / "scheduler.log"
    proc = start_scheduler(settings, log_path)
    try:
        agent_factory("node-a", vcpus=4, run_delay_s=0.02)
        driver.wait_healthy(1, timeout=20)
        ids = [driver.publish("guest/work", {"i": i}, blocking=i % 2 == 0) for i in range(200)]
        driver.flush()
        wait_for(lambda: sum(1 for a in ids if driver.acks[a].completions) >= 40, 30, "40 acks")
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        answered_before = sum(1 for a in ids if driver.acks[a].completions)
        assert answered_before < 200, "the crash came too late to test anything"
        proc = start_scheduler(settings, log_path)
        missing = driver.wait_acked(ids, timeout=60)
        assert missing == [], f"{len(missing)} activations never answered"
        time.sleep(1.5)  # late duplicates would show up here
        assert driver.duplicates() == {}
        for i, a in enumerate(ids):
            if i % 2 == 0:
                assert driver.acks[a].record["response"]["result"] == {"i": i}
    finally:
        stop_scheduler(proc)
    text = log_path.read_text(errors="replace")
    assert "recovery:" in text
    assert SCHEDULER_KEY.split(":")[1] not in text
    assert driver.user["authkey"]["api_key"].split(":")[1] not in text


def leased_ledger(redis_client, prefix: str, holder: str = "earlier"):
    """A ledger writing under a lease ``holder`` took (every ledger write is fenced), and that lease."""
    from controller_plugin.lease import Lease
    from controller_plugin.ledger import Ledger

    lease = Lease(redis_client, f"{prefix}0", holder)
    assert lease.try_acquire()
    return Ledger(redis_client, f"{prefix}0", prefix, fence=lease), lease


def test_restart_in_the_ack_window_sends_each_ack_once(settings_factory, service_factory, agent_factory, driver,
                                                       standin, redis_client, kafka_bootstrap):
    """A crash in the ack window (the ``acking`` entries written, their acks produced or not): an ack
    already on completed{C} is not sent again, a stored one that is missing is."""
    import json

    from kafka import KafkaProducer

    from controller_plugin import acks, wire
    from controller_plugin.bus import Bus, Topics
    from controller_plugin.ledger import LedgerEntry
    from controller_plugin.requests_state import Outcome

    settings = settings_factory()
    topics = Topics(settings.topic_prefix, settings.controller_id)
    Bus(kafka_bootstrap).ensure_topics([(topics.completed, "completed")])
    ledger, lease = leased_ledger(redis_client, settings.topic_prefix)
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap)
    entries = []
    for i in range(3):
        raw = json.dumps(driver.message("guest/x", {"i": i}, blocking=True))
        msg = wire.parse_activation(raw)
        assert ledger.accept([(msg.activation_id, 0, 1, raw)], "earlier") == [True]
        entry = LedgerEntry(msg.activation_id, "open", 0, 1, raw)
        record = acks.activation_record(msg, None, Outcome(0, {"i": i}, 1, 2))
        data = acks.ack_bytes(msg, record, wire.InvokerInstance(0, 1024))
        ledger.mark_acking([(entry, data, record)])
        entries.append(msg.activation_id)
        if i != 1:  # this ack went out before the crash
            producer.send(topics.completed, data)
    producer.flush()
    producer.close()
    lease.release()                 # the earlier scheduler is gone
    service_factory()
    assert driver.wait_acked(entries, timeout=10) == []
    time.sleep(1.0)
    assert driver.duplicates() == {}
    assert [driver.acks[a].completions for a in entries] == [1, 1, 1]
    assert [driver.acks[a].record["response"]["result"] for a in entries] == [{"i": 0}, {"i": 1}, {"i": 2}]
    assert ledger.unfinished() == []


def test_ledger_accept_is_new_once_and_again_for_its_own_open_entry(redis_client, prefix):
    """A reply lost in a Redis hiccup: asking again is new for the owner, a redelivery for anyone else."""
    from controller_plugin.ledger import LedgerEntry

    ledger, _ = leased_ledger(redis_client, prefix)
    entry = [("a" * 32, 0, 1, "{}")]
    assert ledger.accept(entry, "inc-1") == [True]
    assert ledger.accept(entry, "inc-1") == [True]
    assert ledger.accept(entry, "inc-2") == [False]
    ledger.mark_acking([(LedgerEntry("a" * 32, "open", 0, 1, "{}"), b"{}", None)])
    assert ledger.accept(entry, "inc-1") == [False]          # answered: a redelivery now, even for its owner
    ledger.mark_done(["a" * 32])
    assert ledger.accept(entry, "inc-1") == [False] and ledger.unfinished() == []


def test_done_marks_leave_each_entry_as_the_state_alone_with_its_ttl_and_out_of_the_open_set(redis_client, prefix,
                                                                                              monkeypatch):
    """The ``done`` mark (one script call a chunk of entries): each entry becomes ``{state: done}`` with
    the dedupe TTL, every id leaves the open set, other open entries stay; chunks split as they should."""
    from controller_plugin import ledger as ledger_module
    from controller_plugin.ledger import DONE_TTL_S, LedgerEntry

    monkeypatch.setattr(ledger_module, "DONE_PER_CALL", 3)
    ledger, _ = leased_ledger(redis_client, prefix)
    ids = [f"{i:032x}" for i in range(8)]
    assert ledger.accept([(a, 0, 1, "{}") for a in ids], "inc-1") == [True] * 8
    ledger.mark_acking([(LedgerEntry(a, "open", 0, 1, "{}"), b"ack", {"r": 1}) for a in ids[:2]])
    ledger.mark_done(ids[:7])
    for a in ids[:7]:
        key = f"esg:{prefix}0:act:{a}"
        assert redis_client.hgetall(key) == {b"state": b"done"}
        assert DONE_TTL_S - 5 < redis_client.ttl(key) <= DONE_TTL_S
    assert [e.activation_id for e in ledger.unfinished()] == [ids[7]]
    assert ledger.accept([(ids[0], 0, 1, "{}")], "inc-1") == [False]     # a redelivery now
    pipe = redis_client.pipeline(transaction=False)
    assert ledger.stage_acking(pipe, [], done=[]) == 0                  # nothing to mark: no command
    assert pipe.command_stack == []


def test_acking_entries_are_written_in_one_script_call_a_chunk(redis_client, prefix, monkeypatch):
    """A turn's acks go into their entries with one command per chunk (not an HSET each): each entry
    gets ``acking``, its ack's bytes and its record as JSON; an ack without a record leaves the entry's
    record as it was; the raw message and the owner stay."""
    import json

    from controller_plugin import ledger as ledger_module
    from controller_plugin.ledger import LedgerEntry

    monkeypatch.setattr(ledger_module, "ACKING_PER_CALL", 3)
    ledger, _ = leased_ledger(redis_client, prefix)
    ids = [f"{i:032x}" for i in range(7)]
    assert ledger.accept([(a, 0, 1, f"raw-{a}") for a in ids], "inc-1") == [True] * 7
    redis_client.hset(f"esg:{prefix}0:act:{ids[6]}", "record", "earlier")
    items = [(LedgerEntry(a, "open", 0, 1, f"raw-{a}"), f"ack-{i}".encode(),
              None if i == 6 else {"activationId": a, "n": i, "s": "é"}) for i, a in enumerate(ids)]
    pipe = redis_client.pipeline(transaction=False)
    assert ledger.stage_acking(pipe, items) == 3
    assert len(pipe.command_stack) == 3
    pipe.execute()
    for i, a in enumerate(ids):
        h = redis_client.hgetall(f"esg:{prefix}0:act:{a}")
        assert h[b"state"] == b"acking" and h[b"ack"] == f"ack-{i}".encode()
        assert h[b"raw"] == f"raw-{a}".encode() and h[b"owner"] == b"inc-1"
        if i == 6:
            assert h[b"record"] == b"earlier"
        else:
            assert json.loads(h[b"record"]) == {"activationId": a, "n": i, "s": "é"}
    assert sorted(e.activation_id for e in ledger.unfinished() if e.state == "acking") == ids


def test_every_ledger_write_is_refused_without_the_current_token(redis_client, prefix):
    """Fencing: once another scheduler holds the lease (a newer epoch), a former holder's ledger writes --
    accept, acking, done, progress, invoker ids -- are refused as FENCED and change nothing."""
    import pytest

    from controller_plugin.lease import Lease, is_fenced
    from controller_plugin.ledger import LedgerEntry

    old, old_lease = leased_ledger(redis_client, prefix, "old")
    assert old.accept([("b" * 32, 0, 1, "{}")], "old") == [True]
    redis_client.delete(old_lease.key)              # its lease ran out while it was paused ...
    new_lease = Lease(redis_client, f"{prefix}0", "new")
    assert new_lease.try_acquire() and new_lease.epoch == old_lease.epoch + 1     # ... and another took it
    before = {k: redis_client.dump(k) for k in redis_client.keys(f"esg:{prefix}*")}
    entry = LedgerEntry("b" * 32, "open", 0, 1, "{}")
    for write in (lambda: old.accept([("c" * 32, 0, 1, "{}")], "old"),
                  lambda: old.mark_acking([(entry, b"ack", None)]),
                  lambda: old.mark_done(["b" * 32]),
                  lambda: old.invoker_id("node-x")):
        with pytest.raises(Exception) as exc:
            write()
        assert is_fenced(exc.value), exc.value
    pipe = redis_client.pipeline(transaction=False)
    old.stage_progress(pipe, [("b" * 32, "f", "{}")])
    assert is_fenced(pipe.execute(raise_on_error=False)[0])
    after = {k: redis_client.dump(k) for k in redis_client.keys(f"esg:{prefix}*")}
    assert after == before
    assert not old_lease.renew() and old_lease.lost.is_set()      # and it learns it has lost the lease
