"""ESG's pool rule in the emulator: f's load gives f a second worker on an idle MIG instance held for g
(g keeps another idle worker on another idle instance), with no MIG change and before any of f's heads
waits; the next pair of f's jobs then runs at once on both."""

from tests.emulator.test_spare_instances import run as scenario


def run(pool: bool):
    return scenario(spare=False, pool=pool)


def test_the_pool_worker_serves_the_next_pair_at_once_without_a_mig_change():
    on, off = run(True).metrics, run(False).metrics
    assert off.prewarms == 0 and on.prewarms >= 1
    assert on.reconfigured_instances == off.reconfigured_instances == 3, "g's three instances, no more"
    assert off.per_app["y"].hits == 2, "y1 and y3: y2 and y4 each wait for the one worker of f"
    assert on.per_app["y"].hits == 4, "y1-y4: each pair runs at once on f's two workers"
    assert on.cost_idle <= off.cost_idle + 1e-6, "the held instances idle at the same price with more workers"
