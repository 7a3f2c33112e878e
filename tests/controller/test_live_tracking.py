"""The live service's view of the agents: heartbeats and results tracked as the emulator tracks its nodes,
so the live ESG_Dispatch takes the warm-worker pass. No broker needed: the dispatcher's heartbeat and
result handling with the core scheduler on top."""

from __future__ import annotations

import math

from hypothesis import example, given, settings
from hypothesis import strategies as st

from agent_channel import protocol
from agent_channel.keys import Keys
from agent_channel.protocol import BatchResult, Heartbeat, IdleWorkers
from controller_plugin.dispatcher import Dispatcher
from controller_plugin.health import AgentRegistry
from controller_plugin.metrics import Metrics
from controller_plugin.workflows import PrewarmSend, Send
from esg.cluster import NodeReport, Slice, SliceRef, tracked
from esg.emulator.nodes import NodeModel
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


def test_a_prewarm_holds_its_slice_and_vcpus_on_the_view_until_a_heartbeat_names_it_done():
    from controller_plugin.workflows import PrewarmSend
    from esg.cluster import Fit
    from esg.events import Prewarm

    disp = dispatcher()
    disp.heartbeat(beat("n0", 1), 0.0)
    p = Prewarm("inc-p0", "one", "f", Config(1, 2, "3g.20gb"), Fit("n0", THREE), 30000.0)
    disp.prewarmed([PrewarmSend(p, None)], 0.0)
    assert disp.prewarms == 1 and disp.metrics.registry.get_sample_value("esg_prewarms_total") == 1.0
    snap = disp.snapshot()
    assert snap.layout("n0") == (("3g.20gb", 4, True),) and snap.nodes["n0"].vcpus_free == 14
    assert snap.nodes_with_warm("f") == set()
    # the agent is starting it: still held
    disp.heartbeat(beat("n0", 2, busy=True, running=["inc-p0"]), 0.5)
    assert disp.snapshot().layout("n0") == (("3g.20gb", 4, True),)
    # done: the report's idle worker is the pre-warmed one, and the next batch of f takes it warm
    disp.heartbeat(beat("n0", 3, [IdleWorkers("f", 2, THREE, 1)], done=["inc-p0"]), 1.0)
    snap = disp.snapshot()
    assert disp.prewarming == {} and snap.nodes["n0"].vcpus_free == 16
    assert snap.layout("n0") == (("3g.20gb", 4, False),) and snap.nodes_with_warm("f") == {"n0"}
    (d,) = scheduler().step(1.0, snap, [Arrival(Request("r0", "one", 1.0))]).dispatches
    assert d.fit.warm_worker == ("f", THREE) and not d.fit.reconfigures


def test_a_prewarm_no_heartbeat_reports_is_dropped_after_a_while_and_with_its_agent():
    from controller_plugin.channel import SchedulerChannel
    from controller_plugin.dispatcher import PREWARM_KEEP_S
    from controller_plugin.workflows import PrewarmSend
    from esg.cluster import Fit
    from esg.events import Prewarm

    disp = dispatcher()
    disp.heartbeat(beat("n0", 1), 0.0)
    disp.heartbeat(beat("n1", 1), 0.0)
    disp.prewarmed([PrewarmSend(Prewarm("inc-p0", "one", "f", Config(1, 1, None), Fit("n1"), 1000.0), None),
                    PrewarmSend(Prewarm("inc-p1", "one", "f", Config(1, 1, None), Fit("n0"), 1000.0), None)], 0.0)
    disp.heartbeat(beat("n0", 2), 1.0)
    assert set(disp.prewarming) == {"inc-p0", "inc-p1"}
    disp.heartbeat(beat("n0", 3), PREWARM_KEEP_S + 1)
    assert disp.prewarming == {}
    disp.prewarmed([PrewarmSend(Prewarm("inc-p2", "one", "f", Config(1, 1, None), Fit("n1"), 1000.0), None)],
                   PREWARM_KEEP_S + 1)
    disp.channel = SchedulerChannel(None, Keys())           # nothing to take back: no batch was on n1
    disp.heartbeat(beat("n0", 4), PREWARM_KEEP_S + 10)     # n1 silent past the agent timeout
    assert [lost.agent.node for lost in disp.expire(PREWARM_KEEP_S + 10)] == ["n1"] and disp.prewarming == {}


