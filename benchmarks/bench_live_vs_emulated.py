"""Live ESG on a twin cluster against the emulator, on the same arrivals.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_live_vs_emulated.py [--duration-s 60] [--load light]

The workload generator writes an arrivals file (``--load`` on ``--nodes`` nodes, four apps, SLOs at
``--slo``); the emulator runs ESG on it; ``esg up --runner twin`` starts a twin cluster of the same nodes
(A100-40GB, ``profiles/tables/a100``) and ``esg replay`` sends it the same arrivals. Prints and writes
(``--out``) the hit rates, cost, the share of dispatches whose configuration matches, and the live
per-batch hop measured from the scheduler's decision log; ``--plot`` draws the per-app hit rates.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from esg.emulator import EmulatorParams
from esg_cli import agreement


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--duration-s", type=float, default=60.0)
    p.add_argument("--warmup-s", type=float, default=30.0)
    p.add_argument("--nodes", type=int, default=2)
    p.add_argument("--vcpus", type=int, default=16)
    p.add_argument("--slo", default="moderate")
    p.add_argument("--load", default="light", help="a load level; used only with --rate-rps 0")
    p.add_argument("--rate-rps", type=float, default=agreement.AGREEMENT_RATE_RPS,
                   help="mean request rate of the arrivals (0: the --load level's)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--hop-ms", type=float, default=EmulatorParams.hop_ms)
    p.add_argument("--out", type=Path, default=Path("live-vs-emulated"))
    p.add_argument("--plot", type=Path, default=None, help="write the figure here (PNG)")
    a = p.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    arrivals = a.out / "arrivals.csv"
    emulated = agreement.emulate(agreement.emulate_args(a.out / "emulated", arrivals, a.nodes, a.vcpus, a.slo,
                                                        a.load, a.duration_s, a.warmup_s, a.seed, a.hop_ms),
                                 a.rate_rps or None)
    with agreement.twin_cluster(a.out / "logs", a.nodes, a.vcpus, a.slo) as cluster:
        live = agreement.replay(cluster, arrivals, a.out / "live", a.warmup_s)
    result = agreement.compare(emulated, live)
    result["live_hop_ms"] = agreement.live_hop_ms(live["decisions"])
    result["emulated_hop_ms"] = a.hop_ms
    agreement.write_report(result, a.out)
    if a.plot:
        agreement.plot(result, a.plot)
    print(json.dumps(result, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
