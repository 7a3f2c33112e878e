"""``esg plan``: show ESG_1Q's plan for an app (``docs/architecture.md`` §6)."""

from __future__ import annotations

import argparse
import json
import time

from esg.cost import DEFAULT_PRICE_GPU_SLICE, DEFAULT_PRICE_VCPU, Prices
from esg.model import App
from esg.planner import Planner, PlanResult
from esg.profiles import Profile
from esg.slo_split import DEFAULT_MAX_GROUP
from esg_cli.checks import check_dir, check_file, non_negative_float, percentile, positive_float, positive_int
from esg_cli.errors import CliError
from esg_cli.units import COST_UNIT
from esg_files import load_app, load_profiles


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plan", help="show ESG_1Q's cheapest configuration paths for an app",
                       description="Search the K cheapest configuration paths of an app that meet an SLO. "
                                   "A path's latency is the longest path through the DAG of its "
                                   "configurations' profiled latencies; its cost is resource-time per request.")
    p.add_argument("--app", required=True, help="app file (JSON: name, slo_ms, functions, edges)")
    p.add_argument("--profiles", required=True, help="directory of profile tables <function>.json")
    p.add_argument("--slo-ms", type=positive_float, help="latency SLO in ms (default: the app file's slo_ms)")
    p.add_argument("--top-k", type=positive_int, default=1, help="number of paths to list (default 1)")
    p.add_argument("--exact", action="store_true", help="search the whole app at once (no dominator groups)")
    p.add_argument("--brute-force", action="store_true", help="enumerate every path (the reference)")
    p.add_argument("--max-group", type=positive_int, default=None,
                   help=f"largest function group searched at once (default {DEFAULT_MAX_GROUP}; "
                        "not with --exact or --brute-force, which search the whole app)")
    p.add_argument("--price-vcpu", type=non_negative_float, default=DEFAULT_PRICE_VCPU,
                   help=f"price of one vCPU per ms (default {DEFAULT_PRICE_VCPU})")
    p.add_argument("--price-gpu-slice", type=non_negative_float, default=DEFAULT_PRICE_GPU_SLICE,
                   help=f"price of one A100-40GB MIG compute slice per ms (default {DEFAULT_PRICE_GPU_SLICE}); "
                        "other GPU models' slices are scaled by their prices in the MIG geometry table")
    p.add_argument("--slo-percentile", type=percentile, default=None, metavar="P",
                   help="count every configuration's run time at its P-th percentile (50 < P < 100, e.g. 95): the "
                        "table's p<P>_ms where measured, else latency_ms times the percentile of its spread "
                        "(latency_cv; default 0.05); default: latency_ms")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def check_args(args: argparse.Namespace) -> tuple[App, dict[str, Profile]]:
    """The flags, the app file and its profile tables, checked before any search."""
    if args.max_group is not None and (args.exact or args.brute_force):
        raise CliError(f"--max-group {args.max_group} has no effect with "
                       f"{'--exact' if args.exact else '--brute-force'}, which searches the whole app")
    app = load_app(check_file(args.app, "--app"))
    profiles = load_profiles(check_dir(args.profiles, "--profiles"), app.functions)
    return app, profiles


def run(args: argparse.Namespace) -> int:
    app, profiles = check_args(args)
    slo = app.slo_ms if args.slo_ms is None else args.slo_ms
    max_group = DEFAULT_MAX_GROUP if args.max_group is None else args.max_group
    planner = Planner(app, profiles, Prices(args.price_vcpu, args.price_gpu_slice), max_group,
                      exact=args.exact, brute_force=args.brute_force, percentile=args.slo_percentile)
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
    if planner.percentile is not None:
        lines[0] += f", run times at p{planner.percentile:g}"
    if not result.feasible:
        lines.append(f"no feasible path: the fastest configurations take "
                     f"{planner.fastest_latency():.1f} ms > {slo:g} ms")
    for rank, path in enumerate(result.paths, 1):
        lines.append(f"#{rank}  cost {path.cost:.2f} {COST_UNIT}  latency {path.latency_ms:.1f} ms")
        width = max(len(f) for f in path.configs)
        for f, c in path.configs.items():
            lat = planner.run_latency(f, c)
            lines.append(f"    {f:<{width}}  batch {c.batch:>3}  vcpus {c.vcpus:>2}  "
                         f"gpu {c.gpu or 'cpu':<10} {lat:8.1f} ms")
    lines.append(f"search {search_ms:.2f} ms")
    return "\n".join(lines)
