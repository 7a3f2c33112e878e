"""The live service plans with the MIG change time its agents measure: results (and pre-warms) that
changed MIG instances and say how long that took teach the learner of the node's GPU model, and once
the cluster's figure moves more than 10 % from what the policy plans with, the policy -- and what it
derives from it -- plans with the learned one. No broker needed: the dispatcher's heartbeat and result
handling with :class:`~controller_plugin.workflows.Workflows` and the core scheduler, as the service's
main loop calls them."""

from __future__ import annotations

import pytest

from agent_channel.keys import Keys
from agent_channel.protocol import BatchResult, Heartbeat, PrewarmDone
from controller_plugin.dispatcher import Dispatcher
from controller_plugin.health import AgentRegistry
from controller_plugin.metrics import Metrics
from controller_plugin.workflows import Send, Workflows
from esg.cluster import Fit, SliceRef
from esg.defaults import MIG_RECONFIG_MS
from esg.events import Arrival, Dispatch, Request
from esg.model import App, Config
from esg.policies import PolicyContext, make_policy
from esg.scheduler import Scheduler
from esg.startup_costs import MIN_SAMPLES
from tests.core.helpers import profile

APP = App("one", 100.0, ("f",), ())
ROWS = [(1, 1, "1g.5gb", 10.0), (1, 1, "3g.20gb", 6.0)]
COLD_MS = 3000.0
ON_MIG = Config(1, 1, "1g.5gb")


def context() -> PolicyContext:
    return PolicyContext({"one": APP}, {"f": profile("f", ROWS, cold_start_ms=COLD_MS)})


def live() -> tuple[Workflows, Dispatcher, Metrics]:
    s = Scheduler({"one": APP}, make_policy("esg", context()), batch_ids=(f"inc-{i}" for i in range(1000)))
    ids: dict[str, int] = {}
    metrics = Metrics()
    disp = Dispatcher(None, AgentRegistry(lambda n: ids.setdefault(n, len(ids)), {}, 5.0), "inc", metrics)
    return Workflows(s, Keys().results, metrics, 5.0), disp, metrics


def beat(node: str, seq: int, model: str = "A100-40GB") -> Heartbeat:
    return Heartbeat(node, 16, 16, 4096, model, (), (), False, seq, 0)


def answered(w: Workflows, disp: Dispatcher, node: str, n: int, instances: int, ms: float | None, t: int) -> None:
    """``n`` batches sent to ``node``, each answered having changed ``instances`` MIG instances in ``ms``,
    folded in as the service's main loop folds a result (the dispatcher first, then the workflows)."""
    for i in range(n):
        d = Dispatch(f"{node}-{t}-{i}", "one", "f", (), ON_MIG, Fit(node, SliceRef("1g.5gb", i % 7), create=True))
        disp.sent([Send(d, None)], [f"{t}-{i}".encode()])
        rm = BatchResult(d.batch_id, node, (), None, "f", ON_MIG, 10.0, cold=True, reconfigured=instances,
                         reconfig_ms=ms)
        got = disp.complete(rm)
        assert got == d
        w.record(got, rm, t)


def plans_with(w: Workflows) -> float:
    return w.scheduler.policy.ctx.mig_reconfig_ms


def test_results_reporting_slow_mig_changes_make_the_policy_plan_with_the_learned_figure():
    w, disp, metrics = live()
    disp.heartbeat(beat("n0", 1), 0.0)
    policy = w.scheduler.policy
    assert plans_with(w) == MIG_RECONFIG_MS and metrics.mig_change_planned._value.get() == MIG_RECONFIG_MS / 1000
    # too few measured changes: the policy keeps the configured figure
    answered(w, disp, "n0", MIN_SAMPLES - 1, 2, 7000.0, 1000)
    w.step(1000, disp.snapshot())
    assert plans_with(w) == MIG_RECONFIG_MS
    # results that changed nothing, or did not time their change, teach nothing
    answered(w, disp, "n0", 3, 0, None, 1100)
    answered(w, disp, "n0", 3, 2, None, 1200)
    w.step(1200, disp.snapshot())
    assert plans_with(w) == MIG_RECONFIG_MS and w.mig_changes.samples("A100-40GB") == MIN_SAMPLES - 1
    # one more: 3.5 s per instance, what the policy plans with from the next step on
    answered(w, disp, "n0", 1, 2, 7000.0, 1300)
    assert plans_with(w) == MIG_RECONFIG_MS
    w.step(1300, disp.snapshot())
    assert plans_with(w) == 3500.0 and metrics.mig_change_planned._value.get() == 3.5
    # and what the policy derived from the old figure follows: ESG's start-ups, the placer's costs
    assert policy.proposer.startup_ms("f") == (COLD_MS, COLD_MS + 3500.0)
    assert policy.placer._startup_of("f", policy.ctx.profiles["f"]).mig_reconfig_ms == 3500.0
    assert all(getattr(p, "ctx", policy.ctx) is policy.ctx for p in policy.plugins)
    # a new app planned later plans with it too
    w.scheduler.add_app(App("two", 100.0, ("g",), ()), {"g": profile("g", ROWS, cold_start_ms=100.0)})
    assert policy.proposer.startup_ms("g") == (100.0, 3600.0)


