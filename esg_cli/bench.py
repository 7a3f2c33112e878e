"""``esg bench search``: how fast ESG_1Q plans, measured against the brute-force reference in one run.

(a) A 3-function chain whose functions each have 256 profiled configurations (8 batch sizes × 4 vCPU
counts × 8 GPU choices on an A100-40GB, latencies from a monotone model with noise): A* top-K over
SLOs from tight to loose (p50/p99/mean), and the brute force on a few of the same SLOs, with the
speedup ratio and whether A* found the brute force's optimal cost.

(b) A 7-function DAG app with the same grids planned with dominator groups (≤ ``--max-group``): p50/p99
over the SLOs. The exact plan (one A* over the whole app, no grouping) is intractable at 7 × 256, so
grouped and exact are compared on a 32-configuration grid: p50/p99 of each and the grouped plan's cost
relative to the exact optimum.

Speed is reported, never asserted: the figures depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from collections.abc import Callable, Sequence

from esg.cost import Prices
from esg.mig import compute_slices
from esg.model import App, Config
from esg.planner import Planner, build_options
from esg.profiles import Profile, ProfileEntry
from esg.search import Group, astar_top_k, brute_force_top_k

GPU_MODEL = "A100-40GB"
BATCHES = (1, 2, 4, 8, 16, 32, 64, 128)
VCPUS = (1, 2, 4, 8)
GPUS = (None, "1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb")
GRID = (BATCHES, VCPUS, GPUS)  # 8 × 4 × 8 = 256 configurations
SMALL_GRID = ((1, 4, 16, 64), (1, 4), (None, "1g.5gb", "3g.20gb", "7g.40gb"))  # 32, for the exact reference

CHAIN = App("chain3", 1000.0, ("decode", "detect", "classify"), (("decode", "detect"), ("detect", "classify")))
SEVEN = App("dag7", 1000.0, ("pre", "det-a", "det-b", "merge", "embed", "cls", "caption"),
            (("pre", "det-a"), ("pre", "det-b"), ("det-a", "merge"), ("det-b", "merge"),
             ("merge", "embed"), ("embed", "cls"), ("embed", "caption")))
BASE_MS = {"decode": 12.0, "detect": 90.0, "classify": 45.0, "pre": 8.0, "det-a": 70.0, "det-b": 110.0,
           "merge": 5.0, "embed": 40.0, "cls": 30.0, "caption": 150.0}


def grid_profile(function: str, base_ms: float, seed: int, grid=GRID) -> Profile:
    """The configurations of one function: batch × vCPUs × (CPU or a MIG profile), 256 by default.

    On CPU a batch of b takes base·b^0.9 / v^0.7 (vCPUs help sub-linearly); on a MIG slice of s compute
    slices it takes a vCPU-bound launch overhead plus base·b^0.6 / (6·s^0.8) (a GPU batches well and
    scales with its slices; 1g.10gb's extra memory helps a little). Noise ±5%.
    """
    rng = random.Random(f"{seed}:{function}")
    entries = []
    batches, vcpus, gpus = grid
    for b in batches:
        for v in vcpus:
            for g in gpus:
                if g is None:
                    lat = base_ms * b ** 0.9 / v ** 0.7
                else:
                    s = compute_slices(GPU_MODEL, g) * (1.1 if g == "1g.10gb" else 1.0)
                    lat = 2.0 / v ** 0.5 + 0.3 * b / v + base_ms * b ** 0.6 / (6.0 * s ** 0.8)
                lat *= rng.uniform(0.95, 1.05)
                entries.append(ProfileEntry(Config(b, v, g), round(lat, 3)))
    return Profile(function, GPU_MODEL, tuple(entries))


def profiles_for(app: App, seed: int, grid=GRID) -> dict[str, Profile]:
    return {f: grid_profile(f, BASE_MS[f], seed, grid) for f in app.functions}


def slo_range(planner: Planner, n: int) -> list[float]:
    """``n`` SLOs spaced geometrically from the fastest possible latency to a loose one (where every
    function can take its cheapest configuration)."""
    tight = planner.fastest_latency()
    cheapest = {f: planner.options(f)[0].latency_ms for f in planner.app.functions}
    from esg.slo_split import group_latency

    loose = max(group_latency(planner.app, planner.app.topo_order, cheapest), tight) * 1.1
    return [tight * (loose / tight) ** (i / (n - 1)) for i in range(n)]


def _time(fn: Callable[[], object], repeat: int) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, (time.perf_counter() - t0) * 1e3)
    return best, out


def _pct(xs: Sequence[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(q / 100 * (len(s) - 1))))]


def run_bench(n_slos: int = 60, brute_slos: int = 4, k: int = 5, max_group: int = 3, seed: int = 7,
              repeat: int = 3, exact_slos: int = 10) -> dict:
    # (a) 3 × 256 chain: A* over every SLO, brute force on a few of them
    chain_profiles = profiles_for(CHAIN, seed)
    planner = Planner(CHAIN, chain_profiles, exact=True)
    group = Group(CHAIN.topo_order, CHAIN.edges,
                  {f: build_options(chain_profiles[f], Prices()) for f in CHAIN.functions})
    slos = slo_range(planner, n_slos)
    astar_ms, astar_paths = [], []
    for slo in slos:
        ms, paths = _time(lambda slo=slo: astar_top_k(group, slo, k), repeat)
        astar_ms.append(ms)
        astar_paths.append(paths)
    picks = sorted({round(i * (n_slos - 1) / max(1, brute_slos - 1)) for i in range(brute_slos)})
    brute = []
    for i in picks:
        ms, ref = _time(lambda i=i: brute_force_top_k(group, slos[i], k), 1)
        fast = astar_paths[i]
        same = len(ref) == len(fast) and all(abs(a.cost - b.cost) <= 1e-9 * max(1.0, abs(b.cost))
                                             for a, b in zip(fast, ref))
        brute.append({"slo_ms": slos[i], "brute_ms": ms, "astar_ms": astar_ms[i],
                      "ratio": ms / astar_ms[i], "optimal": same,
                      "cost": ref[0].cost if ref else None})
    chain = {"functions": len(CHAIN.functions), "configs": len(GPUS) * len(BATCHES) * len(VCPUS),
             "k": k, "slos": len(slos), "slo_min_ms": slos[0], "slo_max_ms": slos[-1],
             "astar_p50_ms": _pct(astar_ms, 50), "astar_p99_ms": _pct(astar_ms, 99),
             "astar_mean_ms": statistics.fmean(astar_ms), "astar_max_ms": max(astar_ms),
             "feasible": sum(bool(p) for p in astar_paths), "brute_force": brute}

    # (b) 7-function DAG: grouped planning at 256 configurations per function; the exact optimum (one A*
    # over the whole app) is intractable there, so grouped and exact are compared on a 32-config grid
    dag_profiles = profiles_for(SEVEN, seed)
    grouped = Planner(SEVEN, dag_profiles, max_group=max_group)
    slos7 = slo_range(Planner(SEVEN, dag_profiles, exact=True), n_slos)
    g_ms = [_time(lambda slo=slo: grouped.plan(slo, k), repeat)[0] for slo in slos7]
    small = profiles_for(SEVEN, seed, SMALL_GRID)
    small_exact = Planner(SEVEN, small, exact=True)
    small_grouped = Planner(SEVEN, small, max_group=max_group)
    slos_small = slo_range(small_exact, exact_slos)
    sg_ms, e_ms, ratios, g_infeasible = [], [], [], 0
    for slo in slos_small:
        ms_g, res_g = _time(lambda slo=slo: small_grouped.plan(slo, k), repeat)
        ms_e, res_e = _time(lambda slo=slo: small_exact.plan(slo, k), 1)
        sg_ms.append(ms_g)
        e_ms.append(ms_e)
        if res_g.feasible and res_e.feasible:
            ratios.append(res_g.paths[0].cost / res_e.paths[0].cost)
        elif res_e.feasible:
            g_infeasible += 1
    groups = grouped.plan(slos7[-1], 1).groups
    dag = {"functions": len(SEVEN.functions), "groups": [list(g) for g in groups], "k": k,
           "configs": len(GPUS) * len(BATCHES) * len(VCPUS), "slos": len(slos7),
           "slo_min_ms": slos7[0], "slo_max_ms": slos7[-1],
           "grouped_p50_ms": _pct(g_ms, 50), "grouped_p99_ms": _pct(g_ms, 99),
           "small_configs": len(SMALL_GRID[0]) * len(SMALL_GRID[1]) * len(SMALL_GRID[2]),
           "small_slos": len(slos_small),
           "small_grouped_p50_ms": _pct(sg_ms, 50), "small_grouped_p99_ms": _pct(sg_ms, 99),
           "exact_p50_ms": _pct(e_ms, 50), "exact_p99_ms": _pct(e_ms, 99),
           "cost_ratio_mean": statistics.fmean(ratios) if ratios else None,
           "cost_ratio_max": max(ratios) if ratios else None,
           "grouped_infeasible_where_exact_feasible": g_infeasible}
    return {"chain": chain, "dag": dag}


def render(r: dict) -> str:
    c, d = r["chain"], r["dag"]
    out = [f"(a) ESG_1Q A*, {c['functions']}-function chain × {c['configs']} configurations, top-{c['k']}, "
           f"{c['slos']} SLOs {c['slo_min_ms']:.1f}..{c['slo_max_ms']:.1f} ms ({c['feasible']} feasible)",
           f"    A*   p50 {c['astar_p50_ms']:7.3f} ms   p99 {c['astar_p99_ms']:7.3f} ms   "
           f"mean {c['astar_mean_ms']:7.3f} ms   max {c['astar_max_ms']:7.3f} ms",
           "    brute force on the same instance:",
           f"    {'SLO ms':>10} {'brute ms':>10} {'A* ms':>8} {'ratio':>8}  optimal"]
    for b in c["brute_force"]:
        out.append(f"    {b['slo_ms']:10.1f} {b['brute_ms']:10.1f} {b['astar_ms']:8.3f} {b['ratio']:7.0f}x  "
                   f"{'yes' if b['optimal'] else 'NO'}")
    groups = " | ".join(",".join(g) for g in d["groups"])
    ratio = ("n/a" if d["cost_ratio_mean"] is None else
             f"mean {d['cost_ratio_mean']:.3f}, max {d['cost_ratio_max']:.3f}")
    out += [f"(b) {d['functions']}-function DAG, top-{d['k']}, groups {groups}",
            f"    {d['configs']} configs/function, {d['slos']} SLOs {d['slo_min_ms']:.1f}..{d['slo_max_ms']:.1f} ms:",
            f"      grouped  p50 {d['grouped_p50_ms']:7.3f} ms   p99 {d['grouped_p99_ms']:7.3f} ms",
            f"    {d['small_configs']} configs/function (exact is intractable at 256), {d['small_slos']} SLOs:",
            f"      grouped  p50 {d['small_grouped_p50_ms']:7.3f} ms   p99 {d['small_grouped_p99_ms']:7.3f} ms",
            f"      exact    p50 {d['exact_p50_ms']:7.3f} ms   p99 {d['exact_p99_ms']:7.3f} ms",
            f"      grouped cost / exact optimum: {ratio}; grouped infeasible where exact feasible: "
            f"{d['grouped_infeasible_where_exact_feasible']}"]
    return "\n".join(out)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="benchmarks of the core")
    bsub = p.add_subparsers(dest="bench_command", required=True, metavar="BENCH_COMMAND")
    s = bsub.add_parser("search", help="ESG_1Q A* vs brute force (3×256 chain) and grouped vs exact (7 functions)",
                        description=__doc__)
    s.add_argument("--slos", type=int, default=60, help="number of SLOs from tight to loose (default 60)")
    s.add_argument("--brute-slos", type=int, default=4, help="SLOs also solved by brute force (default 4)")
    s.add_argument("--top-k", type=int, default=5, help="paths per search (default 5)")
    s.add_argument("--exact-slos", type=int, default=10,
                   help="SLOs of the grouped-vs-exact comparison on the 32-config grid (default 10)")
    s.add_argument("--max-group", type=int, default=3, help="largest group in grouped planning (default 3)")
    s.add_argument("--seed", type=int, default=7, help="seed of the profile noise (default 7)")
    s.add_argument("--repeat", type=int, default=3, help="timings per SLO, the fastest kept (default 3)")
    s.add_argument("--json", action="store_true", help="print JSON")
    s.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from esg_cli.errors import CliError

    if args.slos < 2 or args.exact_slos < 2 or args.brute_slos < 0 or args.top_k < 1 or args.max_group < 1 or args.repeat < 1:
        raise CliError("--slos and --exact-slos must be ≥ 2, --brute-slos ≥ 0, --top-k, --max-group and --repeat ≥ 1")
    if args.brute_slos > args.slos:
        raise CliError(f"--brute-slos {args.brute_slos} is more than --slos {args.slos}: the brute force solves "
                       f"some of the same SLOs")
    r = run_bench(args.slos, args.brute_slos, args.top_k, args.max_group, args.seed, args.repeat,
                  args.exact_slos)
    print(json.dumps(r, indent=1) if args.json else render(r))
    return 0
