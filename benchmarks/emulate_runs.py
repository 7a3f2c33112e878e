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
    ap.add_argument("--out", required=True)
    ap.add_argument("--seeds", default=seeds)
    ap.add_argument("--nodes", default="2")
    ap.add_argument("--slo", default=slo)
    ap.add_argument("--load", default=load)
    ap.add_argument("--policies", default=POLICIES)
    ap.add_argument("--duration-s", default=duration_s)
    ap.add_argument("--warmup-s", default=warmup_s)
    ap.add_argument("--trace-minute-s", default="5")
    ap.add_argument("--jobs", default="2")


def emulate_kept(args: argparse.Namespace, out: Path, *flags: str, quiet: bool = False) -> Path:
    """``out/summary.csv``, after one ``esg emulate`` run with the common flags and ``flags`` unless
    it is there already; ``quiet`` also drops the run's warnings."""
    summary = out / "summary.csv"
    if not summary.exists():
        subprocess.run([sys.executable, "-m", "esg_cli.main", "emulate", *flags, "--policies", args.policies,
                        "--nodes", args.nodes, "--duration-s", args.duration_s, "--warmup-s", args.warmup_s,
                        "--no-plots", "--jobs", args.jobs, "--out", str(out)],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL if quiet else None)
    return summary
