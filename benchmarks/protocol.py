"""The held-out comparison: ``esg emulate`` over seeds nobody tuned on, each cell's mean with a 95 %
confidence interval, and per cell whether ESG's lead over the best rival is significant.

Usage: ``PYTHONPATH=. python benchmarks/protocol.py --out DIR [--seeds 100-109] [--nodes 2]
[--arrivals trace,synthetic] [--slo strict,moderate,relaxed] [--load light,normal,heavy]
[--policies esg,esg-paper,infless,fastgshare,orion,aquatope] [--duration-s 150] [--warmup-s 30]
[--jobs 2] [--with DIR ...] [--report-only]``.

Each (arrivals, seed) is one ``esg emulate`` run into ``DIR/n<nodes>-<arrivals>/seed<seed>/`` (a run
already there is read, not made again). Then, per cell and policy over the seeds: the mean hit rate and
the mean cost per measured request with its split (execution, idle, cold starts, MIG changes), each
with a Student's t 95 % interval; per cell, the paired difference of ESG's hit rate with each other policy's, and which is the best
rival (the rival with the highest mean; ``esg-paper`` and the ``esg-without-*`` ablations are not
rivals), each difference with its interval: *leads* when the interval lies above 0, *loses* when below,
else *ties*. Writes ``DIR/n<nodes>-<arrivals>/cells.csv`` and ``.../hit_rates.png`` and prints the
Markdown tables.

``--with DIR`` also tabulates the policies that another protocol directory's runs of the same setup and
seeds hold and ``--out``'s lack: a second port of some rivals, run alone beside ``esg`` into a directory
of its own, is judged against the whole table. Both runs of a seed must give ``esg`` the same row (the
same code, flags and seed); a seed where they differ stops the report.
"""

from __future__ import annotations

import argparse
import csv
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy import stats

from benchmarks.emulate_runs import TRACE, add_run_flags, check_emulate, emulate_kept, is_rival, seeds_of
from esg_cli.cliparse import Parser

SPLIT = ("cost_exec", "cost_idle", "cost_cold", "cost_mig")


@dataclass(frozen=True)
class Interval:
    """A mean over seeds and its 95 % Student's t interval (half-width 0 for one seed)."""

    mean: float
    half: float

    @property
    def low(self) -> float:
        return self.mean - self.half

    @property
    def high(self) -> float:
        return self.mean + self.half

    def verdict(self) -> str:
        """For a difference: whether its interval lies above 0, below it, or spans it."""
        return "leads" if self.low > 0 else "loses" if self.high < 0 else "ties"


def interval(values: list[float], confidence: float = 0.95) -> Interval:
    """The mean of ``values`` and the half-width of its ``confidence`` t interval."""
    x = np.asarray(values, dtype=float)
    if x.size < 2:
        return Interval(float(x.mean()) if x.size else math.nan, 0.0)
    t = float(stats.t.ppf(0.5 + confidence / 2, x.size - 1))
    return Interval(float(x.mean()), t * float(x.std(ddof=1)) / math.sqrt(x.size))


def setup_dir(args: argparse.Namespace, arrivals: str) -> Path:
    """Where one cluster size and kind of arrivals keeps its runs and tables."""
    return Path(args.out) / f"n{args.nodes}-{arrivals}"


def run(args: argparse.Namespace, arrivals: str, seed: int) -> Path:
    """One seed's ``summary.csv``: run unless kept (or, with ``--report-only``, only where it is kept)."""
    out = setup_dir(args, arrivals) / f"seed{seed}"
    if args.report_only:
        return out / "summary.csv"
    return emulate_kept(args, out, *run_flags(args, arrivals, seed))


def run_flags(args: argparse.Namespace, arrivals: str, seed: int) -> list[str]:
    """What one seed's run passes to ``esg emulate`` besides the common flags."""
    trace = ["--trace", TRACE, "--trace-minute-s", args.trace_minute_s] if arrivals == "trace" else []
    return ["--slo", args.slo, "--load", args.load, "--seed", str(seed), *trace]


Rows = dict[tuple[str, str, str], dict[str, str]]
"""One run's summary rows by (policy, SLO, load)."""


def per_request(row: dict[str, str], column: str) -> float:
    n = float(row["requests"])
    return float(row[column]) / n if n else math.nan


