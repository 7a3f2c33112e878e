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
import math
import sys
import zlib
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from esg.arrivals import span_s
from esg.emulator import ClusterSpec, Emulation, EmulatorParams
from esg.emulator.levels import LOAD_LEVELS, SLO_LEVELS, load_rate_rps
from esg.emulator.workload import generate, map_trace_functions
from esg.errors import EsgError, MigError
from esg.mig import DEFAULT_GPU_MODEL, MAX_GPU_SHARE, geometry, is_whole, unshared, whole_model
from esg.policies import make_policy, policy_names
from esg.policies.base import PolicyContext
from esg_cli import checks
from esg_cli.checks import check_dir, check_writable_dir, check_writable_file
from esg_cli.errors import CliError
from esg_files import load_app, load_profiles, read_arrivals, read_hop_samples, write_arrivals

REPO = Path(__file__).resolve().parent.parent
PER_APP_COLUMNS = ["policy", "slo", "load", "app", "requests", "slo_hit_rate", "p50_ms", "p99_ms"]
SUMMARY_COLUMNS = ["policy", "slo", "load", "rate_rps", "requests", "completed", "slo_hit_rate", "cost",
                   "cost_norm_esg", "p50_ms", "p99_ms", "sched_overhead_ms", "cold_starts", "mig_changes",
                   "mean_batch", "cost_exec", "cost_idle", "cost_cold", "cost_mig", "prewarms"]
