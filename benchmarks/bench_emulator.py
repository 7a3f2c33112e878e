"""Emulator speed: events per second, a one-hour replay of ESG, and the 45-cell comparison's wall time.

Usage: ``PYTHONPATH=. python benchmarks/bench_emulator.py [--hour-load heavy] [--hour-s 3600]
[--cells-duration-s 120]``. Wall-clock numbers are printed, never asserted.
"""

from __future__ import annotations

import argparse
import glob
import subprocess
import sys
import tempfile
import time

import numpy as np

from esg.emulator import ClusterSpec, Emulation, EmulatorParams
from esg.emulator.levels import load_rate_rps
from esg.emulator.workload import generate
from esg.model import load_app
from esg.policies import make_policy
from esg.policies.base import PolicyContext
from esg.profiles import load_profiles


def replay(policy: str, load: str, seconds: float) -> None:
    apps = {a.name: a for a in map(load_app, sorted(glob.glob("apps/*.json")))}
    profiles = load_profiles("profiles/tables/a100", sorted({f for a in apps.values() for f in a.functions}))
    rng = np.random.default_rng(0)
    reqs = generate(list(apps), load_rate_rps(load, apps, 16), seconds, rng)
    pol = make_policy(policy, PolicyContext(apps, profiles))
    t0 = time.perf_counter()
    res = Emulation(apps, profiles, pol, reqs, rng, ClusterSpec(), EmulatorParams()).run()
    wall = time.perf_counter() - t0
    print(f"{policy} {load} {seconds:.0f} s virtual, {len(reqs)} requests: wall {wall:.1f} s, "
          f"{res.metrics.events / wall:.0f} events/s, {len(reqs) / wall:.0f} requests/s")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hour-load", default="heavy")
    ap.add_argument("--hour-s", type=float, default=3600.0)
    ap.add_argument("--cells-duration-s", type=float, default=0, help="0 skips the 45-cell run")
    args = ap.parse_args()
    replay("esg", args.hour_load, args.hour_s)
    if args.cells_duration_s:
        with tempfile.TemporaryDirectory() as out:
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", "esg_cli.main", "emulate", "--duration-s",
                            str(args.cells_duration_s), "--out", out, "--jobs", "2", "--no-plots"], check=True)
            print(f"45 cells at {args.cells_duration_s:.0f} s: wall {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
