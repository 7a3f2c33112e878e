"""The cost split adds up, and each part is what a hand calculation of a tiny run gives."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from esg.cluster import SliceRef
from esg.cost import Prices
from esg.emulator import ClusterSpec, Emulation, EmulatorParams
from esg.emulator.nodes import NodeModel, _subtract, _union
from esg.emulator.workload import generate
from esg.events import Request
from esg.model import App
from esg.policies import make_policy
from esg.policies.base import PolicyContext
from esg.policies.esg_policy import esg_policy
from esg.policies.points import WarmUps
from tests.core.helpers import profile, with_worker_memory

APP = App("one", 500.0, ("f",), ())


def run_one(requests, cold_ms=0.0, mig_ms=0.0, keep_alive_ms=600_000.0):
    profiles = {"f": profile("f", [(1, 1, "3g.20gb", 20.0)], cold_start_ms=cold_ms)}
    apps = {"one": APP}
    params = EmulatorParams(noise_cv=0.0, warmup_ms=0.0, mig_reconfig_ms=mig_ms, keep_alive_ms=keep_alive_ms)
    pol = make_policy("fastgshare", PolicyContext(apps, profiles, mig_reconfig_ms=mig_ms))
    em = Emulation(apps, profiles, pol, requests, np.random.default_rng(0), ClusterSpec(nodes=1), params)
    return em.run().metrics


def test_an_idle_warm_worker_is_charged_its_instance_between_two_requests():
    m = run_one([Request("a", "one", 0.0), Request("b", "one", 1000.0)], cold_ms=300.0, mig_ms=50.0)
    first_done = m.per_app["one"].latencies_ms[0]  # request a arrived at 0
    rate = Prices().gpu_slice * 3 + Prices().vcpu * 1  # 3g.20gb: 3 compute slices, plus 1 vCPU when busy
    assert m.cold_starts == 1 and m.reconfigured_instances == 1, "the second request takes the warm worker"
    assert m.cost_idle == pytest.approx(Prices().gpu_slice * 3 * (1000.0 - first_done))
    assert m.cost_cold == pytest.approx(rate * 300.0)
    assert m.cost_mig == pytest.approx(rate * 50.0)
    assert m.cost == pytest.approx(m.cost_exec + m.cost_idle + m.cost_cold + m.cost_mig)


def test_no_idle_cost_when_workers_expire_at_once():
    m = run_one([Request("a", "one", 0.0), Request("b", "one", 1000.0)], keep_alive_ms=0.0)
    assert m.cost_idle == 0.0 and m.cold_starts == 2


@pytest.mark.parametrize("policy", ["esg", "infless", "orion"])
def test_split_adds_up_in_a_real_run(policy, apps, profiles):
    requests = generate(list(apps), 30.0, 5.0, np.random.default_rng(1))
    params = EmulatorParams(warmup_ms=1000.0, keep_alive_ms=2000.0, mig_reconfig_ms=100.0, cold_start_scale=0.2)
    em = Emulation(apps, profiles, make_policy(policy, PolicyContext(apps, profiles, mig_reconfig_ms=100.0,
                                                                     cold_start_scale=0.2)),
                   requests, np.random.default_rng(2), ClusterSpec(nodes=2), params)
    s = em.run().summary
    parts = s["cost_exec"] + s["cost_idle"] + s["cost_cold"] + s["cost_mig"]
    assert s["cost"] == pytest.approx(parts) and s["cost_exec"] > 0 and s["cost_idle"] > 0
    assert min(s["cost_exec"], s["cost_idle"], s["cost_cold"], s["cost_mig"]) >= 0


spans = st.lists(st.tuples(st.integers(0, 40), st.integers(0, 40)), max_size=8)


@given(spans, spans, st.integers(0, 20), st.integers(20, 40))
def test_idle_instance_time_matches_counting_milliseconds(idle, busy, lo, hi):
    """An instance is paid for the milliseconds in [lo, hi] covered by some idle worker and by no batch."""
    expected = sum(1 for t in range(lo, hi)
                   if any(a <= t < b for a, b in idle) and not any(a <= t < b for a, b in busy))
    got = _subtract(_union([(float(a), float(b)) for a, b in idle], lo, hi),
                    _union([(float(a), float(b)) for a, b in busy], lo, hi))
    assert got == pytest.approx(expected)


def test_two_idle_workers_on_one_instance_pay_it_once():
    ref = SliceRef("3g.20gb", 4)
    node = NodeModel("n", 16, "A100-40GB")
    node.idle_spans = [(0.0, 50.0, ref), (20.0, 80.0, ref)]
    node.busy_spans = [(60.0, 70.0, ref)]
    assert node.idle_instance_ms(0.0, 1000.0, 1000.0) == {"3g.20gb": pytest.approx(70.0)}


def test_a_live_decision_log_is_charged_idle_instances_as_the_emulator_charges_them(apps, profiles):
    """``esg replay`` charges the MIG instances a live run kept for idle warm workers from the scheduler's
    decision log alone; given the batches of an emulated run as such a log, it finds the emulator's own
    idle cost."""
    from esg_cli.replay import idle_instance_ms

    log: list[dict] = []
    sent: dict[str, float] = {}

    class Logging(Emulation):
        def _start(self, d, now, decision_ms):
            sent[d.batch_id] = now
            super()._start(d, now, decision_ms)

        def _finish(self, batch_id, now):
            d = self._flight[batch_id][0]
            log.append({"type": "batch", "batch_id": batch_id, "node": d.node, "function": d.function,
                        "slice": None if d.fit.slice is None else f"{d.fit.slice.profile}@{d.fit.slice.start}",
                        "destroyed": [f"{r.profile}@{r.start}" for r in d.fit.destroy], "gpu_model": "A100-40GB",
                        "evicted": [[f, n] for f, n in d.fit.evict],
                        "sent_ms": sent.pop(batch_id), "done_ms": now})
            return super()._finish(batch_id, now)

    requests = generate(list(apps), 60.0, 5.0, np.random.default_rng(1))
    # the decision log here has batches only, with the driver's one keep-alive: pre-warms (and the
    # policies' own keep-alives) are off; a live log of pre-warms is read once the live side has them
    params = EmulatorParams(warmup_ms=1000.0, keep_alive_ms=2000.0, mig_reconfig_ms=100.0, cold_start_scale=0.2,
                            prewarm=False)
    # INFless's configurations change with the observed rate, so its run destroys and creates instances
    # and stops an idle worker for a new one's GPU memory (ESG, which keeps to the instances it has, and
    # Orion and Aquatope, whose batch-1 plans fit the layout they start with, do neither in so short a
    # run): the accounting is the same
    tables = with_worker_memory(profiles, 3000)  # one GPU worker to a 1g.5gb instance: some are stopped
    em = Logging(apps, tables, make_policy("infless", PolicyContext(apps, tables, mig_reconfig_ms=100.0,
                                                                  cold_start_scale=0.2)),
                 requests, np.random.default_rng(2), ClusterSpec(nodes=2), params)
    m = em.run().metrics
    assert not sent, "every batch finished"
    assert any(e["destroyed"] for e in log) and m.cost_idle > 0, "the run destroys instances and keeps idle ones"
    assert any(e["evicted"] for e in log), "the run stops idle workers for GPU memory"
    idle = idle_instance_ms(log, params.warmup_ms, requests[-1].arrival_ms, params.keep_alive_ms)
    prices = Prices()
    from esg.mig import compute_slices
    charged = sum(prices.slice_rate(model) * compute_slices(model, profile) * ms for (profile, model), ms in idle.items())
    assert charged == pytest.approx(m.cost_idle, rel=1e-9)


def test_a_live_decision_log_with_prewarms_and_keep_alives_is_charged_as_the_emulator_charges_them(apps, profiles):
    """With a policy that pre-warms each function's successors and gives its batches their own keep-alive,
    ``esg replay``'s idle cost from the decision log (batches with ``keep_alive_ms``, pre-warms with when
    they were ready) is the emulator's own."""
    from esg.prewarm import WarmUp, smallest_of_kind
    from esg_cli.replay import idle_instance_ms

    log: list[dict] = []
    sent: dict[str, float] = {}

    def label(ref):
        return None if ref is None else f"{ref.profile}@{ref.start}"

    class Logging(Emulation):
        def _start(self, d, now, decision_ms):
            sent[d.batch_id] = now
            super()._start(d, now, decision_ms)

        def _finish(self, batch_id, now):
            d = self._flight[batch_id][0]
            log.append({"type": "batch", "batch_id": batch_id, "node": d.node, "function": d.function,
                        "slice": label(d.fit.slice), "destroyed": [label(r) for r in d.fit.destroy],
                        "gpu_model": "A100-40GB", "sent_ms": sent.pop(batch_id), "done_ms": now,
                        "keep_alive_ms": d.keep_alive_ms})
            return super()._finish(batch_id, now)

        def _prewarm(self, p, now):
            sent[p.prewarm_id] = now
            super()._prewarm(p, now)

        def _warmed(self, p, now):
            log.append({"type": "prewarm", "prewarm_id": p.prewarm_id, "node": p.node, "function": p.function,
                        "slice": label(p.fit.slice), "gpu_model": "A100-40GB", "create": p.fit.create,
                        "keep_alive_ms": p.keep_alive_ms, "sent_ms": sent.pop(p.prewarm_id), "done_ms": now,
                        "ready": True})
            super()._warmed(p, now)

    requests = generate(list(apps), 30.0, 5.0, np.random.default_rng(1))
    params = EmulatorParams(warmup_ms=1000.0, keep_alive_ms=2000.0, mig_reconfig_ms=100.0, cold_start_scale=0.2)

    class Prewarming:
        """A plugin: a worker of each successor beside its predecessor's batch, kept a while by function."""

        def prewarm(self, now_ms, snapshot, dispatched, asked: WarmUps) -> None:
            for d in dispatched:
                for succ in apps[d.app].successors(d.function):
                    config = smallest_of_kind(profiles[succ], d.config)
                    asked.add(WarmUp(d.app, succ, config, 700.0, (d.node,)))

        def wake_ms(self):
            return None

        def keep_alive_ms(self, app, function, now_ms):
            return 300.0 + 100.0 * (len(function) % 5)

    policy = esg_policy(PolicyContext(apps, profiles, mig_reconfig_ms=100.0, cold_start_scale=0.2),
                        [lambda parts: Prewarming()])
    em = Logging(apps, profiles, policy, requests, np.random.default_rng(2), ClusterSpec(nodes=2), params)
    m = em.run().metrics
    assert m.prewarms > 0 and any(e["type"] == "prewarm" and e["slice"] for e in log), "the run pre-warms on MIG"
    assert m.cost_idle > 0
    idle = idle_instance_ms(log, params.warmup_ms, requests[-1].arrival_ms, params.keep_alive_ms)
    prices = Prices()
    from esg.mig import compute_slices
    charged = sum(prices.slice_rate(model) * compute_slices(model, profile) * ms for (profile, model), ms in idle.items())
    assert charged == pytest.approx(m.cost_idle, rel=1e-9)


