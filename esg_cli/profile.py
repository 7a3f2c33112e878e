"""``esg profile``: measure actions over a configuration grid and write profile tables (``docs/architecture.md`` §6).

The logic lives in :mod:`profiles`; this module parses and checks the arguments and reports.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from esg.errors import MigError
from esg.mig import DEFAULT_GPU_MODEL, geometry
from esg_cli.checks import check_writable_dir, positive_int
from esg_cli.errors import CliError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "profile", help="profile actions over a configuration grid and write profile tables",
        description="Measure a function (or every function of an app) over batch sizes x vCPUs x GPU "
                    "(CPU only or a MIG profile) through the invoker agent's process runner, and write "
                    "OUT/<function>.json. An interrupted run resumes where it stopped when run again. "
                    "'esg profile export --redis URL --out DIR' writes the tables the schedulers learned "
                    "online; 'esg profile import --redis URL DIR' seeds them with offline tables.")
    p.add_argument("targets", nargs="+", metavar="ACTION_OR_APP",
                   help="a function of actions/ (resnet50), an app name (image-classification), an app "
                        "file (apps/x.json) or a Python action file (my_action.py, profiled as my-action); "
                        "several may be given, a function shared by apps is profiled once")
    p.add_argument("--batch", default="1,2,4,8", help="batch sizes, comma-separated (default 1,2,4,8)")
    p.add_argument("--vcpus", default="1,2,4", help="vCPU counts, comma-separated (default 1,2,4)")
    p.add_argument("--gpu", default="none",
                   help="'none' (CPU only) and/or MIG profiles of --gpu-model, comma-separated (default none)")
    p.add_argument("--gpu-model", help="GPU model the table's MIG names refer to (default: this machine's "
                                       f"GPU, else {DEFAULT_GPU_MODEL}, so CPU tables load beside GPU tables)")
    p.add_argument("--runs", type=positive_int, default=10, help="timed batches per configuration (default 10)")
    p.add_argument("--warmup", type=int, default=1, help="unmeasured batches per configuration (default 1)")
    p.add_argument("--params", default='{"seed": 0}',
                   help='entry parameters, JSON (default {"seed": 0}); downstream functions get what '
                        "their predecessors make of them")
    p.add_argument("--timeout-ms", type=positive_int, default=60000, help="time limit of one batch (default 60000)")
    p.add_argument("--out", required=True, type=Path, help="directory for the tables")
    p.add_argument("--fresh", action="store_true", help="ignore partial results of an earlier run")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def _params(text: str) -> dict:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise CliError(f"--params is not JSON: {e}") from None
    if not isinstance(value, dict):
        raise CliError("--params must be a JSON object")
    return value


def _gpu_model(flag: str | None, host) -> str:
    detected = host.gpu.model if host.gpu else None
    try:
        return geometry(flag or detected or DEFAULT_GPU_MODEL).model
    except MigError as e:
        raise CliError(f"--gpu-model: {e}") from None


def run(args: argparse.Namespace) -> int:
    from profiles.grid import GridError, parse_grid
    from profiles.host import detect_host
    from profiles.profiler import Profiler, ProfilerSettings, partial_path
    from profiles.targets import TargetError, resolve

    if args.warmup < 1:
        raise CliError(f"--warmup must be at least 1 (a worker's first batches are not representative), "
                       f"got {args.warmup}")
    params = _params(args.params)
    host = detect_host()
    model = _gpu_model(args.gpu_model, host)
    try:
        grid = parse_grid(args.batch, args.vcpus, args.gpu, model)
    except GridError as e:
        raise CliError(str(e)) from None
    if host.gpu and host.gpu.model and host.gpu.model != model and any(grid.gpus):
        raise CliError(f"--gpu-model {model} is not this machine's GPU ({host.gpu.name}): MIG configurations "
                       f"are measured on the GPU they name")
    check_writable_dir(args.out, "--out")
    whats, targets = [], {}
    for name in args.targets:
        try:
            what, found = resolve(name, params, args.timeout_ms)
        except TargetError as e:
            raise CliError(str(e)) from None
        whats.append(what)
        for t in found:
            targets.setdefault(t.function, t)
    what = ", ".join(whats)
    n = len(grid.configs())
    print(f"profiling {what}: {len(targets)} function(s) x {n} configuration(s), {args.runs} runs each, "
          f"on {host.cpu} ({len(host.cpu_ids)} vCPUs), GPU: {host.gpu.name if host.gpu else 'none'}; "
          f"tables for {model}", file=sys.stderr)
    opts = ProfilerSettings(grid, args.runs, model, args.out, args.warmup, args.fresh,
                   False if args.no_progress else None)
    problems = []
    for t in targets.values():
        try:
            report = Profiler(t, opts, host).run()
        except KeyboardInterrupt:
            print(f"esg profile: interrupted during {t.function}; what was measured is kept in "
                  f"{partial_path(args.out, t.function)}: run the same command again to resume",
                  file=sys.stderr)
            raise
        print(f"{t.function}: {len(report.measured)} measured, {len(report.resumed)} resumed, "
              f"{len(report.failed)} failed, {len(report.skipped)} skipped -> "
              f"{report.table or 'no table'}")
        if report.table is None:
            if report.failed:
                problems.append(f"every configuration of {t.function} failed ({report.failed[0]['error']})")
            else:
                problems.append(f"nothing measured for {t.function}: every configuration was skipped")
    for p in problems:
        print(f"esg profile: {p}", file=sys.stderr)
    return 1 if problems else 0
