import numpy as np

from esg.emulator.clock import EventHeap
from esg.emulator.workload import AZURE_SAMPLE_LOG_SD, generate, map_trace_functions, minute_factors


def test_heap_breaks_ties_by_insertion():
    h = EventHeap()
    for i in range(5):
        h.push(1.0, 1, i)
    assert [h.pop().payload for _ in range(5)] == list(range(5))


def test_synthetic_rate_and_burstiness():
    f = minute_factors(20_000, np.random.default_rng(0))
    assert abs(f.mean() - 1) < 0.01
    assert abs(np.log(f).std() - AZURE_SAMPLE_LOG_SD) < 0.01
    reqs = generate(["a", "b"], 50.0, 600.0, np.random.default_rng(1))
    assert abs(len(reqs) / 600.0 - 50.0) < 5
    assert all(x.arrival_ms <= y.arrival_ms for x, y in zip(reqs, reqs[1:]))


def test_trace_replay_scales_to_the_target_rate():
    rows = [("f1", [60, 0, 120]), ("f2", [0, 60, 0]), ("f3", [30, 30, 30])]
    per_app = map_trace_functions(rows, ["x", "y"])
    assert sum(sum(v) for v in per_app.values()) == 330
    reqs = generate(["x", "y"], 10.0, 180.0, np.random.default_rng(2), per_app)
    # every function went to x: x gets its equal share (5/s), y, with no trace function, none
    assert per_app["y"] == [0.0, 0.0, 0.0] and {r.app for r in reqs} == {"x"}
    assert 750 < len(reqs) < 1050


def test_trace_replay_gives_each_app_an_equal_share_with_its_own_shape():
    per_app = {"x": [600.0, 0.0, 0.0], "y": [10.0, 10.0, 10.0]}  # x: one burst; y: flat and small
    reqs = generate(["x", "y"], 20.0, 3 * 60.0, np.random.default_rng(3), per_app)
    x = np.array([r.arrival_ms for r in reqs if r.app == "x"])
    y = np.array([r.arrival_ms for r in reqs if r.app == "y"])
    assert abs(len(x) - len(y)) < 0.1 * len(y), "equal shares of the rate whatever the trace's volumes"
    assert (x < 60_000).all(), "x keeps its shape: everything in its first minute"
    assert abs(len(y) / 180.0 - 10.0) < 1.0


def test_a_compressed_trace_minute_replays_more_of_the_trace():
    per_app = {"x": [60.0, 0.0, 60.0, 0.0]}
    reqs = generate(["x"], 10.0, 8.0, np.random.default_rng(4), per_app, minute_s=2.0)
    t = np.array([r.arrival_ms for r in reqs])
    assert ((t < 2000) | ((t >= 4000) & (t < 6000))).all(), "minutes 0 and 2 only, 2 s each"
    assert abs(len(t) / 8.0 - 10.0) < 3.0


def test_load_levels_count_every_compute_slice(apps):
    from esg.emulator.levels import load_rate_rps
    mean_l = sum(a.slo_ms for a in apps.values()) / len(apps)
    assert np.isclose(load_rate_rps("heavy", apps, 2), 0.9 * 2 * 7 * 1000 / mean_l)  # A100: 7 compute slices
    assert np.isclose(load_rate_rps("light", apps, 3, None), 0.3 * 3 * 1000 / mean_l)  # CPU-only: one at a time
