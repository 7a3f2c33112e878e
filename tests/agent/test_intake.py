"""How dispatches reach the agent's batch threads and how their answers leave: one read for all idle
threads, never more than they can start; dispatches read together answered in one commit; a scheduler
turn's dispatches to a node arriving in one read."""

from __future__ import annotations

import json
import threading
import time

from agent_channel.connect import connect
from agent_channel.keys import Keys
from agent_channel.protocol import ActionRef, BatchResult, DispatchMessage, RunResult
from agent_channel.streams import Entry
from controller_plugin.channel import SchedulerChannel
from controller_plugin.lease import Lease
from esg.model import Config
from invoker_agent.channel import AgentChannel, AnswerGroup, _Answer
from invoker_agent.intake import Intake


def _entries(n: int, start: int = 0) -> list[Entry]:
    return [Entry("s", f"{i}-0", b"{}") for i in range(start, start + n)]


def test_one_read_serves_every_waiting_thread_and_asks_for_no_more_than_they_are():
    stop = threading.Event()
    stream = _entries(5)
    asked: list[int] = []
    lock = threading.Lock()
    gate = threading.Event()

    def read(count: int, block_ms: int) -> list[Entry]:
        with lock:
            asked.append(count)
            if len(asked) == 1:
                first = True
            else:
                first = False
                got, stream[:] = stream[:count], stream[count:]
        if first:                     # the first read finds nothing, while the other threads come to wait
            gate.wait(5)
            return []
        return got

    intake = Intake(read, stop, 20)
    taken: list[str] = []

    def worker() -> None:
        e = intake.next()
        if e is not None:
            with lock:
                taken.append(e.id)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    while intake._waiting < 3:          # three wait while the fourth is in its read
        time.sleep(0.001)
    gate.set()
    for t in threads:
        t.join(5)
    stop.set()
    assert asked == [1, 4]              # alone; then the reader and the three waiting, in one read
    assert sorted(taken) == ["0-0", "1-0", "2-0", "3-0"]
    assert [e.id for e in stream] == ["4-0"]      # never read: still in the stream


def test_what_was_read_is_handed_out_after_stop_and_then_none():
    stop = threading.Event()
    reads = [_entries(3)]
    intake = Intake(lambda count, block_ms: reads.pop() if reads else [], stop, 10)
    assert intake.next().id == "0-0"
    stop.set()
    assert [intake.next().id, intake.next().id] == ["1-0", "2-0"]
    assert intake.next() is None


def _result(batch_id: str) -> BatchResult:
    return BatchResult(batch_id, "n0", (RunResult(f"a-{batch_id}", 0, {"ok": True}, 1, 2),))


def _answer_later(group: AnswerGroup, eid: str, delay_s: float, done: dict) -> threading.Thread:
    def run() -> None:
        time.sleep(delay_s)
        group.commit(_Answer(eid, "r", _result(eid), ()))
        done[eid] = time.monotonic()
    t = threading.Thread(target=run)
    t.start()
    return t


def test_a_cohort_is_committed_once_when_its_last_answer_comes():
    calls: list[list[str]] = []
    group = AnswerGroup(lambda batch: calls.append([a.entry_id for a in batch]) or [None] * len(batch),
                        cohort_wait_s=2.0)
    group.join(["e1", "e2", "e3"])
    done: dict[str, float] = {}
    threads = [_answer_later(group, e, d, done) for e, d in (("e1", 0.0), ("e2", 0.05), ("e3", 0.1))]
    for t in threads:
        t.join(5)
    assert [sorted(c) for c in calls] == [["e1", "e2", "e3"]]
    assert len(done) == 3


def test_a_sibling_settled_without_an_answer_or_slower_than_the_wait_holds_no_one_back():
    calls: list[list[str]] = []
    group = AnswerGroup(lambda batch: calls.append([a.entry_id for a in batch]) or [None] * len(batch),
                        cohort_wait_s=0.2)
    group.join(["e1", "e2"])
    done: dict[str, float] = {}
    t0 = time.monotonic()
    t = _answer_later(group, "e1", 0.0, done)
    time.sleep(0.05)
    group.settle("e2")                  # a pre-warm, a repeated or a failed dispatch
    t.join(5)
    assert calls == [["e1"]] and done["e1"] - t0 < 0.15
    group.join(["e3", "e4"])
    t0 = time.monotonic()
    _answer_later(group, "e3", 0.0, done).join(5)   # e4 never answers: e3 goes when the wait is over
    assert calls[-1] == ["e3"] and 0.19 < done["e3"] - t0 < 1.0
    _answer_later(group, "e4", 0.0, done).join(5)   # late: alone, at once
    assert calls[-1] == ["e4"]
    assert group._cohorts == {}


def test_a_scheduler_turn_reaches_a_blocked_agent_in_one_read_in_order(redis_url):
    client = connect(redis_url)
    keys = Keys("intaketest_")
    client.delete(keys.dispatch("n0"), keys.dispatch("n1"))
    agent = AgentChannel(client, keys, "n0")
    lease = Lease(client, keys.scope, "intake-test")
    assert lease.try_acquire()
    sched = SchedulerChannel(connect(redis_url), keys, fence=lease)
    got: list[list[Entry]] = []
    reader = threading.Thread(target=lambda: got.append(agent.take(8, 5000)))
    reader.start()
    time.sleep(0.2)                     # blocked in XREADGROUP

    def msg(batch_id: str, node: str) -> DispatchMessage:
        return DispatchMessage(batch_id, node, "app", "f", ActionRef("guest", "f"), Config(1, 1, None), None, (), ())

    messages = [msg("b0", "n0"), msg("b1", "n1"), msg("b2", "n0"), msg("b3", "n0")]
    pipe = sched.r.pipeline(transaction=False)
    staged = sched.stage(pipe, messages)
    assert staged.commands == 2         # one call a node
    ids = staged.entry_ids(pipe.execute())
    reader.join(5)
    assert [json.loads(e.raw)["batch_id"] for e in got[0]] == ["b0", "b2", "b3"]
    assert [e.id for e in got[0]] == [ids[0], ids[2], ids[3]]
    n1 = client.xrange(keys.dispatch("n1"))
    assert [(eid.decode(), json.loads(f[b"m"])["batch_id"]) for eid, f in n1] == [(ids[1], "b1")]
    client.delete(keys.dispatch("n0"), keys.dispatch("n1"), lease.key, lease.epoch_key)


def test_a_read_asks_for_every_thread_not_running_a_batch_answering_ones_included():
    """Threads answering their batches will be back within milliseconds: the read asks for them too
    (else the first back reads for itself alone and splits the next cohort), never for running ones."""
    stop = threading.Event()
    asked: list[int] = []

    def read(count: int, block_ms: int) -> list[Entry]:
        asked.append(count)
        return _entries(count, start=10 * len(asked))

    intake = Intake(read, stop, 10, threads=4)
    with intake.running():
        first = intake.next()           # three threads are not running a batch: this one and two answering
        assert asked == [3]
        assert [intake.next().id, intake.next().id] == ["11-0", "12-0"]     # handed out, no new read
        assert first.id == "10-0" and asked == [3]
        with intake.running(), intake.running():
            intake.next()               # every other thread runs a batch: one, for itself
    assert asked == [3, 1]
