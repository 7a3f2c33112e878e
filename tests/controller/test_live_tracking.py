"""The live service's view of the agents: heartbeats and results tracked as the emulator tracks its nodes,
so the live ESG_Dispatch takes the warm-worker pass. No broker needed: the dispatcher's heartbeat and
result handling with the core scheduler on top."""

from __future__ import annotations

from agent_channel import protocol
from agent_channel.protocol import BatchResult, Heartbeat, IdleWorkers
from controller_plugin.dispatcher import Dispatcher
from controller_plugin.health import AgentRegistry
from controller_plugin.metrics import Metrics
from controller_plugin.workflows import Send
from esg.cluster import Slice, SliceRef
from esg.events import Arrival, BatchDone, Request
from esg.model import App, Config
from esg.policies import PolicyContext, make_policy
from esg.scheduler import Scheduler
from tests.core.helpers import profile

APP = App("one", 100.0, ("f",), ())
ROWS = [(1, 1, "1g.5gb", 10.0), (1, 1, "3g.20gb", 6.0)]
THREE = SliceRef("3g.20gb", 4)


def scheduler() -> Scheduler:
    prof = profile("f", ROWS, cold_start_ms=3000.0)
    return Scheduler({"one": APP}, make_policy("esg", PolicyContext({"one": APP}, {"f": prof})),
                     batch_ids=(f"inc-{i}" for i in range(1000)))


def dispatcher() -> Dispatcher:
    ids: dict[str, int] = {}
    return Dispatcher(None, AgentRegistry(lambda n: ids.setdefault(n, len(ids)), {}, 5.0), "inc", Metrics())


def beat(node: str, seq: int, idle=(), busy=False, running=(), done=()) -> Heartbeat:
    return Heartbeat(node, 16, 16, 4096, "A100-40GB", (Slice(THREE, busy, "MIG-1"),) if node == "n0" else (),
                     (), False, seq, 0, tuple(idle), tuple(running), tuple(done))


def send(disp: Dispatcher, d) -> None:
    disp.sent([Send(d, None)], [b"1-0"])


def test_a_reported_warm_worker_is_taken_then_held_until_a_report_or_result_frees_it():
    disp, s = dispatcher(), scheduler()
    disp.heartbeat(beat("n0", 1, [IdleWorkers("f", 2, THREE, 1)]), 0.0)
    disp.heartbeat(beat("n1", 1), 0.0)
    snap = disp.snapshot()
    assert snap.tracks_workers and snap.nodes_with_warm("f") == {"n0"}
    (d,) = s.step(0.0, snap, [Arrival(Request("r0", "one", 0.0))]).dispatches
    assert (d.node, d.fit.slice, d.fit.warm_worker) == ("n0", THREE, ("f", THREE)) and not d.fit.reconfigures
    send(disp, d)
    # the next heartbeat was written before the agent took the batch: the claim stays on the view
    disp.heartbeat(beat("n0", 2, [IdleWorkers("f", 2, THREE, 1)]), 0.5)
    snap = disp.snapshot()
    assert snap.nodes_with_warm("f") == set() and snap.layout("n0") == (("3g.20gb", 4, True),)
    # a second request meanwhile waits for that worker rather than start a second one cold
    out = s.step(1.0, snap, [Arrival(Request("r1", "one", 1.0))])
    assert out.dispatches == []
    # a heartbeat shows it running, then its result comes before the next heartbeat: idle again at once
    disp.heartbeat(beat("n0", 3, [], busy=True, running=[d.batch_id]), 1.0)
    assert disp.snapshot().nodes_with_warm("f") == set()
    assert disp.complete(BatchResult(d.batch_id, "n0", (), None, "f", d.config, 6.0, cold=False)) == d
    snap = disp.snapshot()
    assert snap.nodes_with_warm("f") == {"n0"} and snap.layout("n0") == (("3g.20gb", 4, False),)
    (again,) = s.step(1.1, snap, [BatchDone(d.batch_id)]).dispatches
    assert again.fit.warm_worker == ("f", THREE)
    # a heartbeat that names it answered supersedes the kept result
    disp.heartbeat(beat("n0", 4, [IdleWorkers("f", 1, THREE, 1)], done=[d.batch_id]), 1.2)
    assert d.batch_id not in disp.finished


def test_a_result_that_says_the_view_was_stale_is_counted():
    disp, s = dispatcher(), scheduler()
    disp.heartbeat(beat("n0", 1, [IdleWorkers("f", 2, THREE, 1)]), 0.0)
    (d,) = s.step(0.0, disp.snapshot(), [Arrival(Request("r0", "one", 0.0))]).dispatches
    send(disp, d)
    disp.complete(protocol.BatchResult(d.batch_id, "n0", (), None, "f", Config(1, 1, "3g.20gb"), 6.0,
                                         cold=True, reconfigured=0))
    assert disp.stale_starts == 1
