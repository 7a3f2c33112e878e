"""What the scheduler's metrics cost per activation, and what caching the labelled children saves.

    PYTHONPATH=. python benchmarks/bench_metrics.py [--n 20000]

A two-function app's activation touches the metrics at its accept, at each of its two batches (sent and
answered) and at its outcome. Measured in one run, on one machine:

* **per-app model** -- :class:`controller_plugin.metrics.Metrics` as the scheduler calls it (labelled
  children cached, a step's outcomes folded per label);
* **labels() each call** -- the same series on ``prometheus_client``'s own counters and histograms,
  each update through ``metric.labels(...)``: the straightforward way to write the per-app model;
* **unlabelled** -- the metrics the scheduler had before they carried ``app`` and ``function`` (one
  counter for decisions, one histogram of batch sizes, SLO results by result only): the floor of the
  earlier model.

Ratios, never thresholds; ``benchmarks/bench_scheduler.py`` measures the whole service.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from prometheus_client import CollectorRegistry, Counter, Histogram  # noqa: E402

from controller_plugin.metrics import Metrics  # noqa: E402
from esg.cluster import Fit, SliceRef  # noqa: E402
from esg.events import Dispatch, RequestOutcome  # noqa: E402
from esg.model import Config, Job  # noqa: E402

APPS = [f"guest/app{i}" for i in range(4)]
FUNCTIONS = ("guest/pre", "guest/cls")


def work(n: int) -> list[tuple[str, list[Dispatch], RequestOutcome]]:
    s = SliceRef("1g.5gb", 0)
    out = []
    for i in range(n):
        app = APPS[i % len(APPS)]
        batches = [Dispatch(f"b{i}-{f}", app, f, (Job(f"j{i}", f"r{i}", app, f, 0.0, 100.0, 0.0),),
                            Config(1, 1, "1g.5gb"), Fit("node0", s, warm_worker=(f, s))) for f in FUNCTIONS]
        out.append((app, batches, RequestOutcome(f"r{i}", app, 0.0, 40.0 + i % 50, 60.0, True)))
    return out


def per_app_model(items) -> float:
    m = Metrics()
    t0 = time.perf_counter()
    for app, batches, outcome in items:
        m.accepted(app, 60.0)
        m.sent(batches)
        for d in batches:
            m.batch_done(d, 1.0, 2.0, 20.0, 15.0, False)
        m.outcomes([outcome])
    return time.perf_counter() - t0


def labels_each_call(items) -> float:
    r = CollectorRegistry()
    latency = (.001, .0025, .005, .01, .025, .05, .075, .1, .15, .2, .3, .5, .75, 1, 2.5, 5, 10, 30, 60)
    requests = Counter("esg_requests_total", "", ["app"], registry=r)
    slo = Counter("esg_slo_total", "", ["app", "result"], registry=r)
    request_seconds = Histogram("esg_request_seconds", "", ["app"], buckets=latency, registry=r)
    stage_seconds = Histogram("esg_stage_seconds", "", ["app", "function", "stage"], buckets=latency, registry=r)
    decisions = Counter("esg_decisions_total", "", ["app", "function", "placement"], registry=r)
    jobs = Counter("esg_jobs_total", "", ["app", "function"], registry=r)
    batch = Histogram("esg_batch_size", "", ["app", "function"], buckets=(1, 2, 4, 8, 16, 32, 64), registry=r)
    t0 = time.perf_counter()
    for app, batches, outcome in items:
        requests.labels(app).inc()
        for d in batches:
            decisions.labels(app, d.function, "warm").inc()
            jobs.labels(app, d.function).inc(len(d.jobs))
            batch.labels(app, d.function).observe(len(d.jobs))
            for stage, v in (("queue", .001), ("dispatch", .001), ("run", .015), ("return", .003)):
                stage_seconds.labels(app, d.function, stage).observe(v)
        slo.labels(app, "hit" if outcome.slo_hit else "miss").inc()
        request_seconds.labels(app).observe(outcome.latency_ms / 1000)
    return time.perf_counter() - t0


def unlabelled(items) -> float:
    r = CollectorRegistry()
    decisions = Counter("esg_decisions_total", "", registry=r)
    batch = Histogram("esg_batch_size", "", buckets=(1, 2, 4, 8, 16, 32, 64), registry=r)
    slo = Counter("esg_slo_total", "", ["result"], registry=r)
    t0 = time.perf_counter()
    for _app, batches, outcome in items:
        for d in batches:
            batch.observe(len(d.jobs))
        decisions.inc(len(batches))
        slo.labels("hit" if outcome.slo_hit else "miss").inc()
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=20000, help="activations (two batches each)")
    ap.add_argument("--repeat", type=int, default=5, help="runs of each, the fastest kept")
    args = ap.parse_args()
    items = work(args.n)
    best = {name: min(fn(items) for _ in range(args.repeat)) for name, fn in
            (("per-app model", per_app_model), ("labels() each call", labels_each_call), ("unlabelled", unlabelled))}
    base = best["per-app model"]
    print(f"{args.n} activations of a two-function app, fastest of {args.repeat} runs")
    print(f"{'metrics':<22}{'us/activation':>15}{'x per-app model':>17}")
    for name, t in best.items():
        print(f"{name:<22}{t / args.n * 1e6:>15.2f}{t / base:>16.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
