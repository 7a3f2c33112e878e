"""A poll of N messages costs the reader one hand-off to the main loop and one ledger round trip, and
the results and heartbeats of one channel read are handed on as one inbox item, in order. No broker or
Redis: the reader's poll body is driven with stand-in records and a counting ledger."""

from __future__ import annotations

import json
import queue
import threading

from agent_channel import protocol
from agent_channel.keys import Keys
from agent_channel.streams import Entry
from controller_plugin.activations import Accepted, ActivationReader, HealthTest, Polled
from controller_plugin.bus import Topics
from controller_plugin.channel import Read, SchedulerChannel
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
    def accepted(self, msg, entry) -> Accepted:
        return Accepted(msg, entry)


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

    fresh, polled = reader._take(records)
    assert inbox.empty()                               # nothing goes to the main loop before the ledger took it
    new = reader._ledger(fresh, threading.Event())
    reader._hand_on(polled, new)

    items = []
    while not inbox.empty():
        items.append(inbox.get_nowait())
    assert [type(i) for i in items] == [Polled]
    (polled,) = items
    # the redelivered one (ids[3], known to the ledger) never reaches the main loop: it cannot run twice
    assert [type(x) for x in polled.items] == [Accepted] * 18 + [HealthTest] + [Accepted] * 21
    assert [x.msg.activation_id for x in polled.items if isinstance(x, Accepted)] == ids[:3] + ids[4:]
    assert ledger.calls == [ids]                       # one round trip for the poll, in order
    assert len(dead.put_calls) == 1 and dead.put_calls[0][3] == 7


class OneRead(SchedulerChannel):
    """A channel whose first read returns ``got``; later reads stop the loop."""

    def __init__(self, got: list[Entry], stop: threading.Event) -> None:
        super().__init__(None, Keys())
        self.got, self.stop = got, stop

    def read(self, block_ms: int) -> Read:
        if self.got:
            got, self.got = self.got, []
            return Read(tuple(got), 1.0, True)
        self.stop.set()
        return Read((), 2.0, True)


def test_one_channel_read_is_one_inbox_item_in_order():
    results = [protocol.BatchResult(batch_id=f"inc-{i}", node="n1", results=()) for i in range(5)]
    hb = protocol.Heartbeat(node="n1", vcpus_total=8, vcpus_free=8, memory_mb=1024, gpu_model=None)
    raws = [protocol.encode(m) for m in results[:2]] + [protocol.encode(hb), b"{bad"] + \
        [protocol.encode(m) for m in results[2:]]
    stop = threading.Event()
    keys = Keys()
    streams = [keys.results("n1")] * 2 + [keys.heartbeats("n1"), keys.results("n1")] + [keys.results("n1")] * 3
    entries = [Entry(s, f"1-{i}", raw) for i, (s, raw) in enumerate(zip(streams, raws))]
    dispatcher = Dispatcher.__new__(Dispatcher)
    dispatcher.channel = OneRead(entries, stop)
    dispatcher._read_results = {}
    delivered: list[object] = []
    dead = DeadLetters()
    dispatcher.read_loop(stop, delivered.append, dead)
    assert len(delivered) == 1 and isinstance(delivered[0], Delivered)
    got = delivered[0].messages
    assert [type(m).__name__ for m in got] == ["BatchResult"] * 2 + ["Heartbeat"] + ["BatchResult"] * 3
    assert [m.batch_id for m in got if isinstance(m, protocol.BatchResult)] == [r.batch_id for r in results]
    assert len(dead.put_calls) == 1 and dead.put_calls[0][3] == "1-3"
    assert delivered[0].started_s == 1.0 and delivered[0].results_at == {"n1": "1-6"}


def test_a_message_is_believed_only_from_its_own_nodes_stream():
    """A heartbeat or a result naming another node than the stream it is in was forged (only that node's
    Redis user can write its streams): set aside, never handed to the main loop."""
    keys = Keys()
    forged = [Entry(keys.heartbeats("n1"), "1-0", protocol.encode(protocol.Heartbeat("n2", 8, 8, 1024, None))),
              Entry(keys.results("n1"), "1-1", protocol.encode(protocol.BatchResult("inc-0", "n2", ()))),
              Entry(keys.results("n1"), "1-2", protocol.encode(protocol.Heartbeat("n1", 8, 8, 1024, None)))]
    good = Entry(keys.heartbeats("n1"), "1-3", protocol.encode(protocol.Heartbeat("n1", 8, 8, 1024, None)))
    stop = threading.Event()
    dispatcher = Dispatcher.__new__(Dispatcher)
    dispatcher.channel = OneRead([*forged, good], stop)
    dispatcher._read_results = {}
    delivered: list[object] = []
    dead = DeadLetters()
    dispatcher.read_loop(stop, delivered.append, dead)
    assert [m.node for m in delivered[0].messages] == ["n1"] and isinstance(delivered[0].messages[0],
                                                                            protocol.Heartbeat)
    assert len(dead.put_calls) == 3 and dispatcher.channel.forged == 3
