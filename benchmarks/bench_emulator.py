"""Emulator speed: events per second, a one-hour replay of ESG, and the 45-cell comparison's wall time.

Usage: ``PYTHONPATH=. python benchmarks/bench_emulator.py [--policies esg,infless] [--hour-load heavy]
[--hour-s 3600] [--cells-duration-s 120] [--nodes 2] [--rate-rps R]``. Wall-clock numbers are printed, never asserted.
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
from esg.policies import make_policy
from esg.policies.base import PolicyContext
from esg_files import load_app, load_profiles


def replay(policy: str, load: str, seconds: float, nodes: int, rate_rps: float | None = None) -> None:
    apps = {a.name: a for a in map(load_app, sorted(glob.glob("apps/*.json")))}
    profiles = load_profiles("profiles/tables/a100", sorted({f for a in apps.values() for f in a.functions}))
    rng = np.random.default_rng(0)
    rate = load_rate_rps(load, apps, nodes) if rate_rps is None else rate_rps
    reqs = generate(list(apps), rate, seconds, rng)
    pol = make_policy(policy, PolicyContext(apps, profiles))
    t0 = time.perf_counter()
    res = Emulation(apps, profiles, pol, reqs, rng, ClusterSpec(nodes=nodes), EmulatorParams()).run()
    wall = time.perf_counter() - t0
    level = load if rate_rps is None else f"{rate:g} requests/s"
    print(f"{policy} {level} {nodes} nodes {seconds:.0f} s virtual, {len(reqs)} requests: wall {wall:.1f} s, "
          f"{res.metrics.events / wall:.0f} events/s, {len(reqs) / wall:.0f} requests/s")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--policies", default="esg", help="policies to replay, comma-separated, one after another")
    ap.add_argument("--hour-load", default="heavy")
    ap.add_argument("--hour-s", type=float, default=3600.0)
    ap.add_argument("--cells-duration-s", type=float, default=0, help="0 skips the 45-cell run")
    ap.add_argument("--nodes", type=int, default=2,
                    help="emulated nodes (the load levels scale with them: about 98 requests/s per node)")
    ap.add_argument("--rate-rps", type=float, default=None,
                    help="requests per second of the replay, in place of --hour-load's (e.g. 201.35 on 16 nodes: "
                         "the request rate of the first one-hour measurement, 724,865 requests)")
    args = ap.parse_args()
    if args.rate_rps is not None and not args.rate_rps > 0:
        ap.error(f"--rate-rps must be above 0, got {args.rate_rps}")
    for policy in args.policies.split(","):
        replay(policy, args.hour_load, args.hour_s, args.nodes, args.rate_rps)
    if args.cells_duration_s:
        with tempfile.TemporaryDirectory() as out:
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", "esg_cli.main", "emulate", "--duration-s",
                            str(args.cells_duration_s), "--nodes", str(args.nodes), "--out", out, "--jobs", "2",
                            "--no-plots"], check=True)
            print(f"45 cells at {args.cells_duration_s:.0f} s: wall {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
