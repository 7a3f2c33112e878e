"""A pre-warm in the emulator: its worker serves the next batch warm, and its start-up and idle time are
paid in the cost split as any worker's are."""

import numpy as np
import pytest

from esg.cost import Prices
from esg.emulator import ClusterSpec, Emulation, EmulatorParams
from esg.events import Request
from esg.model import App, Config
from esg.policies.base import Policy, PolicyContext, Starting
from esg.policies.common import PackingOrder
from esg.policies.fastgshare import FastGShareProposer
from esg.prewarm import WarmUp
from tests.core.helpers import profile

APP = App("one", 5000.0, ("f",), ())
COLD, MIG, RUN = 300.0, 50.0, 20.0


class PrewarmsOnce:
    """A plugin: one worker of f pre-warmed at the first step."""

    def __init__(self, keep_alive_ms=5000.0):
        self.asked = False
        self.keep = keep_alive_ms

    def prewarm(self, now_ms, snapshot, dispatched, asked):
        if not self.asked:
            self.asked = True
            asked.add(WarmUp("one", "f", Config(1, 1, "3g.20gb"), self.keep))

    def wake_ms(self):
        return None


def prewarms_once(ctx, keep_alive_ms) -> Policy:
    """FaST-GShare's choices and node order, plus :class:`PrewarmsOnce`."""
    return Policy("fastgshare+", ctx, FastGShareProposer(ctx), [PackingOrder(), Starting(ctx), PrewarmsOnce(keep_alive_ms)])


def run(prewarm: bool, keep_alive_ms: float = 5000.0):
    profiles = {"f": profile("f", [(1, 1, "3g.20gb", RUN)], cold_start_ms=COLD)}
    apps = {"one": APP}
    params = EmulatorParams(noise_cv=0.0, warmup_ms=0.0, mig_reconfig_ms=MIG, hop_ms=0.0, prewarm=prewarm)
    pol = prewarms_once(PolicyContext(apps, profiles, mig_reconfig_ms=MIG), keep_alive_ms)
    requests = [Request("a", "one", 0.0), Request("b", "one", 1000.0), Request("c", "one", 1000.0)]
    return Emulation(apps, profiles, pol, requests, np.random.default_rng(0), ClusterSpec(nodes=1), params).run().metrics


def test_a_prewarmed_worker_serves_the_next_batch_warm_and_its_idle_time_is_charged():
    m = run(prewarm=True)
    rate = Prices().gpu_slice * 3 + Prices().vcpu * 1
    first_done = m.per_app["one"].latencies_ms[0]
    ready = MIG + COLD  # started at 0 beside request a's batch, on the GPU's other 3g instance
    assert m.prewarms == 1
    assert m.cold_starts == 1, "b and c both find a warm worker: a's and the pre-warmed one"
    assert m.reconfigured_instances == 2
    assert m.cost_cold == pytest.approx(rate * COLD * 2), "a's batch and the pre-warm each pay one cold start"
    assert m.cost_mig == pytest.approx(rate * MIG * 2)
    idle = Prices().gpu_slice * 3 * ((1000.0 - first_done) + (1000.0 - ready))
    assert m.cost_idle == pytest.approx(idle)
    assert m.hits == 3


def test_without_the_prewarm_the_second_batch_at_once_is_cold():
    m = run(prewarm=False)
    assert m.prewarms == 0 and m.cold_starts == 2


def test_a_prewarmed_worker_past_its_keep_alive_is_gone():
    m = run(prewarm=True, keep_alive_ms=100.0)
    assert m.cold_starts == 2, "the pre-warmed worker expired at 450 ms, before b and c came"
    rate_idle = Prices().gpu_slice * 3
    assert m.cost_idle >= rate_idle * 100.0 - 1e-9