def cell_stats(runs: list[Rows], policies: list[str], slo: str, load: str) -> dict:
    """One cell over the seeds: per policy its hit rate, cost per request and split; ESG's paired
    differences with every other policy, and which rival is the best."""
    hit = {p: [float(r[(p, slo, load)]["slo_hit_rate"]) for r in runs] for p in policies}
    out: dict = {"hit": {p: interval(v) for p, v in hit.items()},
                 "cost": {p: interval([per_request(r[(p, slo, load)], "cost") for r in runs]) for p in policies},
                 "split": {p: {c: float(np.mean([per_request(r[(p, slo, load)], c) for r in runs])) for c in SPLIT}
                           for p in policies}}
    if "esg" not in hit:
        return out
    out["vs"] = {p: interval([e - b for e, b in zip(hit["esg"], hit[p])]) for p in policies if p != "esg"}
    rivals = [p for p in policies if is_rival(p)]
    if rivals:
        out["best"] = max(rivals, key=lambda p: (out["hit"][p].mean, p))
        out["vs_best"] = out["vs"][out["best"]]
    if "esg-paper" in out["vs"]:
        out["vs_paper"] = out["vs"]["esg-paper"]
    return out


def _cost_digits(mean: float) -> int:
    """Decimals that show a cost per request with at least two significant digits (three decimals on
    2 nodes; a 16-node cluster's costs per request are ten times smaller)."""
    return 3 if not mean > 0 else max(3, 1 - math.floor(math.log10(mean)))


def _fmt(i: Interval, digits: int = 3) -> str:
    return f"{i.mean:.{digits}f} ± {i.half:.{digits}f}"


def signed(i: Interval) -> str:
    """A difference as ``+mean [+low, +high]`` (three decimals)."""
    return f"{i.mean:+.3f} [{i.low:+.3f}, {i.high:+.3f}]"


def report(setup: str, cells: dict[tuple[str, str], dict], policies: list[str], seeds: list[int], out: Path) -> None:
    print(f"\n### {setup} (seeds {seeds[0]}–{seeds[-1]}, n = {len(seeds)})\n")
    print("Hit rate, mean ± 95 % half-width:\n")
    print("| SLO / load | " + " | ".join(policies) + " | ESG − best rival | ESG − esg-paper |")
    print("|---|" + "---|" * (len(policies) + 2))
    for (slo, load), c in cells.items():
        vs = f"{signed(c['vs_best'])} vs {c['best']}: **{c['vs_best'].verdict()}**" if "vs_best" in c else "-"
        paper = f"{signed(c['vs_paper'])}: {c['vs_paper'].verdict()}" if "vs_paper" in c else "-"
        print(f"| {slo} / {load} | " + " | ".join(_fmt(c["hit"][p]) for p in policies) + f" | {vs} | {paper} |")
    others = [p for p in policies if p != "esg"]
    if "esg" in policies and others:
        print("\nESG's hit rate less each policy's, paired by seed: mean [95 % interval], and whether ESG leads, "
              "ties or loses:\n")
        print("| SLO / load | " + " | ".join(f"ESG − {p}" for p in others) + " |")
        print("|---|" + "---|" * len(others))
        for (slo, load), c in cells.items():
            print(f"| {slo} / {load} | " + " | ".join(f"{signed(c['vs'][p])} {c['vs'][p].verdict()}" for p in others)
                  + " |")
    print("\nCost per measured request (relative price units, docs/emulator.md; mean ± 95 % half-width), against ESG's "
          "mean, and its split (execution / idle / cold starts / MIG changes, % of the mean):\n")
    print("| SLO / load | " + " | ".join(policies) + " |")
    print("|---|" + "---|" * len(policies))
    for (slo, load), c in cells.items():
        parts = []
        for p in policies:
            total = sum(c["split"][p].values()) or 1.0
            split = "/".join(f"{100 * c['split'][p][k] / total:.0f}" for k in SPLIT)
            ratio = f"{c['cost'][p].mean / c['cost']['esg'].mean:.2f}× ESG, " if "esg" in c["cost"] else ""
            parts.append(f"{_fmt(c['cost'][p], _cost_digits(c['cost'][p].mean))} ({ratio}{split})")
        print(f"| {slo} / {load} | " + " | ".join(parts) + " |")
    _write_csv(cells, policies, out / "cells.csv")
    _plot(setup, cells, policies, out / "hit_rates.png")


def _write_csv(cells: dict[tuple[str, str], dict], policies: list[str], path: Path) -> None:
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["slo", "load", "policy", "hit_rate", "hit_ci95", "cost_per_request", "cost_ci95", *SPLIT,
                    "esg_minus_policy", "diff_ci95", "best_rival"])
        for (slo, load), c in cells.items():
            for p in policies:
                h, k = c["hit"][p], c["cost"][p]
                diff = c.get("vs", {}).get(p)
                w.writerow([slo, load, p, f"{h.mean:.4f}", f"{h.half:.4f}", f"{k.mean:.6f}", f"{k.half:.6f}",
                            *(f"{c['split'][p][s]:.6f}" for s in SPLIT),
                            "" if diff is None else f"{diff.mean:.4f}", "" if diff is None else f"{diff.half:.4f}",
                            int(p == c.get("best"))])