"""The columns every earlier summary had, first and in their order; the cost split (per request: execution,
idle warm workers, cold starts, MIG reconfiguration; they add up to ``cost``) after them, then the workers
started ahead of a batch in the measured window (``prewarms``: their start-up is in ``cost_cold`` and
``cost_mig``, not in ``cold_starts``, which counts the batches that waited for one)."""
ADMISSION_COLUMNS = ["rejected", "rejected_rate"]
"""With --admission-control: the measured requests answered at once with a rejection, and their share."""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("emulate", help="compare scheduling policies in the discrete-event emulator",
                       description="Run every (policy, SLO level, load level) cell in virtual time and "
                                   "write summary.csv, per_app.csv and plots to --out. Requests arriving "
                                   "before --warmup-s are served but not measured, so --warmup-s must be "
                                   "shorter than --duration-s.")
    p.add_argument("--policies", default="esg,infless,fastgshare,orion,aquatope",
                   help="policies to compare, comma-separated")
    p.add_argument("--slo", default="strict,moderate,relaxed", help="SLO levels (0.8 L, 1.0 L, 1.2 L)")
    p.add_argument("--load", default="light,normal,heavy", help="load levels (30/60/90%% of capacity C: every GPU compute slice busy at "
                                                         "latency L)")
    p.add_argument("--seed", type=int, default=0, help="seed of the arrivals and the execution noise")
    p.add_argument("--duration-s", type=float, default=120.0, help="virtual seconds of arrivals per cell")
    p.add_argument("--warmup-s", type=float, default=30.0,
                   help="arrivals before this are not measured; must be shorter than --duration-s")
    p.add_argument("--out", required=True, help="output directory (created if missing)")
    p.add_argument("--nodes", type=int, default=16, help="nodes of the emulated cluster")
    p.add_argument("--vcpus", type=int, default=16, help="vCPUs per node")
    p.add_argument("--gpu", default=DEFAULT_GPU_MODEL,
                   help="GPU model per node ('none' for CPU-only nodes, with CPU-only profile tables)")
    p.add_argument("--no-mig", action="store_true",
                   help="the nodes' GPUs run without MIG: each is one whole-GPU slice kind '<MODEL>:whole' "
                        "(profile tables for it, e.g. profiles/tables/a100-whole; --gpu may then name a model "
                        "without MIG, e.g. L4)")
    p.add_argument("--gpu-share", type=int, default=1, metavar="N",
                   help="with --no-mig: batches one whole GPU runs at once, time-sliced without isolation "
                        "(default 1: one at a time)")
    p.add_argument("--profiles", default=str(REPO / "profiles" / "tables" / "a100"),
                   help="directory of profile tables <function>.json")
    p.add_argument("--apps", default=str(REPO / "apps"), help="directory of app files *.json")
    p.add_argument("--trace", help="Azure Functions 2019 invocations_per_function CSV to replay (e.g. the "
                                   "shipped data/traces/azure2019_sample_100_invocations.csv)")
    p.add_argument("--trace-minute-s", type=float, default=60.0,
                   help="seconds of the run per trace minute (60: real time; less replays more of the "
                        "trace in a run, time-compressed)")
    p.add_argument("--mig-reconfig-ms", type=float, default=EmulatorParams.mig_reconfig_ms,
                   help="time to create or destroy one MIG instance")
    p.add_argument("--hop-ms", type=float, default=EmulatorParams.hop_ms,
                   help="the live path's overhead per batch (dispatch to the agent and result back; "
                        "measured, see docs/live-vs-emulated.md)")
    p.add_argument("--hop-log-sd", type=float, default=EmulatorParams.hop_log_sd,
                   help="spread of that overhead: each batch pays --hop-ms times a log-normal factor of median 1 "
                        "with this standard deviation of its logarithm (0: exactly --hop-ms)")
    p.add_argument("--hop-samples", metavar="FILE",
                   help="hops measured on a live run, one per line in ms (what bench_live_vs_emulated.py "
                        "writes from esg replay's decision log): each batch pays one of them, drawn at random, "
                        "instead of --hop-ms times the --hop-log-sd factor")
    p.add_argument("--stage-overhead-ms", type=float, default=None, metavar="MS",
                   help="the per-batch overhead the scheduler plans with (ESG_1Q's path latencies, admission "
                        "control); default: --hop-ms, what the emulated system adds to every batch")
    p.add_argument("--cold-start-scale", type=float, default=EmulatorParams.cold_start_scale,
                   help="factor on the profiled cold starts (0: no cold starts)")
    p.add_argument("--arrivals", metavar="FILE",
                   help="replay this arrivals file (CSV time_s,app) instead of generating arrivals: it replaces "
                        "--load, --duration-s and --trace (the load column names the file)")
    p.add_argument("--write-arrivals", metavar="FILE",
                   help="also write the generated arrivals of the (one) --load level to FILE (CSV time_s,app), "
                        "for esg replay or a later --arrivals")
    p.add_argument("--no-prewarm", action="store_true",
                   help="no policy starts a worker ahead of a batch, and every worker is kept warm the "
                        "platform's 10 minutes (default: each policy pre-warms and keeps workers alive as "
                        "docs/baselines.md says)")
    p.add_argument("--jobs", type=int, default=2, help="cells run in parallel processes")
    p.add_argument("--no-plots", action="store_true", help="write the CSV files only")
    p.add_argument("--profiles-online", action="store_true",
                   help="the scheduler starts with every function unprofiled and learns its tables from the "
                        "batches it runs, as the live service does (--profiles is then only the truth the "
                        "emulated hardware follows; docs/online-profiles.md)")
    p.add_argument("--prior-spread", type=float, default=None, metavar="S",
                   help="with --profiles-online: start from the true tables, each latency off by a random "
                        "factor up to 1+S, instead of unprofiled")
    p.add_argument("--explore-fraction", type=float, default=0.05, metavar="F",
                   help="with --profiles-online: the share of a function's calls that may be explored")
    p.add_argument("--slo-percentile", type=checks.percentile, default=None, metavar="P",
                   help="ESG plans every run time at its P-th percentile (50 < P < 100, e.g. 95) instead of the "
                        "tables' one latency figure: from the tables' measured percentiles or spread (latency_cv; "
                        "default 0.05), with --profiles-online from the learned sketches (default: that figure)")
    p.add_argument("--admission-control", action="store_true",
                   help="answer a request at once with an error when not even its app's fastest path fits what "
                        "is left of its SLO, instead of running it late (docs/emulator.md); reported in the "
                        "rejected and rejected_rate columns, never as SLO hits")
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
                raise CliError(f"--trace {path}: not an Azure 2019 invocations file (columns {header[:4]})")
            return [(r[2], [float(x) for x in r[4:]]) for r in reader if r]
    except (OSError, StopIteration, ValueError, IndexError, csv.Error) as exc:
        raise CliError(f"--trace {path}: cannot read the trace ({type(exc).__name__}: {exc})") from None


