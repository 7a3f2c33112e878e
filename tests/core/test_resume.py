"""Resuming a request another scheduler had started (a new leader taking over): what ran is not run again,
what runs is awaited, and the rest of the DAG goes on as if this scheduler had done the start itself."""

from __future__ import annotations

from esg.cluster import Fit
from esg.events import Arrival, BatchDone, Dispatch, Request, Resume
from esg.model import App, Config, Job
from esg.policies import PolicyContext, make_policy
from esg.scheduler import Scheduler

from .helpers import nodes, profile

DIAMOND = App("d", 1000.0, ("a", "b", "c", "e"), (("a", "b"), ("a", "c"), ("b", "e"), ("c", "e")))
ROWS = [(1, 1, None, 10.0), (2, 1, None, 12.0)]


def make(app: App = DIAMOND) -> Scheduler:
    profiles = {f: profile(f, ROWS) for f in app.functions}
    return Scheduler({app.name: app}, make_policy("esg", PolicyContext({app.name: app}, profiles)))


def running(request: str, function: str, batch_id: str = "old-1") -> Dispatch:
    job = Job(f"{request}/{function}", request, "d", function, 0.0, 1000.0, 0.0)
    return Dispatch(batch_id, "d", function, (job,), Config(1, 1, None), Fit("n0"))


def functions(out) -> list[str]:
    return sorted(d.function for d in out.dispatches)


def test_nothing_done_and_nothing_running_is_an_arrival():
    resumed, fresh = make(), make()
    a = resumed.step(5.0, nodes(1), [Resume(Request("r", "d", 0.0))])
    b = fresh.step(5.0, nodes(1), [Arrival(Request("r", "d", 0.0))])
    assert functions(a) == functions(b) == ["a"]


def test_finished_functions_are_not_run_again_and_a_running_one_is_awaited():
    s = make()
    b_running = running("r", "b")
    out = s.step(5.0, nodes(1), [Resume(Request("r", "d", 0.0), done=(("a", "n0"),), running=(b_running,))])
    assert functions(out) == ["c"]                              # a ran, b runs: only c is left to start
    assert s.step(6.0, nodes(1), [BatchDone(out.dispatches[0].batch_id)]).dispatches == []   # e waits for b
    after = s.step(7.0, nodes(1), [BatchDone("old-1")])         # the adopted batch's result comes back
    assert functions(after) == ["e"]
    done = s.step(8.0, nodes(1), [BatchDone(after.dispatches[0].batch_id)])
    assert [(o.request_id, o.ok) for o in done.outcomes] == [("r", True)]


def test_a_request_whose_sinks_all_ran_ends_at_once():
    s = make()
    out = s.step(5.0, nodes(1), [Resume(Request("r", "d", 0.0), done=tuple((f, "n0") for f in DIAMOND.functions))])
    assert out.dispatches == [] and [(o.request_id, o.ok) for o in out.outcomes] == [("r", True)]


def test_a_batch_shared_by_two_resumed_requests_is_awaited_once():
    s = make()
    jobs = tuple(Job(f"{r}/a", r, "d", "a", 0.0, 1000.0, 0.0) for r in ("r1", "r2"))
    shared = Dispatch("old-2", "d", "a", jobs, Config(2, 1, None), Fit("n0"))
    out = s.step(5.0, nodes(1), [Resume(Request(r, "d", 0.0), running=(shared,)) for r in ("r1", "r2")])
    assert out.dispatches == []
    after = s.step(6.0, nodes(1), [BatchDone("old-2")])
    assert sorted(j.job_id for d in after.dispatches for j in d.jobs) == ["r1/b", "r1/c", "r2/b", "r2/c"]
