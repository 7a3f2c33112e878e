"""Live tracking: a node's report of any age, plus the scheduler's claims since, is the node now.

The reference is the emulator's node model (:class:`esg.emulator.nodes.NodeModel`), which applies each
start and finish as it happens; the live view only ever sees old reports of it.
"""

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from esg.cluster import Claim, ClusterSnapshot, NodeReport, NodeState, Slice, SliceRef, tracked
from esg.emulator.nodes import NodeModel
from esg.events import Dispatch
from esg.model import Config

CONFIGS = [Config(1, 1, "1g.5gb"), Config(2, 2, "2g.10gb"), Config(1, 4, "3g.20gb"), Config(4, 2, "7g.40gb"),
           Config(1, 2, None)]
FUNCS = ["f", "g"]


def _state(node: NodeState) -> tuple:
    return (node.vcpus_free, sorted((s.ref, s.busy) for s in node.slices),
            {k: v for k, v in node.idle_workers.items() if v})


def _report(model: NodeModel, running: set[str], done: list[str]) -> NodeReport:
    return NodeReport(model.fresh_state(0.0), frozenset(running), frozenset(done))


ops = st.lists(st.tuples(st.sampled_from(["send", "finish", "report"]), st.integers(0, 9), st.integers(0, 9)),
               max_size=40)


@settings(max_examples=300, deadline=None)
@given(ops, st.data())
def test_an_old_report_plus_the_claims_since_is_the_node_now(ops, data):
    truth = NodeModel("n0", 8, "A100-40GB")
    flight: dict[str, Dispatch] = {}
    claims: dict[str, Claim] = {}
    done: list[str] = []
    reports = [_report(truth, set(), [])]
    for i, (op, a, b) in enumerate(ops):
        if op == "send":
            fn, cfg = FUNCS[a % 2], CONFIGS[b % len(CONFIGS)]
            snap = ClusterSnapshot({"n0": truth.fresh_state(0.0)}, tracks_workers=True)
            fit = snap.fit("n0", cfg, fn)
            if fit is None:
                continue
            d = Dispatch(f"b{i}", "app", fn, (), cfg, fit)
            truth.start(d, 0.0, 0.0)
            flight[d.batch_id] = d
            claims[d.batch_id] = Claim(d.batch_id, fn, cfg, fit)
        elif op == "finish" and flight:
            d = flight.pop(sorted(flight)[a % len(flight)])
            truth.finish(d, 0.0, math.inf)
            claims[d.batch_id] = Claim(d.batch_id, d.function, d.config, d.fit, finished=True)
            done.append(d.batch_id)
        elif op == "report":
            reports.append(_report(truth, set(flight), done))
    # the scheduler plans on its latest report; which one arrived last is up to the network
    report = data.draw(st.sampled_from(reports))
    # a report's answered batches are dropped from the claims (as the dispatcher does)
    kept = [c for c in claims.values() if not (c.finished and c.batch_id in report.done)]
    view = tracked([NodeReport(_copy(report.state), report.running, report.done)], kept)
    assert _state(view.nodes["n0"]) == _state(truth.fresh_state(0.0))


def _copy(state: NodeState) -> NodeState:
    return NodeState(state.name, state.vcpus_total, state.vcpus_free, state.gpu_model,
                     [Slice(s.ref, s.busy) for s in state.slices], idle_workers=dict(state.idle_workers))


def test_a_claim_the_report_does_not_know_keeps_its_warm_worker_and_slice_taken():
    ref = SliceRef("3g.20gb", 4)
    node = NodeState("n0", 16, 16, "A100-40GB", [Slice(ref)], idle_workers={("f", ref): 1})
    snap = ClusterSnapshot({"n0": node}, tracks_workers=True)
    fit = snap.fit("n0", Config(1, 2, "3g.20gb"), "f")
    assert fit is not None and fit.warm_worker == ("f", ref)
    fresh = NodeState("n0", 16, 16, "A100-40GB", [Slice(ref)], idle_workers={("f", ref): 1})
    view = tracked([NodeReport(fresh)], [Claim("b1", "f", Config(1, 2, "3g.20gb"), fit)])
    n = view.nodes["n0"]
    assert n.idle_workers.get(("f", ref), 0) == 0 and n.slices[0].busy and n.vcpus_free == 14
    assert view.tracks_workers and view.nodes_with_warm("f") == set()
    # its result comes back before the next report: the worker is idle on its slice again
    view = tracked([NodeReport(NodeState("n0", 16, 16, "A100-40GB", [Slice(ref)], idle_workers={("f", ref): 1}))],
                   [Claim("b1", "f", Config(1, 2, "3g.20gb"), fit, finished=True)])
    n = view.nodes["n0"]
    assert n.idle_workers[("f", ref)] == 1 and not n.slices[0].busy and n.vcpus_free == 16
    assert view.nodes_with_warm("f") == {"n0"}


def test_a_batch_the_agent_took_but_has_not_carved_a_slice_for_keeps_its_slice_on_the_view():
    ref = SliceRef("4g.20gb", 0)
    snap = ClusterSnapshot({"n0": NodeState("n0", 16, 16, "A100-40GB")}, tracks_workers=True)
    fit = snap.fit("n0", Config(1, 1, "4g.20gb"), "f")
    assert fit is not None and fit.slice == ref and fit.create
    # the report lists the batch running, but the agent is still carving: no slice in it yet
    view = tracked([NodeReport(NodeState("n0", 16, 15, "A100-40GB"), frozenset({"b1"}))],
                   [Claim("b1", "f", Config(1, 1, "4g.20gb"), fit)])
    assert view.layout("n0") == (("4g.20gb", 0, True),) and view.nodes["n0"].vcpus_free == 15
    # so nothing else is planned over it
    other = view.fit("n0", Config(1, 1, "7g.40gb"), "g")
    assert other is None