def test_replay_charges_a_prewarm_in_the_window_its_start_up_as_a_cold_start():
    from esg.model import Config
    from esg_cli.replay import Call, measure

    calls = [Call("app", 0.0, 0.0, 50.0, "a1", True), Call("app", 10.0, 10_000.0, 10_050.0, "a2", True)]
    log = [{"type": "request", "id": "a2", "app": "app", "arrival_ms": 10_000.0, "finished_ms": 10_040.0,
            "ok": True},
           {"type": "prewarm", "prewarm_id": "w0", "node": "n0", "function": "f", "gpu_model": "A100-40GB",
            "vcpus": 1, "gpu": "1g.5gb", "slice": "1g.5gb@6", "create": True, "keep_alive_ms": 100.0,
            "sent_ms": 5_000.0, "done_ms": 5_800.0, "ready": True},
           {"type": "prewarm", "prewarm_id": "w1", "node": "n0", "function": "f", "gpu_model": "A100-40GB",
            "vcpus": 1, "gpu": None, "slice": None, "create": False, "keep_alive_ms": 100.0,
            "sent_ms": 500.0, "done_ms": 900.0, "ready": True}]       # before the warm-up ends: not counted
    summary, _, _ = measure(calls, {"app": 1000.0}, log, 1.0, 0.0, "esg", "moderate", "light")
    rate = Prices().rate("A100-40GB", Config(1, 1, "1g.5gb"))
    assert summary["prewarms"] == 1 and summary["mig_changes"] == 1
    assert summary["cost_cold"] == pytest.approx(rate * 800.0)            # per measured request: one of them
    assert summary["cost_idle"] > 0                                       # its 100 ms idle on 1g.5gb@6