def test_a_step_is_due_at_the_time_the_last_one_asked_to_be_woken_at_with_no_job_queued():
    from controller_plugin.workflows import Workflows

    w = Workflows(scheduler(), Keys().results, Metrics(), 5.0)
    assert not w.busy(1000)
    w.wake_at_ms = 2000.0            # e.g. a policy's next pre-warming window
    assert not w.busy(1999) and w.busy(2000) and not w.busy()


def test_a_worker_turning_warm_makes_the_next_turn_step_with_nothing_queued():
    """As the emulator steps at every pre-warmed worker that turns warm (a policy may act on it: ESG's
    pool rule starts its next spare worker then), the service's next turn steps once a heartbeat names a
    pre-warm done, though no request arrived; once only."""
    from controller_plugin.workflows import Workflows

    w = Workflows(scheduler(), Keys().results, Metrics(), 5.0)
    assert not w.busy(1000)
    w.poke()
    assert w.busy(1000)
    w.step(1000, dispatcher().snapshot())
    assert not w.busy(1001)


def test_a_prewarm_with_no_keep_alive_of_its_policy_leaves_it_to_the_agent_and_says_when_it_was_sent():
    """No policy keep-alive: the message carries none (the agent's --idle-ttl-s applies, not 10 minutes
    of the controller's), and the time it was sent (an agent reading it too late drops it)."""
    from types import SimpleNamespace

    from controller_plugin.workflows import Workflows
    from esg.cluster import Fit
    from esg.events import Prewarm
    w = Workflows(scheduler(), Keys().results, Metrics(), 5.0)
    meta = SimpleNamespace(path="guest", name="f", version="0.0.1", kind="python:3", timeout_ms=60000, memory_mb=256)
    app = App("one", 1000.0, ("f",), ())
    w._registered["one"] = SimpleNamespace(app=app, functions={"f": SimpleNamespace(action=meta)})
    w._callers["one"] = ("u:k", None, "guest")
    m = w._prewarm_message(Prewarm("inc-p0", "one", "f", Config(1, 1, None), Fit("n0"), None), 5_000)
    assert m is not None and m.keep_alive_ms is None and m.sent_ms == 5_000
    kept = w._prewarm_message(Prewarm("inc-p1", "one", "f", Config(1, 1, None), Fit("n0"), 1500.2), 5_000)
    assert kept is not None and kept.keep_alive_ms == 1501


def test_a_dispatch_message_names_the_idle_workers_its_placement_stops_first():
    """A placement that stops idle workers on its slice for the batch's new worker (``Fit.evict``, for
    the GPU memory they hold) sends them in its message; one that stops none sends none."""
    from types import SimpleNamespace

    from controller_plugin.workflows import Workflows
    from esg.cluster import Fit
    from esg.events import Dispatch
    from esg.model import Job
    w = Workflows(scheduler(), Keys().results, Metrics(), 5.0)
    meta = SimpleNamespace(path="guest", name="f", version="0.0.1", kind="python:3", timeout_ms=60000, memory_mb=256)
    app = App("one", 1000.0, ("f",), ())
    plan = SimpleNamespace(app=app, functions={"f": SimpleNamespace(action=meta)}, action=meta)
    msg = SimpleNamespace(user=SimpleNamespace(basic_auth="u:k", namespace="guest"), transid=("tx", 4_000))
    w.runs["r0"] = SimpleNamespace(plan=plan, msg=msg, activation_id="a" * 32, init_env=None,
                                   inputs_for=lambda function: ({"x": 1}, ()))
    job = Job("r0/f", "r0", "one", "f", 4_000.0, 5_000.0, 4_000.0)
    three = SliceRef("3g.20gb", 4)
    evicting = Dispatch("b0", "one", "f", (job,), Config(1, 1, "3g.20gb"),
                        Fit("n0", three, evict=(("g", 2), ("h", 1))))
    m = w._message(evicting, 5_000)
    assert m.slice == three and m.evict == (("g", 2), ("h", 1))
    assert protocol.decode(protocol.encode(m)).evict == (("g", 2), ("h", 1))
    plain = w._message(Dispatch("b1", "one", "f", (job,), Config(1, 1, "3g.20gb"), Fit("n0", three)), 5_000)
    assert plain.evict == () and b"evict" not in protocol.encode(plain)


