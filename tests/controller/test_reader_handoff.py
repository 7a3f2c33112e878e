"""A poll of N messages costs the reader one hand-off to the main loop and one ledger round trip, and
the results and heartbeats of one channel read are handed on as one inbox item, in order. No broker or
Redis: the reader's poll body is driven with stand-in records and a counting ledger."""

from __future__ import annotations

import json
import queue
import threading

from agent_channel import protocol
from agent_channel.streams import Entry
from controller_plugin.activations import Accepted, ActivationReader, HealthTest, Ledgered, Polled
from controller_plugin.bus import Topics
from controller_plugin.dispatcher import Delivered, Dispatcher

PREFIX = "t_"


def activation(aid: str, health: bool = False) -> bytes:
    action = ({"path": "whisk.system", "name": "invokerHealthTestAction0"} if health
              else {"path": "guest", "name": "hello"})
    return json.dumps({
        "transid": [f"tid-{aid}", 1718003021457], "action": action, "revision": None,
        "user": {"subject": "guest", "namespace": {"name": "guest", "uuid": "u"},
                 "authkey": {"api_key": "u:k"}, "rights": [], "limits": {}},
        "activationId": aid, "rootControllerIndex": {"asString": "0", "instanceType": "controller"},
        "blocking": True, "content": {"i": aid}, "initArgs": [], "lockedArgs": {}}).encode()


class Record:
    """What the reader asks of a librdkafka message."""

    def __init__(self, topic: str, offset: int, value: bytes) -> None:
        self._topic, self._offset, self._value = topic, offset, value

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self._offset

    def value(self) -> bytes:
        return self._value


class CountingLedger:
    def __init__(self, known: set[str]) -> None:
        self.calls: list[list[str]] = []
        self.known = known

    def accept(self, entries, owner=""):
        self.calls.append([e[0] for e in entries])
        return [e[0] not in self.known for e in entries]


class DeadLetters:
    def __init__(self) -> None:
        self.put_calls: list[tuple] = []

    def put(self, raw, reason, source, position) -> None:
        self.put_calls.append((raw, reason, source, position))

    def flush(self) -> None:
        pass


class PlainReader(ActivationReader):
    def accepted(self, msg, entry, known_new=False) -> Accepted:
        return Accepted(msg, entry, known_new=known_new)


def test_a_poll_of_n_messages_is_one_inbox_item_and_one_ledger_round_trip():
    topics = Topics(PREFIX, "0")
    inbox: queue.Queue = queue.Queue()
    ids = [f"{i:032x}" for i in range(1, 41)]
    ledger = CountingLedger(known={ids[3]})
    dead = DeadLetters()
    reader = PlainReader(None, topics, ledger, None, dead, inbox, "g", 1, "inc-1")
    values = [activation(a) for a in ids]
    values.insert(7, b"not json")
    values.insert(20, activation(f"{999:032x}", health=True))
    records = [Record(topics.invoker(0), off, v) for off, v in enumerate(values)]

    fresh = reader._take(records)
    assert reader._ledger(fresh, threading.Event())

    items = []
    while not inbox.empty():
        items.append(inbox.get_nowait())
    assert [type(i) for i in items] == [Polled, Ledgered]
    polled, verdict = items
    assert [type(x) for x in polled.items] == [Accepted] * 19 + [HealthTest] + [Accepted] * 21
    assert [x.msg.activation_id for x in polled.items if isinstance(x, Accepted)] == ids
    assert ledger.calls == [ids]                       # one round trip for the poll, in order
    assert verdict.known == (ids[3],) and list(verdict.new) == ids[:3] + ids[4:]
    assert len(dead.put_calls) == 1 and dead.put_calls[0][3] == 7


class OneRead:
    """A channel whose first read returns ``got``; later reads stop the loop."""

    def __init__(self, got: list[Entry], stop: threading.Event) -> None:
        self.got, self.stop = got, stop

    def read(self, block_ms: int) -> list[Entry]:
        if self.got:
            got, self.got = self.got, []
            return got
        self.stop.set()
        return []


def test_one_channel_read_is_one_inbox_item_in_order():
    results = [protocol.BatchResult(batch_id=f"inc-{i}", node="n1", results=()) for i in range(5)]
    hb = protocol.Heartbeat(node="n1", vcpus_total=8, vcpus_free=8, memory_mb=1024, gpu_model=None)
    raws = [protocol.encode(m) for m in results[:2]] + [protocol.encode(hb), b"{bad"] + \
        [protocol.encode(m) for m in results[2:]]
    stop = threading.Event()
    entries = [Entry("s", f"1-{i}", raw) for i, raw in enumerate(raws)]
    dispatcher = Dispatcher.__new__(Dispatcher)
    dispatcher.channel = OneRead(entries, stop)
    delivered: list[object] = []
    dead = DeadLetters()
    dispatcher.read_loop(stop, delivered.append, dead)
    assert len(delivered) == 1 and isinstance(delivered[0], Delivered)
    got = delivered[0].messages
    assert [type(m).__name__ for m in got] == ["BatchResult"] * 2 + ["Heartbeat"] + ["BatchResult"] * 3
    assert [m.batch_id for m in got if isinstance(m, protocol.BatchResult)] == [r.batch_id for r in results]
    assert len(dead.put_calls) == 1 and dead.put_calls[0][3] == "1-3"
