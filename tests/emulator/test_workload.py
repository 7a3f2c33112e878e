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
    assert 1500 < len(reqs) < 2100