# -- the snapshot kept across turns ---------------------------------------------------------------------
turns = st.lists(st.tuples(st.sampled_from(["arrive", "take", "answer", "beat", "late"]), st.integers(0, 9)),
                 max_size=60)


def _seen(node) -> tuple:
    return (node.vcpus_free, sorted((s.ref, s.busy) for s in node.slices),
            {k: v for k, v in node.idle_workers.items() if v})


def _heartbeat(truth: NodeModel, seq: int, running, done) -> Heartbeat:
    state = truth.fresh_state(0.0)
    idle = tuple(IdleWorkers(f, 1, ref, n) for (f, ref), n in state.idle_workers.items())
    return Heartbeat(truth.name, truth.vcpus_total, truth.vcpus_free, 4096, truth.gpu_model, tuple(state.slices),
                     (), False, seq, 0, idle, tuple(running), tuple(done))


@settings(max_examples=300, deadline=None)
@given(turns)
# a report names a batch answered before its result comes: the result must not finish it a second time
@example([("arrive", 0), ("take", 0), ("answer", 0), ("beat", 0), ("beat", 1), ("late", 0), ("beat", 0)])
def test_the_snapshot_kept_across_turns_is_the_one_built_afresh(ops):
    """The dispatcher keeps one snapshot across turns (the step's reservations, results finished on it,
    a reporting node rebuilt alone); at every turn it must plan on what a snapshot built afresh from the
    latest reports and every claim (:func:`esg.cluster.tracked`) shows -- whatever the order of sends,
    takes, answers and reports, reports that lag, and reports that name batches whose results have not
    come yet."""
    _live_turns(ops, prewarm=False, check_view=True)


@settings(max_examples=200, deadline=None)
@given(turns, st.booleans())
def test_live_waits_decide_as_placing_every_waiting_head_again(ops, prewarm):
    """The live service keeps a waiting head's wait and places it again only after an event the wait
    names (esg.waits), on the dispatcher's kept snapshot: every turn -- those with events and those with
    only time passing -- must decide what placing every waiting head again decides."""
    kept = _live_turns(ops, prewarm=prewarm, reuse_waits=True)
    again = _live_turns(ops, prewarm=prewarm, reuse_waits=False)
    assert kept == again


