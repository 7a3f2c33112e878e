"""Markdown tables of an ``esg emulate`` run, as ``docs/results/*/README.md`` shows them.

Usage: ``python benchmarks/results_tables.py DIR/summary.csv``. Prints the hit-rate table (baselines:
hit rate / cost normalised to ESG) and the per-cell table (p99, cost and its split, start-ups, batch).
"""

from __future__ import annotations

import csv
import sys

POLICIES = ("esg", "infless", "fastgshare", "orion", "aquatope")
SLOS = ("strict", "moderate", "relaxed")
LOADS = ("light", "normal", "heavy")


def _pct(part: str, whole: str) -> str:
    w = float(whole)
    return f"{100 * float(part) / w:.0f}%" if w else "-"


def main(path: str) -> None:
    rows = {(r["policy"], r["slo"], r["load"]): r for r in csv.DictReader(open(path))}
    cells = [(s, ld) for ld in LOADS for s in SLOS if ("esg", s, ld) in rows]
    print("| SLO / load | ESG | INFless | FaST-GShare | Orion | Aquatope |")
    print("|---|---|---|---|---|---|")
    for s, ld in cells:
        out = [f"{float(rows[('esg', s, ld)]['slo_hit_rate']):.3f}"]
        for p in POLICIES[1:]:
            r = rows.get((p, s, ld))
            out.append("-" if r is None else f"{float(r['slo_hit_rate']):.3f} / {float(r['cost_norm_esg']):.2f}")
        print(f"| {s} / {ld} | " + " | ".join(out) + " |")
    print()
    print("| SLO / load | policy | requests | hit rate | p99 ms | cost | exec | idle | cold | MIG "
          "| cold starts | MIG changes | pre-warms | mean batch |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for s, ld in cells:
        for p in POLICIES:
            r = rows.get((p, s, ld))
            if r is None:
                continue
            print(f"| {s} / {ld} | {p} | {r['requests']} | {float(r['slo_hit_rate']):.3f} | "
                  f"{float(r['p99_ms']):.0f} | {float(r['cost']):.0f} | {_pct(r['cost_exec'], r['cost'])} | "
                  f"{_pct(r['cost_idle'], r['cost'])} | {_pct(r['cost_cold'], r['cost'])} | "
                  f"{_pct(r['cost_mig'], r['cost'])} | {r['cold_starts']} | {r['mig_changes']} | "
                  f"{r.get('prewarms', '-')} | {float(r['mean_batch']):.2f} |")


if __name__ == "__main__":
    main(sys.argv[1])
