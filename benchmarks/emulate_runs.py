"""What the comparison scripts (``protocol.py``, ``startup_sweep.py``) share: the flags that shape an
``esg emulate`` run, which policies are rivals, and one run kept in its directory (a run already there
is read, not made again)."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

TRACE = "data/traces/azure2019_sample_100_invocations.csv"
POLICIES = "esg,esg-paper,infless,fastgshare,orion,aquatope"


def is_rival(policy: str) -> bool:
    """A baseline: not ``esg``, ``esg-paper`` or an ``esg-without-*`` ablation."""
    return policy != "esg" and not policy.startswith("esg-")


def seeds_of(ap: argparse.ArgumentParser, text: str) -> list[int]:
    """``--seeds``: ``100-109`` or ``100,101`` (anything else is the parser's error, naming the flag)."""
    try:
        if "-" in text:
            lo, hi = text.split("-", 1)
            seeds = list(range(int(lo), int(hi) + 1))
        else:
            seeds = [int(s) for s in text.split(",")]
    except ValueError:
        seeds = []
    if not seeds:
        ap.error(f"--seeds: {text!r} is neither FIRST-LAST nor a comma-separated list of integers")
    return seeds


def add_run_flags(ap: argparse.ArgumentParser, *, seeds: str, slo: str, load: str, duration_s: str,
                  warmup_s: str) -> None:
    """The flags every script passes on to ``esg emulate``, with the script's own defaults."""
    ap.add_argument("--out", required=True, help="directory of the runs (a seed's run already there is kept)")
    ap.add_argument("--seeds", default=seeds, help="FIRST-LAST or a comma-separated list (default: %(default)s)")
    ap.add_argument("--nodes", default="2", help="cluster size, as esg emulate --nodes (default: %(default)s)")
    ap.add_argument("--slo", default=slo, help="SLO levels, comma-separated (default: %(default)s)")
    ap.add_argument("--load", default=load, help="load levels, comma-separated (default: %(default)s)")
    ap.add_argument("--policies", default=POLICIES, help="comma-separated (default: %(default)s)")
    ap.add_argument("--duration-s", default=duration_s, help="seconds per cell (default: %(default)s)")
    ap.add_argument("--warmup-s", default=warmup_s, help="seconds not measured (default: %(default)s)")
    ap.add_argument("--trace-minute-s", default="5", help="seconds per trace minute (default: %(default)s)")
    ap.add_argument("--jobs", default="2", help="esg emulate --jobs of each run (default: %(default)s)")


def emulate_argv(args: argparse.Namespace, out: Path, *flags: str) -> list[str]:
    """The ``esg emulate`` command line of one run: the common flags, then ``flags``."""
    return ["emulate", *flags, "--policies", args.policies, "--nodes", args.nodes, "--duration-s", args.duration_s,
            "--warmup-s", args.warmup_s, "--no-plots", "--jobs", args.jobs, "--out", str(out)]


def check_emulate(ap: argparse.ArgumentParser, args: argparse.Namespace, *flags: str) -> None:
    """Refuse what ``esg emulate`` would refuse (a bad policy, level, count...) before the first run: one
    line naming it, exit 2, instead of a failed run after others have taken minutes."""
    # imported here: the parser loads every subcommand, which --report-only and the tests' helpers skip
    from esg.errors import EsgError
    from esg_cli import emulate
    from esg_cli.cliparse import UsageError
    from esg_cli.errors import CliError
    from esg_cli.main import build_parser

    try:
        emulate.check_args(build_parser().parse_args(emulate_argv(args, Path(args.out), *flags)))
    except UsageError:  # esg emulate's parser has said which flag, on one line
        sys.exit(2)
    except (EsgError, CliError) as exc:
        ap.error(str(exc))


def emulate_kept(args: argparse.Namespace, out: Path, *flags: str, quiet: bool = False) -> Path:
    """``out/summary.csv``, after one ``esg emulate`` run with the common flags and ``flags`` unless
    it is there already; ``quiet`` also drops the run's warnings. A run that fails stops the script after
    its errors (even when quiet); the runs kept so far stay."""
    summary = out / "summary.csv"
    if not summary.exists():
        # not quiet: the run's progress and warnings show as they come
        done = subprocess.run([sys.executable, "-m", "esg_cli.main", *emulate_argv(args, out, *flags)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE if quiet else None, text=True)
        if done.returncode != 0:
            if quiet:
                sys.stderr.write(done.stderr)
            sys.exit(f"esg emulate into {out} failed (exit {done.returncode})")
    return summary
