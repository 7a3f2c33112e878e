"""The main loop's inbox: a poll's or a read's messages come apart in order, a turn takes what is there
and never waits for more once it has something."""

from __future__ import annotations

import threading
import time

from controller_plugin.activations import Polled
from controller_plugin.dispatcher import Delivered, ReadMark
from controller_plugin.inbox import Inbox


def test_polls_and_reads_come_apart_in_order():
    box = Inbox()
    box.put(Polled(("a1", "a2")))
    box.put("x")
    box.put(Delivered(("r1", "r2", "r3"), 5.0, True, {"n": "1-0"}))
    # a read's messages come after a mark of when it started (silent agents are measured against it)
    assert box.take(0.1, 100) == ["a1", "a2", "x", ReadMark(5.0, True, {"n": "1-0"}), "r1", "r2", "r3"]
    assert box.take(0.0, 100) == []


def test_a_take_stops_at_the_limit_without_splitting_a_poll():
    box = Inbox()
    box.put(Polled(tuple(range(4))))
    box.put(Polled(tuple(range(4, 8))))
    box.put("x")
    assert box.take(0.1, 5) == list(range(8))
    assert box.take(0.1, 5) == ["x"]


def test_a_take_never_waits_for_more_once_it_has_something():
    box = Inbox()
    box.put(Polled(tuple(range(10))))
    later = threading.Thread(target=lambda: (time.sleep(0.3), box.put("late")), daemon=True)
    later.start()
    t0 = time.monotonic()
    assert box.take(1.0, 100) == list(range(10))
    assert time.monotonic() - t0 < 0.2
    later.join()
    assert box.take(1.0, 100) == ["late"]
