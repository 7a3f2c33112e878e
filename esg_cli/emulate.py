"""``esg emulate``: every (policy, SLO level, load level) cell in the discrete-event emulator.

Writes ``summary.csv`` (one row per cell), ``per_app.csv`` and plots beside them. Each cell's workload
depends only on the seed and the load level (all policies and SLO levels replay the same arrivals) and
its execution noise only on the seed and the cell, so the same seed gives a byte-identical summary,
whatever ``--jobs`` is.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import zlib
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from esg.emulator import ClusterSpec, Emulation, EmulatorParams
from esg.emulator.levels import LOAD_LEVELS, SLO_LEVELS, load_rate_rps
from esg.emulator.workload import generate, map_trace_functions
from esg.model import load_app
from esg.policies import make_policy, policy_names
from esg.policies.base import PolicyContext
from esg.profiles import load_profiles
from esg_cli.errors import CliError

REPO = Path(__file__).resolve().parent.parent
SUMMARY_COLUMNS = ["policy", "slo", "load", "rate_rps", "requests", "completed", "slo_hit_rate", "cost",
                   "cost_norm_esg", "p50_ms", "p99_ms", "sched_overhead_ms", "cold_starts", "mig_changes",
                   "mean_batch"]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("emulate", help="compare scheduling policies in the discrete-event emulator",
                       description="Run every (policy, SLO level, load level) cell in virtual time and "
                                   "write summary.csv, per_app.csv and plots to --out.")
    p.add_argument("--policies", default="esg,infless,fastgshare,orion,aquatope")
    p.add_argument("--slo", default="strict,moderate,relaxed", help="SLO levels (0.8 L, 1.0 L, 1.2 L)")
    p.add_argument("--load", default="light,normal,heavy", help="load levels (30/60/90%% of capacity C)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--duration-s", type=float, default=120.0, help="virtual seconds of arrivals per cell")
    p.add_argument("--warmup-s", type=float, default=30.0, help="arrivals before this are not measured")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--nodes", type=int, default=16)
    p.add_argument("--vcpus", type=int, default=16, help="vCPUs per node")
    p.add_argument("--gpu", default="A100-40GB", help="GPU model per node ('none' for CPU-only nodes)")
    p.add_argument("--profiles", default=str(REPO / "profiles" / "tables" / "a100"))
    p.add_argument("--apps", default=str(REPO / "apps"))
    p.add_argument("--trace", help="Azure Functions 2019 invocations_per_function CSV to replay")
    p.add_argument("--mig-reconfig-ms", type=float, default=EmulatorParams.mig_reconfig_ms)
    p.add_argument("--cold-start-scale", type=float, default=EmulatorParams.cold_start_scale)
    p.add_argument("--jobs", type=int, default=2, help="cells run in parallel processes")
    p.add_argument("--no-plots", action="store_true")
    p.set_defaults(func=run)


def _split(value: str, known, what: str) -> list[str]:
    items = [v.strip() for v in value.split(",") if v.strip()]
    bad = [v for v in items if v not in known]
    if bad or not items:
        raise CliError(f"unknown {what} {', '.join(bad) or '(none given)'} (known: {', '.join(known)})")
    return items


def read_trace(path: str) -> list[tuple[str, list[float]]]:
    """(HashFunction, per-minute counts) rows of an Azure 2019 invocations file."""
    try:
        with open(path, newline="") as fh:
            reader = csv.reader(fh)
            header = next(reader)
            if header[:4] != ["HashOwner", "HashApp", "HashFunction", "Trigger"]:
                raise CliError(f"{path}: not an Azure 2019 invocations file (columns {header[:4]})")
            return [(r[2], [float(x) for x in r[4:]]) for r in reader if r]
    except (OSError, StopIteration, ValueError) as exc:
        raise CliError(f"{path}: cannot read the trace ({exc})") from None


def run(args: argparse.Namespace) -> int:
    policies = _split(args.policies, policy_names(), "policy")
    slos = _split(args.slo, list(SLO_LEVELS), "SLO level")
    loads = _split(args.load, list(LOAD_LEVELS), "load level")
    if args.duration_s <= 0 or args.nodes < 1 or args.vcpus < 1 or args.jobs < 1:
        raise CliError("--duration-s, --nodes, --vcpus and --jobs must be positive")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    trace = map_trace_functions(read_trace(args.trace), _app_names(args.apps)) if args.trace else None
    cells = [(p, s, ld) for ld in loads for s in slos for p in policies]
    jobs = [(args, cell, trace) for cell in cells]
    from tqdm import tqdm
    if args.jobs == 1:
        results = [run_cell(*j) for j in tqdm(jobs, desc="cells", unit="cell")]
    else:
        with ProcessPoolExecutor(args.jobs) as pool:
            results = list(tqdm(pool.map(_run_packed, jobs), total=len(jobs), desc="cells", unit="cell"))
    rows, per_app, lat = zip(*results)
    rows = _normalise(list(rows))
    write_csv(out / "summary.csv", SUMMARY_COLUMNS, rows)
    write_csv(out / "per_app.csv", ["policy", "slo", "load", "app", "requests", "slo_hit_rate", "p50_ms",
                                    "p99_ms"], [r for rs in per_app for r in rs])
    print(render(rows))
    if not args.no_plots:
        from esg_cli.emulate_plots import plot_cdf, plot_summary
        plot_summary(rows, out / "summary.png")
        plot_cdf(lat, out / "latency_cdf.png")
    return 0


def _app_names(apps_dir: str) -> list[str]:
    return [load_app(p).name for p in sorted(Path(apps_dir).glob("*.json"))]


def _run_packed(job):
    return run_cell(*job)


def run_cell(args, cell, trace):
    policy_name, slo_level, load_level = cell
    base = {a.name: a for a in (load_app(p) for p in sorted(Path(args.apps).glob("*.json")))}
    if not base:
        raise CliError(f"{args.apps}: no app files")
    apps = {n: dataclasses.replace(a, slo_ms=round(a.slo_ms * SLO_LEVELS[slo_level], 3)) for n, a in base.items()}
    profiles = load_profiles(args.profiles, sorted({f for a in apps.values() for f in a.functions}))
    gpu = None if args.gpu.lower() == "none" else args.gpu
    cluster = ClusterSpec(args.nodes, args.vcpus, gpu)
    rate = load_rate_rps(load_level, base, args.nodes)
    wl_rng = np.random.default_rng([args.seed, _stable(load_level)])
    requests = generate(list(apps), rate, args.duration_s, wl_rng, trace)
    params = EmulatorParams(mig_reconfig_ms=args.mig_reconfig_ms, cold_start_scale=args.cold_start_scale,
                            warmup_ms=args.warmup_s * 1e3)
    policy = make_policy(policy_name, PolicyContext(apps, profiles, seed=args.seed,
                                                    mig_reconfig_ms=args.mig_reconfig_ms,
                                                    cold_start_scale=args.cold_start_scale))
    rng = np.random.default_rng([args.seed, _stable(policy_name), _stable(slo_level), _stable(load_level)])
    result = Emulation(apps, profiles, policy, requests, rng, cluster, params).run()
    s = result.summary
    row = {"policy": policy_name, "slo": slo_level, "load": load_level, "rate_rps": rate, **s}
    per_app, lat = [], {}
    for app, st in sorted(result.metrics.per_app.items()):
        arr = np.array(st.latencies_ms)
        per_app.append({"policy": policy_name, "slo": slo_level, "load": load_level, "app": app,
                        "requests": st.requests, "slo_hit_rate": st.hits / st.requests if st.requests else 0.0,
                        "p50_ms": float(np.percentile(arr, 50)) if arr.size else float("nan"),
                        "p99_ms": float(np.percentile(arr, 99)) if arr.size else float("nan")})
        lat[app] = arr
    return row, per_app, {"cell": cell, "latencies": lat, "slo": {a: apps[a].slo_ms for a in apps}}


def _stable(name: str) -> int:
    return zlib.crc32(name.encode())


def _normalise(rows: list[dict]) -> list[dict]:
    esg = {(r["slo"], r["load"]): r["cost"] for r in rows if r["policy"] == "esg"}
    for r in rows:
        ref = esg.get((r["slo"], r["load"]))
        r["cost_norm_esg"] = r["cost"] / ref if ref else float("nan")
    return rows


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def write_csv(path: Path, columns: list[str], rows) -> None:
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(columns)
        for r in rows:
            w.writerow([_fmt(r[c]) for c in columns])


def render(rows) -> str:
    lines = [f"{'policy':<11}{'slo':<10}{'load':<8}{'requests':>9}{'hit rate':>10}{'cost/ESG':>10}{'p99 ms':>11}"]
    for r in rows:
        lines.append(f"{r['policy']:<11}{r['slo']:<10}{r['load']:<8}{r['requests']:>9}"
                     f"{r['slo_hit_rate']:>10.3f}{r['cost_norm_esg']:>10.2f}{r['p99_ms']:>11.1f}")
    return "\n".join(lines)
