"""Each baseline's defining rule."""

import math

import numpy as np
import pytest

from esg.cluster import ClusterSnapshot
from esg.events import Request
from esg.model import App, Config, Job
from esg.policies import make_policy
from esg.policies.base import PolicyContext
from esg.policies.common import app_latency, stage_shares
from esg.queues import AfwQueue

NO_NODES = ClusterSnapshot({})
"""The cluster a choice is asked on (these policies choose without looking at it)."""


def _queue(app, function, n, now=0.0, prefix="r"):
    q = AfwQueue((app.name, function))
    for i in range(n):
        q.push(Job(f"{prefix}{i}/{function}", f"{prefix}{i}", app.name, function, now, now + app.slo_ms, now))
    return q


def test_infless_batches_within_half_the_stage_share(apps, profiles):
    app = apps["image-classification"]
    pol = make_policy("infless", PolicyContext(apps, profiles))
    share = stage_shares(app, profiles, app.slo_ms)["resnet50"]
    cands = pol.proposer.candidates(app.name, "resnet50")
    assert cands
    for _cre, t, timeout, c in cands:
        assert t <= (share / 2 if c.batch > 1 else share)
        assert abs(timeout - (share - t)) < 1e-9
    # a batch > 1 that only meets the full share, not half of it, is never a candidate
    half_only = [e for e in profiles["resnet50"].entries
                 if e.config.batch > 1 and share / 2 < e.latency_ms <= share]
    assert half_only and not {e.config for e in half_only} & {c for *_, c in cands}


def test_infless_holds_a_filling_batch_until_its_timeout(apps, profiles):
    app = App("one", 400.0, ("resnet50",))
    ctx = PolicyContext({"one": app}, profiles)
    pol = make_policy("infless", ctx)
    for i in range(3000):  # 300 rps observed over the 10 s window: a batched config's window
        pol.on_arrival(Request(f"x{i}", "one", i * 10 / 3), app, i * 10 / 3)
    choice = pol.choose(app, _queue(app, "resnet50", 1, now=10_000.0), 10_000.0, NO_NODES)
    if not choice.priorities:
        assert choice.retry_at_ms is not None and choice.retry_at_ms > 10_000.0


def test_hop_shares_keep_the_per_batch_overhead_of_the_longest_path_out_of_the_slo(apps, profiles):
    for app in apps.values():
        plain = stage_shares(app, profiles, app.slo_ms)
        stages = app_latency(app, dict.fromkeys(app.functions, 1.0))
        hop = stage_shares(app, profiles, app.slo_ms, 2.5)
        assert math.isclose(app_latency(app, plain), app.slo_ms)
        assert math.isclose(app_latency(app, hop), app.slo_ms - 2.5 * stages)
        for f in app.functions:  # shared out in the same proportions
            assert math.isclose(hop[f] / plain[f], (app.slo_ms - 2.5 * stages) / app.slo_ms)
    one = App("one", 4.0, ("resnet50",))
    assert stage_shares(one, profiles, one.slo_ms, 5.0) == {"resnet50": 0.0}  # never below nothing


@pytest.mark.parametrize("name", ["infless", "fastgshare"])
def test_a_hop_shares_port_plans_on_the_slo_less_the_overhead_and_is_the_original_without_one(apps, profiles, name):
    for overhead in (0.0, 2.5):
        ctx = PolicyContext(apps, profiles, stage_overhead_ms=overhead)
        original, variant = make_policy(name, ctx), make_policy(f"{name}-hop-shares", ctx)
        assert variant.name == f"{name}-hop-shares"
        changed = 0
        for app in apps.values():
            shares = stage_shares(app, profiles, app.slo_ms, overhead)
            for f in app.functions:
                if name == "infless":
                    plan, before = variant.proposer.candidates(app.name, f), original.proposer.candidates(app.name, f)
                    assert all(t <= (shares[f] / 2 if c.batch > 1 else shares[f]) for _cre, t, _w, c in plan)
                    assert all(math.isclose(w, shares[f] - t) for _cre, t, w, _c in plan)
                else:
                    plan, before = variant.proposer.ranked(app, f), original.proposer.ranked(app, f)
                    meets = [c for c, _lat in plan if profiles[f].latency(c) <= shares[f]]
                    assert len(meets) in (0, len(plan))  # those that meet, or (none does) the fastest
                changed += plan != before
        assert (changed > 0) == (overhead > 0), (overhead, changed)


