"""The default for an unprofiled function: runs at once, largest queued batch, 1 vCPU, slice then CPU."""

from __future__ import annotations

from esg.cluster import ClusterSnapshot, NodeState
from esg.defaults import DEFAULT_MAX_BATCH, default_profile, default_slice, is_default, source
from esg.events import Arrival, BatchDone, Request
from esg.model import App, Config
from esg.planner import Planner
from esg.policies import PolicyContext, make_policy
from esg.policies.base import FunctionSpec
from esg.scheduler import Scheduler

from .helpers import nodes, profile


def cpu_nodes(n: int, vcpus: int = 16) -> ClusterSnapshot:
    return ClusterSnapshot.of([NodeState(f"c{i}", vcpus, vcpus, None) for i in range(n)])


def sched(app: App, profiles, specs, policy: str = "esg") -> Scheduler:
    ctx = PolicyContext({app.name: app}, profiles, specs=specs)
    return Scheduler({app.name: app}, make_policy(policy, ctx))


def test_smallest_slice_of_each_model():
    assert default_slice("A100-40GB") == "1g.5gb"
    assert default_slice("H100-80GB") == "1g.10gb"
    assert default_slice("A30") == "1g.6gb"


def test_default_table_is_bounded_by_the_time_limit_and_marked():
    p = default_profile("f", FunctionSpec(max_batch=5, gpu=False), 30_000, "A100-40GB")
    assert is_default(p) and source(p) == "default"
    assert {e.config for e in p.entries} == {Config(b, 1, None) for b in (1, 2, 4, 5)}
    assert {e.latency_ms for e in p.entries} == {30_000.0}
    assert source(profile("g", [(1, 1, None, 3.0)])) == "offline"


def test_cpu_only_function_runs_at_once_with_the_largest_queued_batch():
    app = App("one", 500.0, ("f",))
    spec = FunctionSpec(max_batch=4, gpu=False)
    s = sched(app, {"f": default_profile("f", spec, 60_000, "A100-40GB")}, {"f": spec})
    out = s.step(0.0, nodes(1), [Arrival(Request(f"r{i}", "one", 0.0)) for i in range(6)])
    assert [d.config for d in out.dispatches] == [Config(4, 1, None), Config(2, 1, None)]
    assert sum(len(d.jobs) for d in out.dispatches) == 6


def test_gpu_function_takes_the_default_slice_where_there_is_one_else_cpu():
    app = App("one", 500.0, ("f",))
    spec = FunctionSpec(max_batch=None, gpu=True)
    prof = default_profile("f", spec, 60_000, "A100-40GB")
    arr = [Arrival(Request(f"r{i}", "one", 0.0)) for i in range(3)]
    on_gpu = sched(app, {"f": prof}, {"f": spec}).step(0.0, nodes(1), arr).dispatches
    assert [d.config for d in on_gpu] == [Config(3, 1, "1g.5gb")]
    on_cpu = sched(app, {"f": prof}, {"f": spec}).step(0.0, cpu_nodes(1), arr).dispatches
    assert [d.config for d in on_cpu] == [Config(3, 1, None)]
    many = [Arrival(Request(f"r{i}", "one", 0.0)) for i in range(20)]
    big = sched(app, {"f": prof}, {"f": spec}).step(0.0, nodes(1), many).dispatches
    assert big[0].config.batch == DEFAULT_MAX_BATCH


def test_every_policy_runs_an_app_with_an_unprofiled_function_to_the_end():
    app = App("chain", 200.0, ("a", "b"), (("a", "b"),))
    profiles = {"a": profile("a", [(1, 1, None, 20.0), (1, 4, None, 8.0), (2, 1, None, 30.0)]),
                "b": default_profile("b", FunctionSpec(gpu=False), 60_000, "A100-40GB")}
    for policy in ("esg", "infless", "fastgshare", "orion", "aquatope"):
        s = sched(app, profiles, {"b": FunctionSpec(gpu=False)}, policy)
        out = s.step(0.0, nodes(1), [Arrival(Request("r0", "chain", 0.0))])
        done = []
        t = 0.0
        while out.dispatches:
            t += 10.0
            done += [d.function for d in out.dispatches]
            out = s.step(t, nodes(1), [BatchDone(d.batch_id) for d in out.dispatches])
        assert done == ["a", "b"], policy
        assert [o.ok for o in out.outcomes] == [True], policy
        assert out.outcomes[0].request_id == "r0"


def test_planner_plans_around_an_unknown_function():
    """An SLO shorter than the bound has no feasible path: the profiled function is then run at its
    fastest (the fallback), leaving the unknown one as much of the SLO as possible."""
    app = App("chain", 200.0, ("a", "b"), (("a", "b"),))
    profiles = {"a": profile("a", [(1, 1, None, 20.0), (1, 4, None, 8.0)]),
                "b": default_profile("b", FunctionSpec(gpu=False), 60_000, "A100-40GB")}
    assert not Planner(app, profiles).plan(200.0).feasible
    s = sched(app, profiles, {"b": FunctionSpec(gpu=False)})
    (d,) = s.step(0.0, nodes(1), [Arrival(Request("r0", "chain", 0.0))]).dispatches
    assert d.config == Config(1, 4, None)
    # with an SLO above the bound it is planned like any other: the cheapest path
    slow = App("chain", 120_000.0, ("a", "b"), (("a", "b"),))
    result = Planner(slow, profiles).plan(120_000.0)
    assert result.feasible and result.paths[0].configs["a"] == Config(1, 1, None)