def _plot(setup: str, cells: dict[tuple[str, str], dict], policies: list[str], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = [f"{s}\n{ld}" for s, ld in cells]
    x = np.arange(len(names))
    width = 0.8 / len(policies)
    fig, ax = plt.subplots(figsize=(max(8, 1.3 * len(names)), 4))
    for i, p in enumerate(policies):
        means = [c["hit"][p].mean for c in cells.values()]
        halves = [c["hit"][p].half for c in cells.values()]
        ax.bar(x + (i - (len(policies) - 1) / 2) * width, means, width, yerr=halves, capsize=2, label=p)
    ax.set_xticks(x, names)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("SLO hit rate (mean, 95 % CI)")
    ax.set_title(setup)
    ax.legend(ncol=min(len(policies), 5), fontsize="small", loc="lower center", bbox_to_anchor=(0.5, 1.08))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def read_rows(path: Path) -> Rows:
    with open(path) as fh:
        return {(r["policy"], r["slo"], r["load"]): r for r in csv.DictReader(fh)}


def merged(ap: argparse.ArgumentParser, rows: Rows, path: Path, other: Path) -> Rows:
    """``rows`` (the run at ``path``) and the rows of the run at ``other`` that it lacks (a policy, SLO
    and load it did not run); the two must agree on every ``esg`` row they share."""
    theirs = read_rows(other)
    for key, row in theirs.items():
        mine = rows.get(key)
        if key[0] == "esg" and mine is not None and mine != row:
            ap.error(f"--with: {path} and {other} differ in esg's {key[1]}/{key[2]} row: not the same runs")
    return {**theirs, **rows}


def seed_rows(ap: argparse.ArgumentParser, args: argparse.Namespace, arrivals: str, path: Path) -> Rows:
    """One seed's rows (the run at ``path``), with what the same seed's runs in the ``--with``
    directories add."""
    rows = read_rows(path)
    for other_dir in args.with_dirs:
        other = Path(other_dir) / setup_dir(args, arrivals).name / path.parent.name / path.name
        if other.exists():
            rows = merged(ap, rows, path, other)
    return rows


def extra_policies(runs: list[Rows], named: list[str], cells: list[tuple[str, str]]) -> list[str]:
    """The policies besides ``named`` (what ``--with`` brought) that every run holds in every one of
    ``cells``, in their first run's order (an ablation run at one load only is left out of the others)."""
    return [p for p in dict.fromkeys(p for p, _slo, _load in runs[0])
            if p not in named and all((p, slo, load) in r for r in runs for slo, load in cells)]


def main() -> None:
    ap = Parser(description=__doc__.splitlines()[0])
    add_run_flags(ap, seeds="100-109", slo="strict,moderate,relaxed", load="light,normal,heavy",
                  duration_s="150", warmup_s="30")
    ap.add_argument("--arrivals", default="trace,synthetic",
                    help="trace, synthetic or both, comma-separated (default: %(default)s)")
    ap.add_argument("--report-only", action="store_true", help="tabulate the runs already there")
    ap.add_argument("--with", dest="with_dirs", action="append", default=[], metavar="DIR",
                    help="also tabulate the policies another protocol directory's runs of the same setup and "
                         "seeds hold (repeatable; esg's rows must match)")
    args = ap.parse_args()
    seeds = seeds_of(ap, args.seeds)
    named = args.policies.split(",")
    kinds = args.arrivals.split(",")
    for arrivals in kinds:
        if arrivals not in ("trace", "synthetic"):
            ap.error(f"--arrivals: {arrivals!r} is neither trace nor synthetic")
    if not args.report_only:
        for arrivals in kinds:
            check_emulate(ap, args, *run_flags(args, arrivals, seeds[0]))
    for arrivals in kinds:
        runs: list[Rows] = []
        done: list[int] = []
        for seed in seeds:
            path = run(args, arrivals, seed)
            if path.exists():
                runs.append(seed_rows(ap, args, arrivals, path))
                done.append(seed)
        if not runs:
            continue
        asked = [(slo, load) for load in args.load.split(",") for slo in args.slo.split(",")
                 if all((p, slo, load) in r for r in runs for p in named)]
        policies = [*named, *extra_policies(runs, named, asked)]
        cells = {(slo, load): cell_stats(runs, policies, slo, load) for slo, load in asked}
        report(f"{args.nodes} nodes, {arrivals} arrivals", cells, policies, done, setup_dir(args, arrivals))


if __name__ == "__main__":
    main()
