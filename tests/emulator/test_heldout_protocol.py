"""benchmarks/protocol.py: the held-out comparison's intervals, verdicts and files; and the flags it and
benchmarks/startup_sweep.py refuse."""

from __future__ import annotations

import csv
import math
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import protocol, startup_sweep
from benchmarks.emulate_runs import add_run_flags, check_emulate, emulate_kept, seeds_of
from esg_cli.cliparse import Parser

ROOT = Path(__file__).resolve().parents[2]


def test_the_interval_is_students_t_at_95_percent():
    # [1, 2, 3, 4]: mean 2.5, sample sd sqrt(5/3); t(0.975, 3) = 3.182446 (printed tables)
    i = protocol.interval([1.0, 2.0, 3.0, 4.0])
    assert i.mean == pytest.approx(2.5)
    assert i.half == pytest.approx(3.182446 * math.sqrt(5 / 3) / 2, rel=1e-6)
    # ten seeds: t(0.975, 9) = 2.262157
    ten = protocol.interval([0.1 * k for k in range(10)])
    assert ten.half == pytest.approx(2.262157 * math.sqrt(sum((0.1 * k - 0.45) ** 2 for k in range(10)) / 9)
                                     / math.sqrt(10), rel=1e-6)
    assert protocol.interval([0.7]).half == 0.0


def test_a_cost_per_request_keeps_two_significant_digits():
    # 2 nodes: three decimals as before; 16 nodes: a cost of 0.00512 must not print as 0.005 ± 0.000
    assert protocol._fmt(protocol.Interval(0.471, 0.011), protocol._cost_digits(0.471)) == "0.471 ± 0.011"
    assert protocol._fmt(protocol.Interval(0.056, 0.001), protocol._cost_digits(0.056)) == "0.056 ± 0.001"
    assert protocol._fmt(protocol.Interval(0.00512, 0.00031), protocol._cost_digits(0.00512)) == "0.0051 ± 0.0003"
    assert protocol._cost_digits(0.0) == 3 and protocol._cost_digits(math.nan) == 3


def test_a_lead_counts_only_when_its_interval_clears_zero():
    assert protocol.Interval(0.05, 0.02).verdict() == "leads"
    assert protocol.Interval(0.05, 0.06).verdict() == "ties"
    assert protocol.Interval(-0.05, 0.02).verdict() == "loses"


def _row(policy: str, hit: float, cost: float = 100.0) -> dict[str, str]:
    return {"policy": policy, "slo": "moderate", "load": "normal", "slo_hit_rate": str(hit), "requests": "10",
            "cost": str(cost), "cost_exec": str(cost / 2), "cost_idle": str(cost / 4), "cost_cold": str(cost / 4),
            "cost_mig": "0"}


def test_esg_is_paired_with_the_rival_of_the_highest_mean_not_with_esg_paper_or_an_ablation():
    runs = []
    for seed_hits in ((0.90, 0.95, 0.99, 0.80, 0.70), (0.92, 0.96, 0.99, 0.84, 0.60), (0.91, 0.97, 0.99, 0.82, 0.65)):
        e, paper, ablation, orion, infless = seed_hits
        runs.append({(p, "moderate", "normal"): _row(p, h) for p, h in
                     (("esg", e), ("esg-paper", paper), ("esg-without-pool-sizing", ablation),
                      ("orion", orion), ("infless", infless))})
    policies = ["esg", "esg-paper", "esg-without-pool-sizing", "orion", "infless"]
    c = protocol.cell_stats(runs, policies, "moderate", "normal")
    assert c["best"] == "orion"
    assert c["vs_best"].mean == pytest.approx(0.09) and c["vs_best"].verdict() == "leads"
    assert c["vs_paper"].mean == pytest.approx(-0.05) and c["vs_paper"].verdict() == "loses"
    assert c["vs"]["esg-without-pool-sizing"].mean == pytest.approx(-0.08)
    assert c["vs"]["esg-without-pool-sizing"].verdict() == "loses"
    assert set(c["vs"]) == set(policies) - {"esg"}
    assert c["cost"]["esg"].mean == pytest.approx(10.0)  # per measured request
    assert c["split"]["esg"]["cost_idle"] == pytest.approx(2.5)


