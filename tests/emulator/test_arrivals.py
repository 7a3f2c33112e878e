"""Arrivals files: written by the workload generator, read back line-checked, replayed by the emulator."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from esg.arrivals import ArrivalsError
from esg.emulator.workload import generate
from esg_files import read_arrivals, write_arrivals

ROOT = Path(__file__).resolve().parents[2]
APPS = ["a", "b"]


def test_written_arrivals_read_back_to_the_microsecond(tmp_path):
    reqs = generate(APPS, 20.0, 5.0, np.random.default_rng(1))
    path = tmp_path / "arr.csv"
    assert write_arrivals(path, reqs) == len(reqs)
    back = read_arrivals(path, APPS)
    assert [r.app for r in back] == [r.app for r in reqs]
    assert np.allclose([r.arrival_ms for r in back], [r.arrival_ms for r in reqs], atol=1e-3)
    assert path.read_text().splitlines()[0] == "time_s,app"


@pytest.mark.parametrize("text, needle", [
    ("when,what\n1,a\n", "header"),
    ("time_s,app\n", "no arrivals"),
    ("time_s,app\n1,a\nsoon,a\n", "line 3: time_s 'soon'"),
    ("time_s,app\n2,a\n1,a\n", "line 3: time_s 1 is earlier"),
    ("time_s,app\n-1,a\n", "line 2: time_s must be"),
    ("time_s,app\nnan,a\n", "line 2"),
    ("time_s,app\n1,c\n", "line 2: unknown app 'c'"),
    ("time_s,app\n1,a,x\n", "line 2: expected"),
    ("time_s,app\n1,\n", "line 2: no app"),
])
def test_bad_lines_are_named(tmp_path, text, needle):
    path = tmp_path / "arr.csv"
    path.write_text(text)
    with pytest.raises(ArrivalsError, match=needle):
        read_arrivals(path, APPS)


def test_missing_file_is_named(tmp_path):
    with pytest.raises(ArrivalsError, match="no such arrivals file"):
        read_arrivals(tmp_path / "none.csv")


def _emulate(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "esg_cli.main", "emulate", "--policies", "esg", "--slo",
                           "moderate", "--nodes", "2", "--warmup-s", "2", "--jobs", "1", "--no-plots", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)


def _summary(path: Path) -> dict:
    with open(path) as fh:
        return next(csv.DictReader(fh))


def test_emulate_writes_the_arrivals_it_generated_and_replays_them(tmp_path):
    arr = tmp_path / "arr.csv"
    a = _emulate("--load", "light", "--duration-s", "8", "--out", str(tmp_path / "a"), "--write-arrivals", str(arr))
    assert a.returncode == 0, a.stderr
    first = _summary(tmp_path / "a" / "summary.csv")
    assert len(read_arrivals(arr)) == int(first["requests"]) + sum(
        1 for r in read_arrivals(arr) if r.arrival_ms < 2000)
    b = _emulate("--arrivals", str(arr), "--out", str(tmp_path / "b"))
    assert b.returncode == 0, b.stderr
    again = _summary(tmp_path / "b" / "summary.csv")
    assert again["load"] == "arr" and again["requests"] == first["requests"]
    per_app = (tmp_path / "b" / "per_app.csv").read_text().splitlines()
    assert per_app[0] == "policy,slo,load,app,requests,slo_hit_rate,p50_ms,p99_ms"