def check_args(args: argparse.Namespace) -> None:
    """Every flag and input file, checked before any cell runs: one :class:`CliError` naming the first
    problem. Nothing is created here."""
    _split(args.policies, policy_names(), "policy")
    _split(args.slo, list(SLO_LEVELS), "SLO level")
    _split(args.load, list(LOAD_LEVELS), "load level")
    for flag, value in (("--nodes", args.nodes), ("--vcpus", args.vcpus), ("--jobs", args.jobs)):
        if value < 1:
            raise CliError(f"{flag} must be at least 1, got {value}")
    if args.seed < 0:
        raise CliError(f"--seed must be 0 or more, got {args.seed}")
    for flag, value in (("--duration-s", args.duration_s), ("--warmup-s", args.warmup_s),
                        ("--mig-reconfig-ms", args.mig_reconfig_ms), ("--hop-ms", args.hop_ms),
                        ("--hop-log-sd", getattr(args, "hop_log_sd", 0.0)),
                        ("--stage-overhead-ms", stage_overhead_ms(args)),
                        ("--trace-minute-s", args.trace_minute_s),
                        ("--cold-start-scale", args.cold_start_scale)):
        if not math.isfinite(value) or value < 0:
            raise CliError(f"{flag} must be a finite number, 0 or more, got {value:g}")
    if getattr(args, "hop_samples", None):
        if getattr(args, "hop_log_sd", 0.0):
            raise CliError("--hop-samples and --hop-log-sd both give the hop's spread: pass one of them")
        try:
            read_hop_samples(args.hop_samples)
        except EsgError as exc:
            raise CliError(f"--hop-samples {exc}") from None
    for flag, value in (("--duration-s", args.duration_s), ("--trace-minute-s", args.trace_minute_s)):
        if value <= 0:
            raise CliError(f"{flag} must be positive, got {value:g}")
    if not 0 <= args.explore_fraction <= 1:
        raise CliError(f"--explore-fraction must be between 0 and 1, got {args.explore_fraction:g}")
    if args.prior_spread is not None and not (math.isfinite(args.prior_spread) and args.prior_spread >= 0):
        raise CliError(f"--prior-spread must be a finite number, 0 or more, got {args.prior_spread:g}")
    if (args.prior_spread is not None or args.explore_fraction != 0.05) and not args.profiles_online:
        raise CliError("--prior-spread and --explore-fraction need --profiles-online")
    if args.warmup_s >= args.duration_s:
        raise CliError(f"--warmup-s {args.warmup_s:g} is not shorter than --duration-s {args.duration_s:g}: "
                       f"no request would be measured (--warmup-s defaults to 30; pass a shorter one)")
    check_writable_dir(args.out, "--out")
    gpu = emulated_gpu(args)
    apps = _check_apps(args.apps)
    _check_arrivals_flags(args, [a.name for a in apps])
    functions = sorted({f for a in apps for f in a.functions})
    profiles = load_profiles(check_dir(args.profiles, "--profiles"), functions)
    _check_profiles_fit_gpu(profiles, gpu, args.profiles)
    if args.trace:
        _check_trace(read_trace(args.trace), args.trace)


def _check_arrivals_flags(args: argparse.Namespace, app_names: list[str]) -> None:
    arrivals, write = getattr(args, "arrivals", None), getattr(args, "write_arrivals", None)
    if arrivals and write:
        raise CliError("--write-arrivals writes generated arrivals; with --arrivals nothing is generated")
    if arrivals:
        if args.trace:
            raise CliError("--arrivals replaces --trace: pass one of them")
        try:
            span = span_s(read_arrivals(arrivals, app_names))
        except EsgError as exc:
            raise CliError(f"--arrivals {exc}") from None
        if args.warmup_s >= span:
            raise CliError(f"--warmup-s {args.warmup_s:g} is not shorter than the arrivals in --arrivals "
                           f"({span:g} s): no request would be measured")
    if write:
        if len(_split(args.load, list(LOAD_LEVELS), "load level")) != 1:
            raise CliError("--write-arrivals writes one workload: pass one --load level")
        check_writable_file(write, "--write-arrivals")


def workload(args: argparse.Namespace, load_level: str, base: dict, trace=None) -> tuple[list, float]:
    """A cell's arrivals and their mean rate: the --arrivals file's, else generated from the seed and the
    load level (the same for every policy and SLO level)."""
    if getattr(args, "arrivals", None):
        requests = read_arrivals(args.arrivals, list(base))
        return requests, len(requests) / span_s(requests)
    rate = load_rate_rps(load_level, base, args.nodes, emulated_gpu(args))
    wl_rng = np.random.default_rng([args.seed, _stable(load_level)])
    minute_s = getattr(args, "trace_minute_s", 60.0)
    return generate(sorted(base), rate, args.duration_s, wl_rng, trace, minute_s), rate


