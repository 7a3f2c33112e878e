"""How the ranking moves with the start-up constants: ``esg emulate`` over a grid of
``--mig-reconfig-ms`` and ``--cold-start-scale``, every policy, per load and seed.

Usage: ``PYTHONPATH=. python benchmarks/startup_sweep.py --out DIR [--slo moderate] [--load normal,heavy]
[--seeds 0,1,2 or 0-2] [--nodes 2] [--duration-s 40] [--warmup-s 20] [--mig-ms 500,1000,2000,4000,6000]
[--cold 0,0.5,1,2] [--policies ...]``. Runs the MIG values at cold-start scale 1 and the cold-start
scales at 2000 ms (the defaults), each an ``esg emulate`` run into
``DIR/<load>/seed<seed>/mig<ms>-cold<scale>/`` (a run already there is read, not made again), then
prints a Markdown table per load: per setting, each policy's hit rate (mean over the seeds) and cost
normalised to ESG, whether ESG's mean hit rate is at least the best rival's (``esg-paper`` and the
ablations are not rivals), and ESG's hit rate less the best rival's paired by seed with its 95 %
Student's t interval: *leads* when it lies above 0, *loses* when below, else *ties* (as
``benchmarks/protocol.py`` judges a held-out cell).
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path
from statistics import mean

from benchmarks.emulate_runs import TRACE, add_run_flags, check_emulate, emulate_kept, is_rival, seeds_of
from benchmarks.protocol import interval, signed
from esg_cli.cliparse import Parser


def run(args, load: str, seed: int, mig: float, cold: float) -> dict[str, tuple[float, float]]:
    """One setting's ``summary.csv`` as {policy: (hit rate, cost normalised to ESG)}, run if missing."""
    out = Path(args.out) / load / f"seed{seed}" / f"mig{mig:g}-cold{cold:g}"
    summary = emulate_kept(args, out, *run_flags(args, load, seed, mig, cold), quiet=True)
    with open(summary) as fh:
        return {r["policy"]: (float(r["slo_hit_rate"]), float(r["cost_norm_esg"])) for r in csv.DictReader(fh)}


def run_flags(args, load: str, seed: int, mig: float, cold: float) -> list[str]:
    """What one setting's run passes to ``esg emulate`` besides the common flags."""
    return ["--slo", args.slo, "--load", load, "--seed", str(seed), "--trace", TRACE,
            "--trace-minute-s", args.trace_minute_s, "--mig-reconfig-ms", f"{mig:g}", "--cold-start-scale", f"{cold:g}"]


def numbers_of(ap: argparse.ArgumentParser, flag: str, text: str) -> list[float]:
    """A comma-separated list of numbers (anything else is the parser's error, naming ``flag``)."""
    try:
        return [float(x) for x in text.split(",")]
    except ValueError:
        ap.error(f"{flag}: {text!r} is not a comma-separated list of numbers")


def main() -> None:
    ap = Parser(description=__doc__.splitlines()[0])
    add_run_flags(ap, seeds="0,1,2", slo="moderate", load="normal,heavy", duration_s="40", warmup_s="20")
    ap.add_argument("--mig-ms", default="500,1000,2000,4000,6000",
                    help="MIG change times swept at cold-start scale 1, comma-separated (default: %(default)s)")
    ap.add_argument("--cold", default="0,0.5,1,2",
                    help="cold-start scales swept at 2000 ms, comma-separated (default: %(default)s)")
    args = ap.parse_args()
    grid = [(m, 1.0) for m in numbers_of(ap, "--mig-ms", args.mig_ms)]
    grid += [(2000.0, c) for c in numbers_of(ap, "--cold", args.cold) if (2000.0, c) not in grid]
    seeds = seeds_of(ap, args.seeds)
    for load in args.load.split(","):
        for mig, cold in grid:  # esg emulate refuses a negative or absurd cost by name
            check_emulate(ap, args, *run_flags(args, load, seeds[0], mig, cold))
    policies = args.policies.split(",")
    rivals = [p for p in policies if is_rival(p)]
    for load in args.load.split(","):
        print(f"\n### {args.slo} SLO, {load} load (mean hit rate over seeds {args.seeds} / cost normalised to ESG)\n")
        print("| MIG ms | cold-start scale | " + " | ".join(policies) + " | ESG ≥ best rival | ESG − best rival, "
              "paired [95 %] |")
        print("|---|---|" + "---|" * (len(policies) + 2))
        for mig, cold in grid:
            by_seed = [run(args, load, s, mig, cold) for s in seeds]
            hit = {p: mean(b[p][0] for b in by_seed) for p in policies}
            cost = {p: mean(b[p][1] for b in by_seed) for p in policies}
            best = max(rivals, key=lambda p: hit[p]) if rivals else None
            verdict = "" if best is None else (
                f"yes (+{hit['esg'] - hit[best]:.3f} over {best})" if hit["esg"] >= hit[best]
                else f"**no** ({hit['esg'] - hit[best]:.3f} to {best})")
            cells = " | ".join(f"{hit[p]:.3f} / {cost[p]:.2f}" for p in policies)
            print(f"| {mig:g} | {cold:g} | {cells} | {verdict} | {paired(by_seed, best)} |", flush=True)


def paired(by_seed: list[dict[str, tuple[float, float]]], best: str | None) -> str:
    """ESG's hit rate less ``best``'s, paired by seed: mean [95 % interval] and the verdict."""
    if best is None:
        return ""
    d = interval([b["esg"][0] - b[best][0] for b in by_seed])
    return f"{signed(d)} {d.verdict()}"


if __name__ == "__main__":
    main()
