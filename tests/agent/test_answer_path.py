"""The agent's answer path: answers of concurrent batches share one MULTI, each caller learns its own
outcome; every answered batch is named in the heartbeats for a while; the runtime client reads the
reply forms HTTP/1.1 allows."""

from __future__ import annotations

import socket
import threading
import time

import pytest
import redis

from agent_channel.connect import connect
from agent_channel.keys import AGENT_GROUP, Keys
from agent_channel.protocol import BatchResult, RunResult, decode
from agent_channel.streams import entries, fields
from invoker_agent.channel import AgentChannel, AnswerGroup, _Answer
from invoker_agent.heartbeat import BatchTrack
from invoker_agent.runtime_client import RuntimeClient, RuntimeCrashed


def _result(batch_id: str) -> BatchResult:
    return BatchResult(batch_id, "n0", (RunResult(f"a-{batch_id}", 0, {"ok": True}, 1, 2),))


def test_answers_arriving_during_a_commit_share_the_next_and_each_gets_its_own_error():
    calls: list[list[str]] = []
    gate = threading.Event()

    def commit(batch):
        calls.append([a.entry_id for a in batch])
        if len(calls) == 1:
            gate.wait(5)            # the first commit is on its way while the others arrive
        return [ValueError("refused") if a.entry_id == "e3" else None for a in batch]

    group = AnswerGroup(commit)
    outcomes: dict[str, object] = {}

    def answer(eid: str) -> None:
        try:
            group.commit(_Answer(eid, "r", _result(eid), ()))
            outcomes[eid] = "ok"
        except ValueError as e:
            outcomes[eid] = str(e)

    first = threading.Thread(target=answer, args=("e1",))
    first.start()
    while not calls:
        time.sleep(0.001)
    others = [threading.Thread(target=answer, args=(e,)) for e in ("e2", "e3", "e4")]
    for t in others:
        t.start()
    time.sleep(0.1)
    gate.set()
    for t in [first, *others]:
        t.join(5)
    assert calls[0] == ["e1"]
    assert sorted(calls[1]) == ["e2", "e3", "e4"]       # one commit for the three that waited
    assert outcomes == {"e1": "ok", "e2": "ok", "e3": "refused", "e4": "ok"}