def test_with_brings_only_the_policies_every_run_holds_in_every_cell_asked_for():
    cells = [("moderate", "light"), ("moderate", "normal")]
    run = {(p, slo, load): {} for p in ("esg", "orion", "infless-hop-shares") for slo, load in cells}
    run[("esg-without-pool-sizing", "moderate", "normal")] = {}  # an ablation run at one load only
    other = {k: v for k, v in run.items() if k[0] != "orion"}  # a seed without orion
    assert protocol.extra_policies([run, run], ["esg"], cells) == ["orion", "infless-hop-shares"]
    assert protocol.extra_policies([run, other], ["esg"], cells) == ["infless-hop-shares"]
    assert protocol.extra_policies([run], ["esg"], cells[1:]) == ["orion", "infless-hop-shares",
                                                                   "esg-without-pool-sizing"]


def test_a_small_protocol_run_writes_its_table_csv_and_figure(tmp_path):
    out = tmp_path / "protocol"
    args = [sys.executable, "benchmarks/protocol.py", "--out", str(out), "--seeds", "0,1", "--nodes", "1",
            "--arrivals", "synthetic", "--slo", "moderate", "--load", "light", "--policies", "esg,esg-paper,orion",
            "--duration-s", "8", "--warmup-s", "2", "--jobs", "1"]
    done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "MPLBACKEND": "Agg"})
    assert done.returncode == 0, done.stderr
    assert "1 nodes, synthetic arrivals (seeds 0–1, n = 2)" in done.stdout
    assert "| moderate / light |" in done.stdout and "vs orion" in done.stdout
    with open(out / "n1-synthetic" / "cells.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["policy"] for r in rows] == ["esg", "esg-paper", "orion"]
    assert [r["best_rival"] for r in rows] == ["0", "0", "1"] and rows[0]["esg_minus_policy"] == ""
    assert "ESG − esg-paper | ESG − orion |" in done.stdout
    for r in rows:
        assert 0.0 <= float(r["hit_rate"]) <= 1.0 and float(r["hit_ci95"]) >= 0.0
    assert (out / "n1-synthetic" / "hit_rates.png").stat().st_size > 0
    # the runs are kept: a second call only tabulates them
    again = subprocess.run([*args, "--report-only"], cwd=ROOT, capture_output=True, text=True, timeout=120,
                           env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "MPLBACKEND": "Agg"})
    assert again.returncode == 0 and again.stdout == done.stdout
    # a second port of a rival, run beside esg into a directory of its own, is judged with the whole table
    second = tmp_path / "second"
    args2 = [*args[:3], str(second), *args[4:]]
    args2[args2.index("--policies") + 1] = "esg,infless-hop-shares"
    both = subprocess.run([*args2, "--with", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "MPLBACKEND": "Agg"})
    assert both.returncode == 0, both.stderr
    with open(second / "n1-synthetic" / "cells.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["policy"] for r in rows] == ["esg", "infless-hop-shares", "esg-paper", "orion"]
    rival = max(rows[1::2], key=lambda r: (float(r["hit_rate"]), r["policy"]))  # infless-hop-shares, orion
    assert [r["policy"] for r in rows if r["best_rival"] == "1"] == [rival["policy"]]
    # the same seed's esg rows must be the same runs
    kept = second / "n1-synthetic" / "seed1" / "summary.csv"
    kept.write_text(kept.read_text().replace("esg,moderate,light,", "esg,moderate,light,1", 1))
    differ = subprocess.run([*args2, "--with", str(out), "--report-only"], cwd=ROOT, capture_output=True, text=True,
                            timeout=120, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "MPLBACKEND": "Agg"})
    assert differ.returncode == 2 and "differ in esg's moderate/light row" in differ.stderr, differ.stderr