def test_replay_charges_only_the_prewarms_that_started_a_worker_as_the_emulator_does():
    """The agent says what each pre-warm did (its heartbeat's ``prewarmed``, kept in the decision log as
    ``outcome``). The emulator charges a start-up only where a worker starts (a batch that finds a warm
    worker pays none); so does replay: a pre-warm that found a worker warm there extends its keep-alive
    (idle time, from when it was sent) and starts nothing, and one that expired or failed starts nothing."""
    from esg.mig import compute_slices
    from esg.model import Config
    from esg_cli.replay import Call, measure

    calls = [Call("app", 0.0, 0.0, 50.0, "a1", True), Call("app", 10.0, 10_000.0, 10_050.0, "a2", True)]
    common = {"type": "prewarm", "node": "n0", "function": "f", "gpu_model": "A100-40GB", "vcpus": 1,
              "gpu": "1g.5gb", "slice": "1g.5gb@6"}
    log = [{"type": "request", "id": "a2", "app": "app", "arrival_ms": 10_000.0, "finished_ms": 10_040.0,
            "ok": True},
           {**common, "prewarm_id": "w0", "create": True, "keep_alive_ms": 100.0, "sent_ms": 5_000.0,
            "done_ms": 5_800.0, "ready": True, "outcome": "started", "reconfigured": 1},
           # the scheduler's view was a heartbeat old: the agent found w0's worker idle and kept it 1 s more
           {**common, "prewarm_id": "w1", "create": True, "keep_alive_ms": 1000.0, "sent_ms": 5_850.0,
            "done_ms": 6_400.0, "ready": True, "outcome": "warm", "reconfigured": 0},
           {**common, "prewarm_id": "w2", "create": False, "keep_alive_ms": 100.0, "sent_ms": 7_000.0,
            "done_ms": 7_900.0, "ready": False, "outcome": "expired", "reconfigured": 0},
           {**common, "prewarm_id": "w3", "create": False, "keep_alive_ms": 100.0, "sent_ms": 8_000.0,
            "done_ms": 8_900.0, "ready": False, "outcome": "failed", "reconfigured": 0}]
    summary, _, _ = measure(calls, {"app": 1000.0}, log, 1.0, 0.0, "esg", "moderate", "light")
    prices = Prices()
    rate = prices.rate("A100-40GB", Config(1, 1, "1g.5gb"))
    assert summary["prewarms"] == 1 and summary["mig_changes"] == 1
    assert summary["cost_cold"] == pytest.approx(rate * 800.0)            # w0's start-up alone
    # 1g.5gb@6 idle from w0's ready (5.8 s) until w1's extended keep-alive ran out (5.85 s + 1 s)
    slice_ms = prices.slice_rate("A100-40GB") * compute_slices("A100-40GB", "1g.5gb")
    assert summary["cost_idle"] == pytest.approx(slice_ms * 1_050.0)