def _live_turns(ops, prewarm: bool, check_view: bool = False, reuse_waits: bool = True) -> list:
    """Drive the dispatcher and the core through ``ops`` (two nodes whose agents take, answer and report
    in the order given) as the service's turns do; every turn's decisions."""
    disp, s = dispatcher(), Scheduler({"one": APP}, make_policy("esg", PolicyContext(
        {"one": APP}, {"f": profile("f", ROWS, cold_start_ms=3000.0)})), batch_ids=(f"inc-{i}" for i in range(1000)),
        prewarm=prewarm, reuse_waits=reuse_waits)
    truth = {n: NodeModel(n, 4, "A100-40GB") for n in ("n0", "n1")}
    sent: list = []         # dispatched, not taken by the agent
    taken: list = []        # taken, not answered
    answered: list = []     # answered by the agent, result not delivered yet
    done: dict[str, list[str]] = {n: [] for n in truth}
    seq = {n: 1 for n in truth}
    decided: list = []
    for t in truth.values():
        disp.heartbeat(_heartbeat(t, 1, (), ()), 0.0)
    events: list = []
    for i, (op, k) in enumerate(ops):
        if op == "arrive":
            events.append(Arrival(Request(f"r{i}", "one", float(i))))
        elif op == "take" and sent:
            d = sent.pop(k % len(sent))
            truth[d.node].start(d, 0.0, 0.0)
            taken.append(d)
        elif op == "answer" and taken:
            d = taken.pop(k % len(taken))
            truth[d.node].finish(d, 0.0, math.inf)
            done[d.node].append(d.batch_id)
            answered.append(d)
        elif op == "late" and answered:      # a result reaches the scheduler
            d = answered.pop(k % len(answered))
            assert disp.complete(BatchResult(d.batch_id, d.node, (), None, "f", d.config, 6.0)) == d
            events.append(BatchDone(d.batch_id))
        elif op == "beat":
            n = ("n0", "n1")[k % 2]
            seq[n] += 1
            running = [d.batch_id for d in taken if d.node == n]
            disp.heartbeat(_heartbeat(truth[n], seq[n], running, done[n][-4:]), 0.1 * i)
        view = disp.snapshot()
        if check_view:
            fresh = tracked([NodeReport(a.heartbeat.node_state(), frozenset(a.heartbeat.running),
                                        frozenset(a.heartbeat.done)) for a in disp.registry.live()], disp._claims())
            assert {n: _seen(v) for n, v in view.nodes.items()} == {n: _seen(v) for n, v in fresh.nodes.items()}
        if events or not check_view:
            out = s.step(float(i), view, events)
            events = []
            decided.append((i, [(d.batch_id, d.config, d.fit, [j.job_id for j in d.jobs]) for d in out.dispatches],
                            dict(out.waiting), [(p.function, p.fit) for p in out.prewarms]))
            for d in out.dispatches:
                send(disp, d)
                sent.append(d)
            disp.prewarmed([PrewarmSend(p, None) for p in out.prewarms], 0.1 * i)
    return decided


def test_the_decision_log_keeps_what_the_agent_says_a_prewarm_did():
    """A heartbeat names a pre-warm done with its outcome (here: a worker was idle there already, so none
    was started); the decision log keeps it for esg replay's costs. An older agent's says nothing: null."""
    import json
    from dataclasses import replace

    from agent_channel.protocol import PrewarmDone
    from controller_plugin.decisions import DecisionLog
    from controller_plugin.workflows import PrewarmSend
    from esg.cluster import Fit
    from esg.events import Prewarm

    disp = dispatcher()
    disp.heartbeat(beat("n0", 1), 0.0)
    ps = [Prewarm(f"inc-p{i}", "one", "f", Config(1, 2, "3g.20gb"), Fit("n0", THREE), 30000.0) for i in range(2)]
    disp.prewarmed([PrewarmSend(p, None) for p in ps], 0.0, 1000)
    done = beat("n0", 2, [IdleWorkers("f", 2, THREE, 1)], done=["inc-p0"])
    disp.heartbeat(replace(done, prewarmed=(PrewarmDone("inc-p0", "warm"),)), 1.0)
    disp.heartbeat(beat("n0", 3, [IdleWorkers("f", 2, THREE, 1)], done=["inc-p1"]), 2.0)    # an older agent
    warmed = disp.take_warmed()
    assert [(w.prewarm.prewarm_id, w.sent_ms, w.ready, w.done) for w in warmed] == [
        ("inc-p0", 1000, True, PrewarmDone("inc-p0", "warm")), ("inc-p1", 1000, True, None)]
    log = DecisionLog("k")
    for w in warmed:
        log.prewarm(w.prewarm, w.sent_ms, 3000, "A100-40GB", w.ready, w.done)
    entries = [json.loads(e) for e in log._staged]
    assert [(e["outcome"], e["reconfigured"]) for e in entries] == [("warm", 0), (None, None)]