def test_the_figure_changes_only_past_ten_percent_and_follows_the_hardware_back():
    w, disp, _ = live()
    disp.heartbeat(beat("n0", 1), 0.0)
    answered(w, disp, "n0", MIN_SAMPLES, 1, 2150.0, 1000)     # 7.5 % slower: not worth replanning
    w.step(1000, disp.snapshot())
    assert plans_with(w) == MIG_RECONFIG_MS and w.mig_changes.estimate("A100-40GB") == 2150.0
    answered(w, disp, "n0", 2 * MIN_SAMPLES, 1, 800.0, 2000)   # the median moves to 0.8 s
    w.step(2000, disp.snapshot())
    assert plans_with(w) == 800.0
    answered(w, disp, "n0", 1, 1, 60_000.0, 3000)             # one wild change does not move it
    w.step(3000, disp.snapshot())
    assert plans_with(w) == 800.0


def test_a_prewarm_that_carved_its_instance_teaches_it_too():
    w, disp, _ = live()
    disp.heartbeat(beat("n0", 1), 0.0)
    for i in range(MIN_SAMPLES):
        w.prewarmed("n0", PrewarmDone(f"p{i}", "started", 1, 900.0))
    w.prewarmed("n0", PrewarmDone("p9", "warm"))
    w.step(1000, disp.snapshot())
    assert plans_with(w) == 900.0


def test_a_cluster_of_two_gpu_models_plans_with_the_slowest_learned_one():
    w, disp, _ = live()
    disp.heartbeat(beat("n0", 1, "A100-40GB"), 0.0)
    disp.heartbeat(beat("n1", 1, "H100-80GB"), 0.0)
    answered(w, disp, "n0", MIN_SAMPLES, 2, 1200.0, 1000)     # 0.6 s per instance on the A100
    w.step(1000, disp.snapshot())
    assert plans_with(w) == 600.0, "the H100 not measured yet: taken to be like the A100"
    answered(w, disp, "n1", MIN_SAMPLES, 1, 1500.0, 2000)
    w.step(2000, disp.snapshot())
    assert plans_with(w) == 1500.0
    assert w.mig_changes.estimate("A100-40GB") == 600.0 and w.mig_changes.estimate("H100-80GB") == 1500.0


def test_a_result_of_a_node_gone_before_the_step_teaches_nothing():
    w, disp, _ = live()
    disp.heartbeat(beat("n0", 1), 0.0)
    answered(w, disp, "n0", MIN_SAMPLES, 1, 500.0, 1000)
    disp.registry.agents.clear()
    disp.forget_view()
    w.step(1000, disp.snapshot())
    assert plans_with(w) == MIG_RECONFIG_MS


@pytest.mark.parametrize("policy", ["infless", "fastgshare", "orion", "aquatope"])
def test_every_policy_follows_the_learned_figure(policy):
    s = Scheduler({"one": APP}, make_policy(policy, context()))
    ids: dict[str, int] = {}
    disp = Dispatcher(None, AgentRegistry(lambda n: ids.setdefault(n, len(ids)), {}, 5.0), "inc", Metrics())
    w = Workflows(s, Keys().results, Metrics(), 5.0)
    disp.heartbeat(beat("n0", 1), 0.0)
    s.step(0.0, disp.snapshot(), [Arrival(Request("r0", "one", 0.0))])
    answered(w, disp, "n0", MIN_SAMPLES, 1, 400.0, 1000)
    w.step(1000, disp.snapshot())
    assert s.policy.ctx.mig_reconfig_ms == 400.0
    assert s.policy.placer._startup_of("f", s.policy.ctx.profiles["f"]).mig_reconfig_ms == 400.0
