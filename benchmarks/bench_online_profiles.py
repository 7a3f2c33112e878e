"""How long online profiles take to catch up with the offline tables, and what exploring costs.

Usage: ``PYTHONPATH=. python benchmarks/bench_online_profiles.py [--load heavy] [--slo moderate]
[--seconds 300] [--nodes 16] [--window-s 10] [--prior-spread S]``.

The same workload (the four apps, the heavy load level by default) runs twice under ESG in the
emulator: with the A100 tables (fully profiled), and with ``--profiles-online`` (every function
unprofiled, or a prior perturbed by up to ``1+S``). It prints the hit rate of each run per window of
arrivals, the first second from which the online run's hit rate stays within 2 points of the profiled
run's (over every later window taken together), the share of calls explored, and the online run's
resource cost relative to the profiled one. Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import dataclasses
import glob

import numpy as np

from esg.emulator import ClusterSpec, Emulation, EmulatorParams
from esg.emulator.levels import SLO_LEVELS, load_rate_rps
from esg.emulator.metrics import Metrics
from esg.emulator.online import OnlineLearning, perturbed
from esg.emulator.workload import generate
from esg.policies import make_policy
from esg.policies.base import PolicyContext
from esg_files import load_app, load_profiles


class TimedMetrics(Metrics):
    """The emulator's metrics, with each measured request's arrival and whether it met its SLO."""

    def __init__(self) -> None:
        super().__init__()
        self.timeline: list[tuple[float, bool]] = []

    def outcome(self, o) -> None:
        super().outcome(o)
        self.timeline.append((o.arrival_ms, o.slo_hit))


def run(apps, truth, reqs, nodes: int, online: OnlineLearning | None):
    policy = make_policy("esg", PolicyContext(apps, online.tables if online else truth))
    em = Emulation(apps, truth, policy, reqs, np.random.default_rng(1), ClusterSpec(nodes),
                   EmulatorParams(warmup_ms=0.0), online=online)
    em.metrics = TimedMetrics()
    result = em.run()
    return em.metrics, result


def windows(timeline, width_ms: float, end_ms: float) -> list[tuple[int, int]]:
    n = int(end_ms // width_ms) + 1
    out = [[0, 0] for _ in range(n)]
    for t, hit in timeline:
        w = min(int(t // width_ms), n - 1)
        out[w][0] += hit
        out[w][1] += 1
    return [(h, c) for h, c in out]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--load", default="heavy")
    ap.add_argument("--slo", default="moderate")
    ap.add_argument("--seconds", type=float, default=300.0)
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--window-s", type=float, default=10.0)
    ap.add_argument("--prior-spread", type=float, default=None)
    ap.add_argument("--explore-fraction", type=float, default=0.05)
    args = ap.parse_args()
    base = {a.name: a for a in map(load_app, sorted(glob.glob("apps/*.json")))}
    apps = {n: dataclasses.replace(a, slo_ms=round(a.slo_ms * SLO_LEVELS[args.slo], 3)) for n, a in base.items()}
    truth = load_profiles("profiles/tables/a100", sorted({f for a in apps.values() for f in a.functions}))
    reqs = generate(list(apps), load_rate_rps(args.load, base, args.nodes), args.seconds, np.random.default_rng(0))
    priors = {} if args.prior_spread is None else {
        f: perturbed(p, args.prior_spread, np.random.default_rng(7)) for f, p in sorted(truth.items())}
    online = OnlineLearning(truth, apps, priors=priors, explore_fraction=args.explore_fraction)
    ref_m, ref = run(apps, truth, reqs, args.nodes, None)
    on_m, on = run(apps, truth, reqs, args.nodes, online)
    end = args.seconds * 1000
    w = args.window_s * 1000
    ref_w, on_w = windows(ref_m.timeline, w, end), windows(on_m.timeline, w, end)
    ref_rate = sum(h for h, _ in ref_w) / max(1, sum(c for _, c in ref_w))
    print(f"{len(reqs)} requests over {args.seconds:g} s, {args.nodes} nodes, load {args.load}, SLO {args.slo}; "
          f"start: {'unprofiled' if args.prior_spread is None else f'prior off by up to x{1 + args.prior_spread:g}'}")
    print(f"{'window':>8} {'profiled':>9} {'online':>7}")
    for i, ((rh, rc), (oh, oc)) in enumerate(zip(ref_w, on_w)):
        print(f"{i * args.window_s:>7.0f}s {rh / rc if rc else 0:>9.3f} {oh / oc if oc else 0:>7.3f}")
    converged = None
    for i in range(len(on_w)):
        h = sum(x for x, _ in on_w[i:])
        c = sum(x for _, x in on_w[i:])
        rh = sum(x for x, _ in ref_w[i:])
        rc = sum(x for _, x in ref_w[i:])
        if c and rc and h / c >= rh / rc - 0.02:
            converged = i * args.window_s
            break
    print(f"hit rate: profiled {ref_rate:.3f}, online {on.metrics.hits / max(1, on.metrics.completed + on.metrics.failed):.3f}"
          f" (profiled run {ref.metrics.hits / max(1, ref.metrics.completed + ref.metrics.failed):.3f} by the same count)")
    print("within 2 points of the profiled run from: "
          + (f"{converged:g} s of the workload" if converged is not None else "never in this run"))
    jobs = sum(len(a.functions) for a in apps.values()) / len(apps) * len(reqs)
    print(f"explored: {online.explorer.batches} batches, {online.explorer.jobs} jobs "
          f"({online.explorer.jobs / jobs:.1%} of about {jobs:.0f} function calls); "
          f"tables changed {online.changes} times")
    print(f"cost: online / profiled = {on.metrics.cost / ref.metrics.cost:.3f}")


if __name__ == "__main__":
    main()
