"""SLO admission control: a request no plan can meet is answered at once and reported as rejected."""

from __future__ import annotations

import dataclasses

from esg.admission import REJECTED, fastest_path_ms
from esg.events import Arrival, BatchDone, Request
from esg.model import App
from esg.policies import PolicyContext, make_policy
from esg.scheduler import Scheduler

from .helpers import nodes, profile

# a -> (b, c) -> d; fastest runs: a 4, b 4, c 6, d 4 (the 4-vCPU rows), so the fastest path is 4 + 6 + 4
DIAMOND = App("diamond", 100.0, ("a", "b", "c", "d"), (("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")))
ROWS = {"a": [(1, 1, None, 10.0), (1, 4, None, 4.0)], "b": [(1, 1, None, 10.0), (1, 4, None, 4.0)],
        "c": [(1, 1, None, 12.0), (1, 4, None, 6.0)], "d": [(1, 1, None, 10.0), (1, 4, None, 4.0)]}


def make(slo: float, overhead: float = 0.0, admission: bool = True) -> Scheduler:
    app = dataclasses.replace(DIAMOND, slo_ms=slo)
    profiles = {f: profile(f, rows) for f, rows in ROWS.items()}
    ctx = PolicyContext({app.name: app}, profiles, stage_overhead_ms=overhead)
    return Scheduler({app.name: app}, make_policy("esg", ctx), admission_control=admission)


def test_fastest_path_is_the_longest_branch_at_the_fastest_configurations_plus_one_overhead_per_stage():
    profiles = {f: profile(f, rows) for f, rows in ROWS.items()}
    assert fastest_path_ms(DIAMOND, profiles, lambda f, c: True, 0.0) == 14.0  # a 4 + c 6 + d 4
    assert fastest_path_ms(DIAMOND, profiles, lambda f, c: True, 2.0) == 20.0  # three stages on that path
    # a function limited to 1 vCPU (an esg-max-batch/esg-gpu-like limit) runs at its allowed fastest
    assert fastest_path_ms(DIAMOND, profiles, lambda f, c: f != "c" or c.vcpus == 1, 0.0) == 20.0


def test_a_request_that_can_meet_its_slo_is_admitted_and_run():
    s = make(slo=14.0)
    out = s.step(0.0, nodes(1), [Arrival(Request("r0", "diamond", 0.0))])
    assert not out.outcomes
    assert [d.function for d in out.dispatches] == ["a"]


def test_a_request_no_plan_can_meet_is_rejected_at_once_and_never_runs():
    s = make(slo=13.9)
    out = s.step(0.0, nodes(1), [Arrival(Request("r0", "diamond", 0.0))])
    assert not out.dispatches
    (o,) = out.outcomes
    assert (o.request_id, o.ok, o.rejected, o.slo_hit, o.finished_ms) == ("r0", False, True, False, 0.0)
    assert o.error.startswith(REJECTED) and "14.0 ms" in o.error and "13.9 ms" in o.error
    assert s.pending_requests() == 0 and not any(s.queue_lengths().values())


def test_a_rejected_request_delivered_again_is_not_answered_again():
    s = make(slo=13.9)
    first = s.step(0.0, nodes(1), [Arrival(Request("r0", "diamond", 0.0))])
    again = s.step(1.0, nodes(1), [Arrival(Request("r0", "diamond", 0.0))])
    assert [o.rejected for o in first.outcomes] == [True]
    assert not again.outcomes and not again.dispatches


def test_the_overhead_per_stage_counts_and_time_already_spent_counts():
    assert make(slo=20.0, overhead=2.0).step(0.0, nodes(1), [Arrival(Request("r", "diamond", 0.0))]).dispatches
    assert make(slo=19.9, overhead=2.0).step(0.0, nodes(1), [Arrival(Request("r", "diamond", 0.0))]).outcomes
    # the request reached the scheduler 1 ms after it arrived (the live path's accept): 13 ms are left
    late = make(slo=14.0).step(1.0, nodes(1), [Arrival(Request("r", "diamond", 0.0))])
    assert late.outcomes[0].rejected and not late.dispatches


def test_off_by_default_the_same_request_runs_late():
    s = make(slo=13.9, admission=False)
    out = s.step(0.0, nodes(1), [Arrival(Request("r0", "diamond", 0.0))])
    assert not out.outcomes and out.dispatches
    d = out.dispatches[0]
    done = s.step(20.0, nodes(1), [BatchDone(d.batch_id)])
    assert done.dispatches  # its successors run
