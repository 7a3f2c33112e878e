"""ESG's spare-instance rule in the emulator: a head of f that waited for f's busy worker gives f a second
worker on an idle MIG instance held for g (g keeps another idle worker on another idle instance), with
no MIG change; the next
pair of f's jobs then runs at once on both."""

import numpy as np

from esg.emulator import ClusterSpec, Emulation, EmulatorParams
from esg.events import Request
from esg.model import App
from esg.policies.base import PolicyContext
from tests.core.helpers import esg, profile

X = App("x", 5000.0, ("g",), ())
Y = App("y", 100.0, ("f",), ())
COLD, MIG, RUN_G, RUN_F = 300.0, 50.0, 20.0, 60.0


def run(spare: bool, pool: bool = False):
    """The scenario above with ESG's spare-instance rule and (``tests/emulator/test_pool_sizing.py``) its
    pool rule each switched on or off."""
    profiles = {"g": profile("g", [(1, 1, "1g.5gb", RUN_G)], cold_start_ms=COLD),
                "f": profile("f", [(1, 1, "1g.5gb", RUN_F)], cold_start_ms=COLD)}
    apps = {"x": X, "y": Y}
    params = EmulatorParams(noise_cv=0.0, warmup_ms=0.0, mig_reconfig_ms=MIG, hop_ms=0.0)
    policy = esg(PolicyContext(apps, profiles, mig_reconfig_ms=MIG), spare_instances=spare,
                       pool_sizing=pool)
    requests = [Request("x0", "x", 0.0), Request("x1", "x", 0.0), Request("x2", "x", 0.0),  # g: 3 workers, in time
                Request("y0", "y", 1000.0),  # f's first worker, beside one of g's (a cold start: y0 misses)
                Request("y1", "y", 2000.0), Request("y2", "y", 2000.0),  # with f's one worker y2 waits: a miss
                Request("y3", "y", 3000.0), Request("y4", "y", 3000.0)]
    return Emulation(apps, profiles, policy, requests, np.random.default_rng(0), ClusterSpec(nodes=1), params).run()


def test_the_spare_worker_serves_the_next_pair_at_once_without_a_mig_change():
    on, off = run(True).metrics, run(False).metrics
    assert on.prewarms == 1 and off.prewarms == 0
    assert on.reconfigured_instances == off.reconfigured_instances == 3, "g's three instances, no more"
    assert off.per_app["y"].hits == 2, "y1 and y3: y2 and y4 each wait for the one worker of f"
    assert on.per_app["y"].hits == 3, "y1, y3 and y4: y4 runs on the worker beside g's"
    assert on.cost_idle <= off.cost_idle + 1e-6, "the spare instance idles at the same price with two workers"
