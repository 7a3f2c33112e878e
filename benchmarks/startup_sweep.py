"""How the ranking moves with the start-up constants: ``esg emulate`` over a grid of
``--mig-reconfig-ms`` and ``--cold-start-scale``, one (SLO, load) setting, every policy.

Usage: ``PYTHONPATH=. python benchmarks/startup_sweep.py --out DIR [--slo moderate] [--load light]
[--nodes 2] [--duration-s 40] [--warmup-s 20] [--mig-ms 0,500,2000,4000] [--cold 0,0.2,1]``.
Runs the MIG values at cold-start scale 1 and the cold-start scales at 2000 ms (the defaults), each
an ``esg emulate`` run into ``DIR/mig<ms>-cold<scale>/``, then prints a Markdown table of hit rate and
cost (normalised to ESG) per policy and the rank of each policy by hit rate (ties: cheaper first).
"""

from __future__ import annotations

import argparse
import csv
import subprocess
import sys
from pathlib import Path

TRACE = "data/traces/azure2019_sample_100_invocations.csv"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--slo", default="moderate")
    ap.add_argument("--load", default="light")
    ap.add_argument("--nodes", default="2")
    ap.add_argument("--duration-s", default="40")
    ap.add_argument("--warmup-s", default="20")
    ap.add_argument("--mig-ms", default="0,500,2000,4000")
    ap.add_argument("--cold", default="0,0.2,1")
    ap.add_argument("--trace-minute-s", default="5")
    args = ap.parse_args()
    grid = [(float(m), 1.0) for m in args.mig_ms.split(",")]
    grid += [(2000.0, float(c)) for c in args.cold.split(",") if (2000.0, float(c)) not in grid]
    rows = []
    for mig, cold in grid:
        out = Path(args.out) / f"mig{mig:g}-cold{cold:g}"
        subprocess.run([sys.executable, "-m", "esg_cli.main", "emulate", "--slo", args.slo, "--load", args.load,
                        "--nodes", args.nodes, "--duration-s", args.duration_s, "--warmup-s", args.warmup_s,
                        "--trace", TRACE, "--trace-minute-s", args.trace_minute_s,
                        "--mig-reconfig-ms", f"{mig:g}", "--cold-start-scale", f"{cold:g}",
                        "--no-plots", "--jobs", "2", "--out", str(out)],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(out / "summary.csv") as fh:
            cells = list(csv.DictReader(fh))
        ranked = sorted(cells, key=lambda r: (-float(r["slo_hit_rate"]), float(r["cost"])))
        rank = {r["policy"]: i + 1 for i, r in enumerate(ranked)}
        rows.append((mig, cold, {r["policy"]: (float(r["slo_hit_rate"]), float(r["cost_norm_esg"]), rank[r["policy"]])
                                 for r in cells}))
    policies = list(rows[0][2])
    print("| MIG ms | cold-start scale | " + " | ".join(policies) + " |")
    print("|---|---|" + "---|" * len(policies))
    for mig, cold, by in rows:
        cells = " | ".join(f"{by[p][0]:.3f} / {by[p][1]:.2f} (#{by[p][2]})" for p in policies)
        print(f"| {mig:g} | {cold:g} | {cells} |")


if __name__ == "__main__":
    main()