def test_concurrent_answers_publish_each_result_once_and_retire_each_dispatch(redis_url):
    client = connect(redis_url)
    keys = Keys("answertest_")
    channel = AgentChannel(client, keys, "n0")
    reply_to = keys.results("n0")
    client.delete(reply_to)
    for _ in range(40):
        client.xadd(channel.stream, fields(b"{}"))
    taken = channel.take(40, 100)
    assert len(taken) == 40
    threads = [threading.Thread(target=channel.answer, args=(e.id, reply_to, _result(f"b{i}")))
               for i, e in enumerate(taken)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    got = entries(client.xread({reply_to: "0"}, count=1000))
    assert sorted(decode(e.raw).batch_id for e in got) == sorted(f"b{i}" for i in range(40))
    assert client.xpending(channel.stream, AGENT_GROUP)["pending"] == 0
    assert client.xlen(channel.stream) == 0


def test_a_refused_command_fails_its_own_answer_only(redis_url):
    client = connect(redis_url)
    keys = Keys("answerfail_")
    channel = AgentChannel(client, keys, "n0")
    good, bad = keys.results("n0"), keys.results("n0") + "bad"
    client.delete(good, bad)
    client.set(bad, "not a stream")                       # XADD to it is refused inside the MULTI
    for _ in range(2):
        client.xadd(channel.stream, fields(b"{}"))
    e1, e2 = channel.take(2, 100)
    errors = channel._commit([_Answer(e1.id, good, _result("ok"), ()), _Answer(e2.id, bad, _result("no"), ())])
    assert errors[0] is None and isinstance(errors[1], redis.ResponseError)
    assert [decode(e.raw).batch_id for e in entries(client.xread({good: "0"}))] == ["ok"]


def test_every_answered_batch_stays_named_for_the_window_however_many_there_are():
    now = [100.0]
    track = BatchTrack(keep_s=3.0, clock=lambda: now[0])
    for i in range(5000):                                   # a burst: far more than one heartbeat's worth
        track.taken(f"b{i}")
        track.answered(f"b{i}")
    running, done = track.view()
    assert running == () and len(done) == 5000
    now[0] += 3.5
    track.answered("late")
    assert track.view()[1] == ("late",)


def test_a_prewarm_is_named_done_with_its_outcome_for_as_long_as_its_id_and_a_repeat_hides_nothing():
    from agent_channel.protocol import PrewarmDone

    now = [100.0]
    track = BatchTrack(keep_s=3.0, clock=lambda: now[0])
    track.taken("p1")
    track.answered("b1")
    track.answered("p2", PrewarmDone("p2", "repeated"))     # delivered again after it was done
    track.answered("p1", PrewarmDone("p1", "started", 1))
    track.answered("p2", PrewarmDone("p2", "warm"))         # what it did: not hidden by the repeat
    assert track.report() == ((), ("b1", "p2", "p1", "p2"), (PrewarmDone("p2", "warm"), PrewarmDone("p1", "started", 1)))
    now[0] += 3.5
    track.answered("b2")
    assert track.report() == ((), ("b2",), ()) and not track._outcomes, "forgotten with their ids"


def _serve_once(reply: bytes) -> int:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)

    def run():
        conn, _ = srv.accept()
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            head, _, body = data.partition(b"\r\n\r\n")
            length = int(next(line.split(b":", 1)[1] for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length:")))
            while len(body) < length:  # the whole request read: closing with bytes unread resets the connection
                body += conn.recv(65536)
            conn.sendall(reply)
        srv.close()
    threading.Thread(target=run, daemon=True).start()
    return srv.getsockname()[1]


@pytest.mark.parametrize("reply", [
    b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n{\"a\": 1234}",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"a\":\r\n6\r\n 1234}\r\n0\r\n\r\n",
    b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n{\"a\": 1234}",
    b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n{\"a\": 1234}",
])
def test_runtime_client_reads_each_reply_form(reply):
    client = RuntimeClient(f"http://127.0.0.1:{_serve_once(reply)}")
    assert client.post("/run", {"value": {}}, 5) == (200, {"a": 1234})
    client.close()


def test_runtime_client_reports_a_reply_cut_short_as_a_crash():
    port = _serve_once(b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\n{}")
    client = RuntimeClient(f"http://127.0.0.1:{port}")
    with pytest.raises(RuntimeCrashed):
        client.post("/run", {"value": {}}, 5)


def test_runtime_client_writes_each_request_in_one_send():
    """Head and body leave in one write (two would be two segments that can wake the worker twice), with
    the headers the runtimes need and no Accept-Encoding."""
    import json
    port = _serve_once(b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n{\"a\": 1234}")
    client = RuntimeClient(f"http://127.0.0.1:{port}")
    conn = client._connect(5)
    sends: list[bytes] = []
    real = conn.sock

    class Counting:
        def sendall(self, data):
            sends.append(bytes(data))
            real.sendall(data)

        def __getattr__(self, name):
            return getattr(real, name)

    conn.sock = Counting()
    assert client.post("/run", {"value": {"x": 1}}, 5) == (200, {"a": 1234})
    client.close()
    assert len(sends) == 1
    head, _, body = sends[0].partition(b"\r\n\r\n")
    assert json.loads(body) == {"value": {"x": 1}}
    lines = head.lower().split(b"\r\n")
    assert lines[0] == b"post /run http/1.1"
    assert {line.split(b":")[0] for line in lines[1:]} == {b"host", b"content-type", b"content-length"}


def _commits_gated(calls: list[list[str]], gate: threading.Event):
    def commit(batch):
        calls.append(sorted(a.entry_id for a in batch))
        if len(calls) == 1:
            gate.wait(5)            # the first commit is on its way while the others arrive
        return [None] * len(batch)
    return commit


def test_an_answer_queued_behind_a_commit_goes_when_it_is_back_though_a_queued_cohort_still_waits():
    calls: list[list[str]] = []
    gate = threading.Event()
    group = AnswerGroup(_commits_gated(calls, gate), cohort_wait_s=3.0)
    group.join(["c1", "c2"])
    done: dict[str, float] = {}
    first = _answer_at(group, "e0", done)
    while not calls:
        time.sleep(0.001)
    waiting = [_answer_at(group, "c1", done)]      # its sibling c2 runs on: it would wait 3 s
    time.sleep(0.05)
    waiting.append(_answer_at(group, "e9", done))  # alone: may go as soon as the way is free
    time.sleep(0.05)
    t0 = time.monotonic()
    gate.set()
    for t in [first, *waiting]:
        t.join(5)
    assert calls == [["e0"], ["c1", "e9"]]          # e9 took the queue, c1's answer with it
    assert done["e9"] - t0 < 1.0 and done["c1"] - t0 < 1.0
    _answer_at(group, "c2", done).join(5)
    assert calls[-1] == ["c2"] and group._cohorts == {}


def test_a_cohort_answer_queued_behind_a_commit_goes_when_its_wait_is_over_with_no_one_to_wake_it():
    calls: list[list[str]] = []
    gate = threading.Event()
    group = AnswerGroup(_commits_gated(calls, gate), cohort_wait_s=0.4)
    group.join(["c1", "c2"])
    done: dict[str, float] = {}
    first = _answer_at(group, "e0", done)
    while not calls:
        time.sleep(0.001)
    t0 = time.monotonic()
    waiting = _answer_at(group, "c1", done)        # c2 never answers
    time.sleep(0.05)
    gate.set()                                     # back before c1's wait is over: no one is woken
    first.join(5)
    waiting.join(5)
    assert calls == [["e0"], ["c1"]]
    assert 0.35 < done["c1"] - t0 < 2.0


def _answer_at(group: AnswerGroup, eid: str, done: dict) -> threading.Thread:
    def run() -> None:
        group.commit(_Answer(eid, "r", _result(eid), ()))
        done[eid] = time.monotonic()
    t = threading.Thread(target=run)
    t.start()
    return t


def test_an_answer_waits_for_a_running_sibling_of_its_own_kind_only():
    """A ResNet-50 batch read with a DenseNet-121 one is answered when it is done; one read with another
    batch of its own function and configuration waits for it (at most the cohort wait), and both go in
    one commit. A sibling not described yet counts as one of its kind."""
    calls: list[list[str]] = []
    group = AnswerGroup(lambda batch: calls.append(sorted(a.entry_id for a in batch)) or [None] * len(batch),
                        cohort_wait_s=3.0)
    done: dict[str, float] = {}
    group.join(["r", "d"])
    group.describe("r", "resnet50 b1/1c/1g.5gb")
    group.describe("d", "densenet121 b1/1c/1g.5gb")
    t0 = time.monotonic()
    _answer_at(group, "r", done).join(5)
    assert calls == [["r"]] and done["r"] - t0 < 1.0        # not 3 s: d is of another kind
    _answer_at(group, "d", done).join(5)
    assert calls[-1] == ["d"]

    calls.clear()
    group.join(["a", "b", "c"])
    group.describe("a", "resnet50 b1/1c/1g.5gb")
    group.describe("b", "resnet50 b1/1c/1g.5gb")            # c is not described yet
    first = _answer_at(group, "a", done)
    time.sleep(0.1)
    assert calls == []                                      # a waits for b (and c)
    group.settle("c")
    time.sleep(0.05)
    assert calls == []                                      # still b
    _answer_at(group, "b", done).join(5)
    first.join(5)
    assert calls == [["a", "b"]] and group._cohorts == {}