def test_fastgshare_batch_one_best_throughput_per_resource(apps, profiles):
    from esg.policies.common import weighted_resource
    pol = make_policy("fastgshare", PolicyContext(apps, profiles))
    for app in apps.values():
        target = stage_shares(app, profiles, app.slo_ms)
        for f in app.functions:
            choice = pol.choose(app, _queue(app, f, 20), 0.0, NO_NODES)
            assert all(c.batch == 1 for c in choice.priorities), "FaST-GShare never batches"
            ok = [e for e in profiles[f].entries if e.config.batch == 1 and e.latency_ms <= target[f]]
            if ok:
                best = max(1000 / e.latency_ms / weighted_resource("A100-40GB", e.config) for e in ok)
                top = choice.priorities[0]
                assert np.isclose(1000 / profiles[f].latency(top) / weighted_resource("A100-40GB", top), best)


def test_orion_grows_one_stage_at_a_time_best_first(apps, profiles):
    pol = make_policy("orion", PolicyContext(apps, profiles)).proposer
    app = apps["depth-recognition"]
    lat = lambda p: app_latency(app, {f: profiles[f].latency(c) * pol.p95 for f, c in p.items()})  # noqa: E731
    # a budget just below the cheapest plan's P95: the search must grow some stage
    budget = lat({f: pol.ladders[f][0][2] for f in app.functions}) - 1.0
    plan = pol.right_size(app, budget)
    # replay the trace: each step upgrades exactly one stage by one rung, the one lowering P95 most
    rung = {f: 0 for f in app.functions}
    for f, label in pol.trace:
        options = {}
        for g in app.functions:
            if rung[g] + 1 < len(pol.ladders[g]):
                trial = {h: pol.ladders[h][rung[h] + (h == g)][2] for h in app.functions}
                options[g] = lat(trial)
        assert options[f] == min(options.values())
        rung[f] += 1
        assert pol.ladders[f][rung[f]][2].label() == label
    assert plan == {f: pol.ladders[f][rung[f]][2] for f in app.functions}
    assert lat(plan) <= budget
    assert pol.trace, "the cheapest configurations alone should not meet the budget"


def test_orion_fixes_configurations_at_the_first_stage(apps, profiles):
    pol = make_policy("orion", PolicyContext(apps, profiles)).proposer
    app = apps["image-classification"]
    q = _queue(app, "preprocess", 1)
    first = pol.choose(app, q, 0.0, NO_NODES)
    planned = pol._fixed["r0"]
    later = _queue(app, "resnet50", 1)
    # much later, with almost no budget left, the second stage keeps the configuration fixed at first
    late = pol.choose(app, later, app.slo_ms - 1.0, NO_NODES)
    assert late.priorities == (planned["resnet50"],)
    assert first.priorities == (planned["preprocess"],)


def test_orion_sizes_a_stage_again_when_a_learned_table_drops_its_fixed_configuration(apps, profiles):
    """With learned tables (--profiles-online) a function's table can be replaced by one without the
    configuration a request's plan fixed: the next stage is sized on the table it has, not refused."""
    from dataclasses import replace
    policy = make_policy("orion", PolicyContext(apps, profiles))
    pol = policy.proposer
    app = apps["image-classification"]
    pol.choose(app, _queue(app, "preprocess", 1), 0.0, NO_NODES)
    dropped = pol._fixed["r0"]["resnet50"]
    table = profiles["resnet50"]
    learned = replace(table, entries=tuple(e for e in table.entries if e.config != dropped))
    policy.add_app(app, {"resnet50": learned}, {})
    later = pol.choose(app, _queue(app, "resnet50", 1), 10.0, NO_NODES)
    assert dropped not in later.priorities
    assert all(learned.has(c) for c in later.priorities)


