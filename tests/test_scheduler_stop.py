"""A stop request bounds how long the scheduler takes to stop: it exits anyway after a grace period (a
client library waiting on a broker that died with it must not leave an orphan)."""

from __future__ import annotations

import threading
import time

from esg_cli.scheduler import stop_within


def test_a_stop_request_stops_at_once_and_exits_after_the_grace():
    stopped, exited = threading.Event(), threading.Event()
    request = stop_within(stopped.set, 0.2, exited.set)
    t0 = time.monotonic()
    request()
    assert stopped.is_set()
    assert not exited.is_set()                      # the clean stop has its grace period
    assert exited.wait(5)
    assert time.monotonic() - t0 >= 0.2