@pytest.mark.parametrize("script", ["benchmarks/protocol.py", "benchmarks/startup_sweep.py"])
def test_a_bad_seed_list_is_one_line_naming_it(script):
    done = subprocess.run([sys.executable, script, "--out", "unused", "--seeds", "1-x"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 2 and "--seeds: '1-x'" in done.stderr and done.stderr.count("\n") == 1
    assert not (ROOT / "unused").exists()


@pytest.mark.parametrize("seeds", ["3-1", "1,,2", "", "a,b"])
def test_a_seed_list_that_names_no_seed_is_refused(seeds, capsys):
    with pytest.raises(SystemExit) as stopped:
        seeds_of(Parser(prog="protocol.py"), seeds)
    assert stopped.value.code == 2 and f"--seeds: {seeds!r}" in capsys.readouterr().err


def test_both_scripts_read_a_seed_range_and_a_list_alike():
    assert seeds_of(Parser(), "100-103") == [100, 101, 102, 103] == seeds_of(Parser(), "100,101,102,103")


def _parsed(tmp_path: Path, *argv: str):
    ap = Parser(prog="protocol.py")
    add_run_flags(ap, seeds="0", slo="moderate", load="light", duration_s="8", warmup_s="2")
    return ap, ap.parse_args(["--out", str(tmp_path / "out"), *argv])


@pytest.mark.parametrize("flag,value,named", [
    ("--slo", "moderate,bogus", "unknown SLO level bogus"),
    ("--policies", "esg,nope", "unknown policy nope"),
    ("--nodes", "0", "--nodes"),
    ("--nodes", "two", "--nodes"),            # esg emulate's parser refuses it
    ("--duration-s", "-3", "--duration-s"),
])
def test_what_esg_emulate_refuses_is_refused_before_the_first_run(flag, value, named, tmp_path, capsys):
    ap, args = _parsed(tmp_path, flag, value)
    with pytest.raises(SystemExit) as stopped:
        check_emulate(ap, args, "--slo", args.slo, "--load", args.load, "--seed", "0")
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and named in err and err.count("\n") == 1, err
    assert not (tmp_path / "out").exists()


def test_flags_esg_emulate_takes_pass_the_check(tmp_path):
    ap, args = _parsed(tmp_path, "--policies", "esg,orion", "--nodes", "16")
    assert check_emulate(ap, args, "--slo", args.slo, "--load", args.load, "--seed", "0") is None


@pytest.mark.parametrize("quiet", [False, True])
def test_a_run_that_fails_stops_the_script_with_its_reason(quiet, tmp_path, capfd):
    _, args = _parsed(tmp_path, "--nodes", "0")   # past the check: as if esg emulate failed on its own
    with pytest.raises(SystemExit) as stopped:
        emulate_kept(args, tmp_path / "out" / "seed0", "--slo", args.slo, "--load", args.load, "--seed", "0",
                     quiet=quiet)
    assert "esg emulate into" in str(stopped.value.code) and "failed (exit 2)" in str(stopped.value.code)
    assert "--nodes" in capfd.readouterr().err


def test_a_sweep_value_that_is_no_number_is_refused_by_its_flag(capsys):
    with pytest.raises(SystemExit) as stopped:
        startup_sweep.numbers_of(Parser(prog="startup_sweep.py"), "--mig-ms", "500,fast")
    assert stopped.value.code == 2 and "--mig-ms: '500,fast'" in capsys.readouterr().err
    assert startup_sweep.numbers_of(Parser(), "--cold", "0,0.5,2") == [0.0, 0.5, 2.0]


def test_a_sweep_point_pairs_esg_with_the_best_rival_by_seed():
    """ESG less the best rival per seed, with the protocol's interval: a lead on every seed by different
    amounts leads; one that changes sign ties; the verdict is the interval's, not the mean's."""
    def seeds(*pairs):
        return [{"esg": (e, 1.0), "orion": (o, 1.0)} for e, o in pairs]
    # differences 0.10, 0.10, 0.15: mean 0.1167, sd 0.02887, t(0.975, 2) = 4.302653 -> half-width 0.0717
    assert startup_sweep.paired(seeds((0.9, 0.8), (0.8, 0.7), (0.85, 0.7)), "orion") == "+0.117 [+0.045, +0.188] leads"
    assert startup_sweep.paired(seeds((0.9, 0.5), (0.2, 0.7)), "orion").endswith(" ties")
    assert startup_sweep.paired(seeds((0.5, 0.6), (0.4, 0.55), (0.3, 0.42)), "orion").endswith(" loses")
    assert startup_sweep.paired(seeds((0.5, 0.6)), None) == ""