def test_orion_preplans_each_app_against_its_slo_not_the_budget_a_late_request_has_left(apps, profiles):
    """Orion right-sizes a DAG once, offline, for its latency target: a request whose first stage is
    scheduled late (most of its SLO spent queueing) gets the same plan as one scheduled at once --
    the plan right-sized against the app's SLO -- rather than a plan sized for what is left of its budget."""
    pol = make_policy("orion", PolicyContext(apps, profiles)).proposer
    app = apps["depth-recognition"]
    entry = app.entries[0]
    on_time = pol.choose(app, _queue(app, entry, 1), 0.0, NO_NODES).priorities
    late_queue = _queue(app, entry, 1)
    late_queue.head.request_id = "late"
    late = pol.choose(app, late_queue, app.slo_ms * 0.6, NO_NODES).priorities
    plan = pol.right_size(app, math.floor(app.slo_ms))
    assert on_time == late == (plan[entry],)
    assert pol._fixed["r0"] == pol._fixed["late"] == plan   # every stage of the late request, too
    assert pol.right_size(app, math.floor(app.slo_ms * 0.4)) != plan, "a tighter budget sizes otherwise"


def test_aquatope_preplans_once_and_respects_the_constraint(apps, profiles):
    pol = make_policy("aquatope", PolicyContext(apps, profiles, seed=1)).proposer
    evaluations = pol.evaluations
    for name, app in apps.items():
        for f in app.functions:
            c = pol.choose(app, _queue(app, f, 5), 123.0, NO_NODES).priorities
            assert c == (pol.plans[name][f],)
        cost, p95 = pol.predicted[name]
        assert p95 <= app.slo_ms, f"{name}: a feasible plan exists (ESG's plan meets L) but was not found"
    assert pol.evaluations == evaluations, "Aquatope must not search again at run time"
    again = make_policy("aquatope", PolicyContext(apps, profiles, seed=1))
    assert again.proposer.plans == pol.plans


def test_no_policy_reads_the_future(apps, profiles):
    """Policies are built from apps and profiles only; the workload is never handed to them."""
    import inspect
    for name in ("esg", "infless", "fastgshare", "orion", "aquatope"):
        pol = make_policy(name, PolicyContext(apps, profiles))
        for part in pol.plugins:
            assert "requests" not in inspect.signature(type(part).__init__).parameters
    assert isinstance(Config(1, 1), Config)


# -- the rivals as their papers describe them: one invocation per instance, pools by concurrency ----------
def test_orion_sizes_every_stage_for_one_invocation(apps, profiles):
    """Lambda runs one invocation per instance: Orion's ladders, and so its plans, hold batch 1 only."""
    pol = make_policy("orion", PolicyContext(apps, profiles)).proposer
    for app in apps.values():
        plan = pol.right_size(app, math.floor(app.slo_ms))
        assert all(c.batch == 1 for c in plan.values()), app.name
        for f in app.functions:
            assert all(c.batch == 1 for _, _, c in pol.ladders[f])
            # one job waiting: the planned single invocation only
            q = _queue(app, f, 1, prefix=app.name)
            assert pol.choose(app, q, 0.0, NO_NODES).priorities == (pol._fixed[q.head.request_id][f],)


def test_orion_bundles_waiting_invocations_on_the_planned_resources_within_the_slo(apps, profiles):
    """Several jobs of a stage waiting run as one bundle on the planned slice and vCPUs -- the largest
    profiled batch the queue fills whose P95 keeps the app's end-to-end P95 within its SLO -- offered
    before the single invocation."""
    pol = make_policy("orion", PolicyContext(apps, profiles)).proposer
    bundled = 0
    for app in apps.values():
        budget = math.floor(app.slo_ms)
        plan = pol.right_size(app, budget)
        for f in app.functions:
            for n in (2, 5, 40):
                got = pol.choose(app, _queue(app, f, n, prefix=app.name), 0.0, NO_NODES).priorities
                c = plan[f]
                assert got[-1] == c
                # the reference: every profiled batch on the planned resources, checked one by one
                fits = []
                for e in profiles[f].entries:
                    b = e.config
                    if b.gpu == c.gpu and b.vcpus == c.vcpus and 1 < b.batch <= n:
                        lat = {g: profiles[g].latency(plan[g]) * pol.p95 for g in app.functions}
                        lat[f] = e.latency_ms * pol.p95
                        if app_latency(app, lat) <= budget:
                            fits.append(b)
                if fits:
                    assert got == (max(fits, key=lambda b: b.batch), c)
                    bundled += 1
                else:
                    assert got == (c,)
    assert bundled, "some stage should bundle within its SLO"


