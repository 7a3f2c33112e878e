"""The worked example of ``docs/adding-a-policy.md``: a new ESG rule written against the plugin interface
and composed with ESG, in this one file.

The rule: keep a function's workers warm for twice the gap between its last two batches (none seen yet:
the driver's default), at least ``floor_ms`` -- a keep-alive that follows the function's own rhythm.
"""

from __future__ import annotations

import pytest

from esg.events import Arrival, Dispatch, Request
from esg.model import App
from esg.policies import PolicyContext
from esg.policies.esg_policy import ESG_RULES, esg_policy
from esg.policies.rules.shared import EsgParts
from esg.scheduler import Scheduler

from .helpers import nodes, profile


# -- the rule ------------------------------------------------------------------------------------------
class KeepForTwoGaps:
    """ESG rule (KeepAlive, OnDispatch): a batch's worker stays warm twice the gap since the function's
    previous batch, at least ``floor_ms``."""

    def __init__(self, parts: EsgParts, floor_ms: float = 50.0):
        self.floor_ms = floor_ms
        self._last: dict[str, float] = {}  # function -> when its last batch was dispatched
        self._now: dict[str, float] = {}   # function -> when the batch being dispatched was asked for

    def keep_alive_ms(self, app: str, function: str, now_ms: float) -> float | None:
        self._now[function] = now_ms
        last = self._last.get(function)
        return None if last is None else max(self.floor_ms, 2.0 * (now_ms - last))

    def on_dispatch(self, dispatch: Dispatch) -> None:
        self._last[dispatch.function] = self._now.get(dispatch.function, 0.0)


# -- its tests -----------------------------------------------------------------------------------------
APP = App("one", 100.0, ("f",), ())


def scheduler(*rules) -> Scheduler:
    ctx = PolicyContext({"one": APP}, {"f": profile("f", [(1, 1, None, 10.0)])})
    return Scheduler({"one": APP}, esg_policy(ctx, [*ESG_RULES, *rules]))


def keep_alives(s: Scheduler, times: list[float]) -> list[float | None]:
    snap = nodes(1)
    return [d.keep_alive_ms for i, t in enumerate(times)
            for d in s.step(t, snap, [Arrival(Request(f"r{i}", "one", t))]).dispatches]


def test_a_worker_is_kept_twice_the_gap_since_the_functions_last_batch():
    got = keep_alives(scheduler(KeepForTwoGaps), [0.0, 300.0, 310.0])
    assert got == [None, pytest.approx(600.0), pytest.approx(50.0)], "none seen, 2 x 300 ms, the floor"


def test_without_the_rule_esg_keeps_the_drivers_default():
    assert keep_alives(scheduler(), [0.0, 300.0, 310.0]) == [None, None, None]


def test_the_rule_adds_a_keep_alive_and_leaves_esgs_other_decisions_alone():
    with_rule, without = scheduler(KeepForTwoGaps), scheduler()
    snap_a, snap_b = nodes(2), nodes(2)
    for i, t in enumerate([0.0, 5.0, 40.0, 41.0]):
        events = [Arrival(Request(f"r{i}", "one", t))]
        a, b = with_rule.step(t, snap_a, events), without.step(t, snap_b, events)
        assert [(d.node, d.config) for d in a.dispatches] == [(d.node, d.config) for d in b.dispatches]
