"""The live path's overhead per batch in the emulator (``hop_ms``, ``hop_log_sd``, ``hop_samples_ms``), and
the same overhead measured on a live decision log (``esg_cli.agreement``): one definition on both sides."""

import math

import numpy as np
import pytest

from esg.emulator import ClusterSpec, Emulation, EmulatorParams
from esg.events import Request
from esg.model import App
from esg.policies import make_policy
from esg.policies.base import PolicyContext
from esg_cli import agreement
from esg_cli.replay import ready_ms
from tests.core.helpers import profile

APP = App("one", 500.0, ("f",), ())


def waits(hop_ms: float, hop_log_sd: float, n: int = 400,
          samples: tuple[float, ...] = ()) -> tuple[list[float], list[float]]:
    """Each request's latency less its run, and the runs, on one warm CPU worker (no cold start, no
    noise), requests far apart."""
    profiles = {"f": profile("f", [(1, 1, None, 20.0)], cold_start_ms=0.0)}
    params = EmulatorParams(noise_cv=0.0, warmup_ms=0.0, hop_ms=hop_ms, hop_log_sd=hop_log_sd,
                            hop_samples_ms=samples, sched_ms_per_step=0.0, sched_ms_per_unit=0.0)
    em = Emulation({"one": APP}, profiles, make_policy("fastgshare", PolicyContext({"one": APP}, profiles)),
                   [Request(f"r{i}", "one", 1000.0 * i) for i in range(n)], np.random.default_rng(0),
                   ClusterSpec(nodes=1), params)
    lat = em.run().metrics.per_app["one"].latencies_ms
    return [x - 20.0 for x in lat], lat


def test_a_constant_hop_is_paid_once_per_batch():
    overhead, _ = waits(7.0, 0.0, 20)
    assert overhead == pytest.approx([7.0] * 20)


def test_a_spread_hop_is_log_normal_around_its_median():
    overhead, _ = waits(10.0, 0.9)
    logs = np.log(overhead)
    assert np.exp(np.median(logs)) == pytest.approx(10.0, rel=0.15)
    assert np.std(logs) == pytest.approx(0.9, rel=0.15)


def test_measured_hops_are_drawn_one_per_batch_each_as_often():
    samples = (1.5, 2.0, 3.0, 14.0)
    overhead, _ = waits(99.0, 0.0, 800, samples)
    drawn = np.round(overhead, 9)
    assert set(drawn) == set(samples)                       # only measured hops, never --hop-ms
    counts = [int(np.sum(drawn == h)) for h in samples]
    assert all(150 <= c <= 250 for c in counts), counts     # uniform: 200 each expected
    assert waits(99.0, 0.0, 20, (4.0,))[0] == pytest.approx([4.0] * 20)


def test_hop_samples_are_written_and_read_back_and_a_bad_file_is_named(tmp_path):
    from esg.errors import EsgError
    from esg_files import read_hop_samples, write_hop_samples
    decisions = [{"cold": False, "reconfigured": 0, "run_ms": 5.0, "ready_ms": 0.0, "done_ms": 5.0 + h}
                 for h in (2.5, 3.25, -0.4)]                 # whole-ms timestamps can put a hop below 0
    path = agreement.write_live_hops(decisions, tmp_path / "hops.txt")
    assert read_hop_samples(path) == (2.5, 3.25, 0.0)
    write_hop_samples(tmp_path / "two.txt", [1.0, 2.0], "a comment")
    assert read_hop_samples(tmp_path / "two.txt") == (1.0, 2.0)
    for text, needle in (("", "no hop samples"), ("1\nfast\n", ":2:"), ("-1\n", "0 or more"),
                         ("inf\n", "finite")):
        (tmp_path / "bad.txt").write_text(text)
        with pytest.raises(EsgError, match=needle):
            read_hop_samples(tmp_path / "bad.txt")


def test_the_spread_leaves_the_execution_draws_alone():
    """The hop has its own generator: the run times (here noisy) are the same with or without it."""
    profiles = {"f": profile("f", [(1, 1, None, 20.0)], cold_start_ms=0.0)}
    runs = []
    for sd in (0.0, 1.0):
        class Recording(Emulation):
            drawn: list[float]

            def _next_noise(self):
                self.drawn.append(super()._next_noise())
                return self.drawn[-1]

        em = Recording({"one": APP}, profiles, make_policy("fastgshare", PolicyContext({"one": APP}, profiles)),
                       [Request(f"r{i}", "one", 1000.0 * i) for i in range(30)], np.random.default_rng(3),
                       ClusterSpec(nodes=1), EmulatorParams(warmup_ms=0.0, hop_ms=5.0, hop_log_sd=sd))
        em.drawn = []
        em.run()
        runs.append(em.drawn)
    assert len(runs[0]) == 30 and runs[0] == runs[1]


def _batch(batch_id, jobs, sent, done, run, enqueued, decided, cold=False, reconfigured=0):
    return {"type": "batch", "batch_id": batch_id, "jobs": jobs, "sent_ms": sent, "done_ms": done, "run_ms": run,
            "enqueued_ms": enqueued, "decided_ms": decided, "cold": cold, "reconfigured": reconfigured}


def test_the_live_hop_runs_from_when_a_batch_could_be_decided_to_its_answer():
    """Accepted at 100; its first batch sent at 104, answered at 120 after a 10 ms run (hop 10); its second
    sent at 123 after the first's answer, answered at 140 after 8 ms (hop 12). A third request's batch
    waited in its queue (placed by a later step than the one that queued it): queueing, not a hop."""
    log = [{"type": "request", "id": "a", "arrival_ms": 100.0},
           {"type": "request", "id": "b", "arrival_ms": 100.0},
           _batch("1", ["a"], 104.0, 120.0, 10.0, 101.0, 101.0),
           _batch("2", ["a"], 123.0, 140.0, 8.0, 121.0, 121.0),
           _batch("3", ["b"], 400.0, 420.0, 10.0, 101.0, 390.0)]
    ready = ready_ms(log)
    assert ready == {"1": 100.0, "2": 120.0, "3": 100.0}
    decisions = [dict(e, ready_ms=ready[e["batch_id"]]) for e in log if e["type"] == "batch"]
    assert agreement.live_hops_ms(decisions) == [10.0, 12.0]
    assert agreement.live_hop_ms(decisions) == 11.0
    assert agreement.live_hop_log_sd(decisions) == 0.0, "too few batches to read a spread from"


def test_the_live_hop_spread_of_log_normal_hops_is_their_log_sd():
    rng = np.random.default_rng(5)
    hops = 8.0 * np.exp(0.7 * rng.standard_normal(4000))
    decisions = [{"cold": False, "reconfigured": 0, "run_ms": 5.0, "ready_ms": 0.0, "done_ms": 5.0 + h}
                 for h in hops]
    assert agreement.live_hop_ms(decisions) == pytest.approx(8.0, rel=0.05)
    assert agreement.live_hop_log_sd(decisions) == pytest.approx(0.7, rel=0.05)
    assert not math.isnan(agreement.live_hop_ms(decisions))