def emulated_gpu(args: argparse.Namespace) -> str | None:
    """The nodes' GPU model from --gpu, --no-mig and --gpu-share (None: CPU-only nodes); a bad
    combination is a :class:`CliError` naming it."""
    value = getattr(args, "gpu", DEFAULT_GPU_MODEL)
    no_mig, share = getattr(args, "no_mig", False), getattr(args, "gpu_share", 1)
    if not 1 <= share <= MAX_GPU_SHARE:
        raise CliError(f"--gpu-share must be 1 to {MAX_GPU_SHARE}, got {share}")
    if share != 1 and not no_mig:
        raise CliError("--gpu-share shares a whole GPU: it needs --no-mig")
    if value.lower() == "none":
        if no_mig:
            raise CliError("--no-mig describes the nodes' GPUs: --gpu none has none")
        return None
    try:
        return whole_model(value, share) if no_mig else geometry(value).model
    except MigError as exc:
        hint = "" if no_mig else "; a GPU without MIG needs --no-mig"
        raise CliError(f"--gpu: {exc} (or 'none' for CPU-only nodes{hint})") from None


def _check_apps(directory: str) -> list:
    files = sorted(check_dir(directory, "--apps").glob("*.json"))
    if not files:
        raise CliError(f"--apps {directory}: no app files (*.json)")
    return [load_app(f) for f in files]


def _check_profiles_fit_gpu(profiles, gpu: str | None, directory: str) -> None:
    """MIG configurations only on the GPU model they were measured on; CPU-only nodes need CPU configs."""
    for name, prof in profiles.items():
        has_mig = any(e.config.gpu for e in prof.entries)
        if gpu is None and has_mig:
            raise CliError(f"--gpu none: the profile table {Path(directory) / name}.json holds MIG "
                           f"configurations of {prof.gpu_model}; pass --gpu {prof.gpu_model}, or CPU-only "
                           f"tables with --profiles (e.g. profiles/tables/cpu)")
        if gpu is not None and has_mig and prof.gpu_model != unshared(gpu):
            raise CliError(f"--gpu {gpu}: the profile table {Path(directory) / name}.json was measured on "
                           f"{prof.gpu_model}; its GPU configurations do not exist on {gpu}"
                           + (" (a whole GPU's tables name '<MODEL>:whole', e.g. profiles/tables/a100-whole)"
                              if is_whole(gpu) else ""))


def _check_trace(rows: list[tuple[str, list[float]]], path: str) -> None:
    if not rows or not any(counts for _, counts in rows):
        raise CliError(f"--trace {path}: no invocation counts")
    for name, counts in rows:
        if any(not math.isfinite(c) or c < 0 for c in counts):
            raise CliError(f"--trace {path}: function {name}: counts must be finite and 0 or more")


def run(args: argparse.Namespace) -> int:
    check_args(args)
    policies = _split(args.policies, policy_names(), "policy")
    slos = _split(args.slo, list(SLO_LEVELS), "SLO level")
    loads = _split(args.load, list(LOAD_LEVELS), "load level")
    if getattr(args, "arrivals", None):
        loads = [Path(args.arrivals).stem]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    trace = map_trace_functions(read_trace(args.trace), _app_names(args.apps)) if args.trace else None
    if getattr(args, "write_arrivals", None):
        base = {a.name: a for a in (load_app(p) for p in sorted(Path(args.apps).glob("*.json")))}
        n = write_arrivals(args.write_arrivals, workload(args, loads[0], base, trace)[0])
        print(f"wrote {n} arrivals to {args.write_arrivals}")
    for line in warmup_warnings(args, loads):
        print(f"esg emulate: {line}", file=sys.stderr)
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
    columns = SUMMARY_COLUMNS + (ADMISSION_COLUMNS if getattr(args, "admission_control", False) else [])
    write_csv(out / "summary.csv", columns, rows)
    write_csv(out / "per_app.csv", PER_APP_COLUMNS, [r for rs in per_app for r in rs])
    print(render(rows))
    if not args.no_plots:
        from esg_cli.emulate_plots import plot_cdf, plot_cost_split, plot_summary
        plot_summary(rows, out / "summary.png")
        plot_cost_split(rows, out / "cost_split.png")
        plot_cdf(lat, out / "latency_cdf.png")
    return 0


