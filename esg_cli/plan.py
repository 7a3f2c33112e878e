"""``esg plan``: show ESG_1Q's plan for an app (DESIGN §5)."""

from __future__ import annotations

import argparse
import json
import time

from esg.cost import DEFAULT_PRICE_GPU_SLICE, DEFAULT_PRICE_VCPU, Prices
from esg.model import load_app
from esg.planner import Planner, PlanResult
from esg.profiles import load_profiles
from esg_cli.errors import CliError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plan", help="show ESG_1Q's cheapest configuration paths for an app",
                       description="Search the K cheapest configuration paths of an app that meet an SLO. "
                                   "A path's latency is the longest path through the DAG of its "
                                   "configurations' profiled latencies; its cost is resource-time per request.")
    p.add_argument("--app", required=True, help="app file (JSON: name, slo_ms, functions, edges)")
    p.add_argument("--profiles", required=True, help="directory of profile tables <function>.json")
    p.add_argument("--slo-ms", type=float, help="latency SLO in ms (default: the app file's slo_ms)")
    p.add_argument("--top-k", type=int, default=1, help="number of paths to list (default 1)")
    p.add_argument("--exact", action="store_true", help="search the whole app at once (no dominator groups)")
    p.add_argument("--brute-force", action="store_true", help="enumerate every path (the reference)")
    p.add_argument("--max-group", type=int, default=3, help="largest function group searched at once")
    p.add_argument("--price-vcpu", type=float, default=DEFAULT_PRICE_VCPU,
                   help=f"price of one vCPU per ms (default {DEFAULT_PRICE_VCPU})")
    p.add_argument("--price-gpu-slice", type=float, default=DEFAULT_PRICE_GPU_SLICE,
                   help=f"price of one MIG compute slice per ms (default {DEFAULT_PRICE_GPU_SLICE})")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.top_k is None or args.top_k < 1:
        raise CliError(f"--top-k must be at least 1, got {args.top_k}")
    if args.max_group < 1:
        raise CliError(f"--max-group must be at least 1, got {args.max_group}")
    if args.price_vcpu < 0 or args.price_gpu_slice < 0:
        raise CliError("--price-vcpu and --price-gpu-slice must be non-negative")
    app = load_app(args.app)
    slo = app.slo_ms if args.slo_ms is None else args.slo_ms
    if not slo > 0:
        raise CliError(f"--slo-ms must be a positive number of milliseconds, got {args.slo_ms:g}")
    profiles = load_profiles(args.profiles, app.functions)
    planner = Planner(app, profiles, Prices(args.price_vcpu, args.price_gpu_slice), args.max_group,
                      exact=args.exact, brute_force=args.brute_force)
    t0 = time.perf_counter()
    result = planner.plan(slo, args.top_k)
    search_ms = (time.perf_counter() - t0) * 1e3
    if args.json:
        print(json.dumps({"feasible": result.feasible, "paths": [p.to_dict() for p in result.paths],
                          "search_ms": search_ms}))
    else:
        print(render(app.name, slo, result, search_ms, planner))
    return 0


def render(name: str, slo: float, result: PlanResult, search_ms: float, planner: Planner) -> str:
    lines = [f"app {name}: SLO {slo:g} ms, groups {' | '.join(','.join(g) for g in result.groups)}"]
    if not result.feasible:
        lines.append(f"no feasible path: the fastest configurations take "
                     f"{planner.fastest_latency():.1f} ms > {slo:g} ms")
    for rank, path in enumerate(result.paths, 1):
        lines.append(f"#{rank}  cost {path.cost:.2f}  latency {path.latency_ms:.1f} ms")
        width = max(len(f) for f in path.configs)
        for f, c in path.configs.items():
            lat = planner.profiles[f].latency(c)
            lines.append(f"    {f:<{width}}  batch {c.batch:>3}  vcpus {c.vcpus:>2}  "
                         f"gpu {c.gpu or 'cpu':<10} {lat:8.1f} ms")
    lines.append(f"search {search_ms:.2f} ms")
    return "\n".join(lines)
