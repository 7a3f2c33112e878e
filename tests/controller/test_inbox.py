"""The main loop's inbox: a poll's or a read's messages come apart in order; after a turn of a burst the
next take gathers what follows for a moment (fewer, larger turns), and at a trickle it never waits."""

from __future__ import annotations

import threading
import time

import pytest

from controller_plugin import inbox as inbox_module
from controller_plugin.activations import Polled
from controller_plugin.dispatcher import Delivered
from controller_plugin.inbox import Inbox


@pytest.fixture
def slow_gather(monkeypatch):
    """Gathering long enough to measure on a busy machine."""
    monkeypatch.setattr(inbox_module, "GATHER_S", 0.4)
    monkeypatch.setattr(inbox_module, "HOT_S", 5.0)


def put_later(box: Inbox, item: object, after_s: float) -> threading.Thread:
    t = threading.Thread(target=lambda: (time.sleep(after_s), box.put(item)), daemon=True)
    t.start()
    return t


def test_polls_and_reads_come_apart_in_order():
    box = Inbox()
    box.put(Polled(("a1", "a2")))
    box.put("x")
    box.put(Delivered(("r1", "r2", "r3")))
    assert box.take(0.1, 100) == ["a1", "a2", "x", "r1", "r2", "r3"]
    assert box.take(0.0, 100) == [] and box.takes == 1


def test_after_a_burst_turn_the_next_take_gathers_what_follows(slow_gather):
    box = Inbox()
    box.put(Polled(tuple(f"a{i}" for i in range(inbox_module.GATHER_MIN))))
    assert len(box.take(0.1, 100)) == inbox_module.GATHER_MIN
    box.put("r1")
    later = put_later(box, "r2", 0.1)
    t0 = time.monotonic()
    assert box.take(0.1, 100) == ["r1", "r2"]
    assert 0.09 <= time.monotonic() - t0
    later.join()


def test_at_a_trickle_a_take_never_waits_for_more(slow_gather):
    box = Inbox()
    box.put(Polled(("a1",)))
    assert box.take(0.1, 100) == ["a1"]                 # a turn of one: the next does not gather
    box.put("r1")
    later = put_later(box, "r2", 0.2)
    t0 = time.monotonic()
    assert box.take(0.1, 100) == ["r1"]
    assert time.monotonic() - t0 < 0.15
    later.join()
    assert box.take(0.1, 100) == ["r2"]


def test_a_gathering_take_stops_at_the_limit(slow_gather):
    box = Inbox()
    box.put(Polled(tuple(range(10))))
    assert len(box.take(0.1, 100)) == 10
    box.put(Polled(tuple(range(10))))
    t0 = time.monotonic()
    assert len(box.take(0.1, 5)) == 10                  # a whole poll, then no more waiting
    assert time.monotonic() - t0 < 0.3