def warmup_warnings(args: argparse.Namespace, loads: list[str]) -> list[str]:
    """A line per load level whose warm-up is too short for it to settle (:mod:`esg_cli.warmup`)."""
    from esg.emulator.levels import reference_capacity_rps
    from esg_cli.warmup import StartUp, advice

    base = {a.name: a for a in (load_app(p) for p in sorted(Path(args.apps).glob("*.json")))}
    profiles = load_profiles(args.profiles, sorted({f for a in base.values() for f in a.functions}))
    gpu = emulated_gpu(args)
    carved = gpu is not None and not is_whole(gpu)      # a whole GPU is never carved: no MIG ramp
    start = StartUp(max((p.cold_start_ms for p in profiles.values()), default=0.0) * args.cold_start_scale / 1000,
                    geometry(gpu).compute_slices if carved else 0, args.mig_reconfig_ms / 1000)
    out = []
    for level in loads:
        if level in LOAD_LEVELS:
            load = LOAD_LEVELS[level]
        else:   # an --arrivals file: its mean rate against the same capacity
            requests = read_arrivals(args.arrivals, list(base))
            load = len(requests) / span_s(requests) / reference_capacity_rps(base, args.nodes, gpu)
        line = advice(level, load, start, args.warmup_s)
        if line is not None:
            out.append(line)
    return out


def _app_names(apps_dir: str) -> list[str]:
    return [load_app(p).name for p in sorted(Path(apps_dir).glob("*.json"))]


def _run_packed(job):
    return run_cell(*job)


def stage_overhead_ms(args: argparse.Namespace) -> float:
    """What the scheduler counts per batch beyond its run time: --stage-overhead-ms, else --hop-ms."""
    given = getattr(args, "stage_overhead_ms", None)
    return args.hop_ms if given is None else given


def run_cell(args, cell, trace):
    policy_name, slo_level, load_level = cell
    base = {a.name: a for a in (load_app(p) for p in sorted(Path(args.apps).glob("*.json")))}
    if not base:
        raise CliError(f"{args.apps}: no app files")
    apps = {n: dataclasses.replace(a, slo_ms=round(a.slo_ms * SLO_LEVELS[slo_level], 3)) for n, a in base.items()}
    profiles = load_profiles(args.profiles, sorted({f for a in apps.values() for f in a.functions}))
    cluster = ClusterSpec(args.nodes, args.vcpus, emulated_gpu(args))
    requests, rate = workload(args, load_level, base, trace)
    params = EmulatorParams(mig_reconfig_ms=args.mig_reconfig_ms, cold_start_scale=args.cold_start_scale,
                            warmup_ms=args.warmup_s * 1e3, hop_ms=args.hop_ms,
                            hop_log_sd=getattr(args, "hop_log_sd", EmulatorParams.hop_log_sd),
                            hop_samples_ms=(read_hop_samples(args.hop_samples) if getattr(args, "hop_samples", None)
                                            else ()),
                            prewarm=not getattr(args, "no_prewarm", False))
    online = online_learning(args, apps, profiles) if getattr(args, "profiles_online", False) else None
    policy = make_policy(policy_name, PolicyContext(apps, online.tables if online else profiles, seed=args.seed,
                                                    mig_reconfig_ms=args.mig_reconfig_ms,
                                                    cold_start_scale=args.cold_start_scale,
                                                    stage_overhead_ms=stage_overhead_ms(args),
                                                    slo_percentile=getattr(args, "slo_percentile", None)))
    rng = np.random.default_rng([args.seed, _stable(policy_name), _stable(slo_level), _stable(load_level)])
    result = Emulation(apps, profiles, policy, requests, rng, cluster, params, online=online,
                       admission_control=getattr(args, "admission_control", False)).run()
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


def online_learning(args, apps, profiles):
    """What ``--profiles-online`` gives the scheduler: unprofiled functions, or perturbed priors."""
    from esg.emulator.online import OnlineLearning, perturbed

    priors = {}
    if args.prior_spread is not None:
        prior_rng = np.random.default_rng([args.seed, _stable("prior")])
        priors = {f: perturbed(p, args.prior_spread, prior_rng) for f, p in sorted(profiles.items())}
    return OnlineLearning(profiles, apps, priors=priors, explore_fraction=args.explore_fraction,
                          percentile=getattr(args, "slo_percentile", None))


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
    lines = [f"{'policy':<11}{'slo':<10}{'load':<8}{'requests':>9}{'hit rate':>10}{'cost/ESG':>10}{'p99 ms':>11}"
             f"{'exec':>7}{'idle':>7}{'cold':>7}{'mig':>7}"]
    for r in rows:
        total = r["cost"] or 1.0
        split = "".join(f"{r[k] / total:>7.0%}" for k in ("cost_exec", "cost_idle", "cost_cold", "cost_mig"))
        lines.append(f"{r['policy']:<11}{r['slo']:<10}{r['load']:<8}{r['requests']:>9}"
                     f"{r['slo_hit_rate']:>10.3f}{r['cost_norm_esg']:>10.2f}{r['p99_ms']:>11.1f}{split}")
    return "\n".join(lines)
