"""Live ESG on a twin cluster against the emulator, on the same arrivals.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_live_vs_emulated.py [--duration-s 60] [--seeds 5]

The workload generator writes an arrivals file (``--rate-rps`` on ``--nodes`` nodes, four apps, SLOs at
``--slo``); ``esg up --runner twin --no-online-profiles`` starts a twin cluster of the same nodes
(A100-40GB, ``profiles/tables/a100``) and ``esg replay`` sends it the arrivals; the live path's overhead
per batch is measured from the scheduler's decision log; the emulator then runs ESG on the same file,
once per seed, each batch paying one of the hops measured (``esg emulate --hop-samples``; with
``--hop-ms`` or ``--hop-log-sd`` given, that median and log-normal spread instead). Prints and writes
(``--out``) the hit rates, cost, the share of dispatches whose configuration matches and the hop;
``--plot`` draws the per-app hit rates.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

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
    p.add_argument("--seeds", type=int, default=5, help="emulator runs (seeds from --seed): its own spread")
    p.add_argument("--hop-ms", type=float, default=None,
                   help="the emulator's per-batch overhead, a log-normal's median (default: the hops measured "
                        "on the live run, drawn one per batch)")
    p.add_argument("--hop-log-sd", type=float, default=None,
                   help="its log-normal spread (default with --hop-ms: the one measured on the live run)")
    p.add_argument("--out", type=Path, default=Path("live-vs-emulated"))
    p.add_argument("--plot", type=Path, default=None, help="write the figure here (PNG)")
    a = p.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    args = agreement.emulate_args(a.out / "emulated", a.out / "arrivals.csv", a.nodes, a.vcpus, a.slo, a.load,
                                  a.duration_s, a.warmup_s, a.seed, 0.0)
    arrivals = agreement.write_arrivals(args, a.rate_rps or None)
    with agreement.twin_cluster(a.out / "logs", a.nodes, a.vcpus, a.slo) as cluster:
        live = agreement.replay(cluster, arrivals, a.out / "live", a.warmup_s)
    hop, spread = agreement.live_hop_ms(live["decisions"]), agreement.live_hop_log_sd(live["decisions"])
    args.hop_ms = a.hop_ms if a.hop_ms is not None else hop
    if a.hop_ms is None and a.hop_log_sd is None:    # the live run's hops themselves
        args.hop_samples = str(agreement.write_live_hops(live["decisions"], a.out / "live" / "hops.txt"))
    else:
        args.hop_log_sd = a.hop_log_sd if a.hop_log_sd is not None else spread
    emulated = agreement.mean_emulated(agreement.emulate_seeds(args, a.seeds))
    result = agreement.compare(emulated, live)
    result.update(live_hop_ms=hop, live_hop_log_sd=spread, live_sent_hop_ms=agreement.sent_hop_ms(live["decisions"]),
                  emulated_hop_ms=args.hop_ms, emulated_hop_log_sd=args.hop_log_sd,
                  emulated_hop_samples=args.hop_samples is not None, emulated_seeds=a.seeds,
                  live_startup=dataclasses.asdict(live["startup"]),
                  emulated_startup=dataclasses.asdict(agreement.emulated_startup(args, a.seeds)))
    agreement.write_report(result, a.out)
    if a.plot:
        agreement.plot(result, a.plot)
    print(json.dumps(result, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