def test_aquatope_searches_one_invocation_per_container(apps, profiles):
    """The BO objective costs the batch the queue delivers: Aquatope's containers run one invocation, so
    every planned configuration has batch 1 (before: batches of 8-32 costed as if full)."""
    pol = make_policy("aquatope", PolicyContext(apps, profiles, seed=0)).proposer
    for name, plan in pol.plans.items():
        assert all(c.batch == 1 for c in plan.values()), name


def _poisson_quantile_reference(mean, q):
    n, total = 0, 0.0
    while True:
        total += math.exp(-mean) * mean ** n / math.factorial(n)
        if total >= q:
            return n
        n += 1


def test_aquatope_pool_follows_predicted_peak_concurrency(apps, profiles):
    """The pre-warmed pool is the concurrency the predicted peak rate keeps (Little's law, the P95 of a
    Poisson number in flight), not the interval's calls divided by a planned batch; it grows with the
    rate."""
    from esg.policies.aquatope import INTERVAL_MS, POOL_QUANTILE, ForecastPool
    app = apps["image-classification"]
    sizes = []
    for rate_per_s in (20, 100, 400):
        pol = make_policy("aquatope", PolicyContext(apps, profiles, seed=0))
        gap = 1000.0 / rate_per_s
        t, i = 0.0, 0
        while t < 25 * INTERVAL_MS:  # steady intervals, until the forecast has settled on the rate
            pol.on_arrival(Request(f"x{i}", app.name, t), app, t)
            t, i = t + gap, i + 1
        forecast_pool = pol.rule(ForecastPool)
        forecast_pool.forecasts[app.name].advance(int(t // INTERVAL_MS))
        f = "resnet50"
        c = pol.proposer.plans[app.name][f]
        peak = forecast_pool.forecasts[app.name].peak_rate_per_ms()
        assert peak * 1000 == pytest.approx(rate_per_s, rel=0.05)  # steady: the peak second is the rate
        in_flight = peak * (profiles[f].latency(c) * pol.proposer.p95 + pol.ctx.stage_overhead_ms)
        want = max(1, _poisson_quantile_reference(in_flight, POOL_QUANTILE))
        assert forecast_pool.pool_size(app.name, f) == want
        sizes.append(want)
    assert sizes[0] < sizes[-1], "a pool that does not grow with the load"


def test_scale_out_rule_of_each_baseline(apps, profiles):
    """Every baseline gets the generic backlog rule (:func:`esg.placement.worth_starting`): Orion's and
    Aquatope's papers leave scaling to the platform, and INFless's and FaST-GShare's own autoscalers are
    not ported (the queue rule, measured worse for them once workers hold GPU memory)."""
    from esg.defaults import StartupCosts
    one = (Config(1, 2, "1g.5gb"),)

    def latency_of(c):
        return 5.0
    startup = StartupCosts(2000.0, 3000.0)
    for name in ("orion", "aquatope", "infless", "fastgshare"):
        pol = make_policy(name, PolicyContext(apps, profiles, seed=0))
        # three jobs behind one running batch of 5 ms: cleared in 15 ms, far less than a 3 s cold start
        assert not pol.placer.may_scale_out(1, 3, one, latency_of, startup), name
        assert pol.placer.may_scale_out(0, 1, one, latency_of, startup), name
        # a backlog the running worker needs longer than a cold start for: start one
        assert pol.placer.may_scale_out(1, 601, one, latency_of, startup), name
