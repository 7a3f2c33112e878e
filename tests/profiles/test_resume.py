"""An interrupted profile run resumes where it stopped: only the missing configurations run again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from esg.model import Config
from esg_files import load_profile
from profiles.grid import parse_grid
from profiles.host import detect_host
from profiles.profiler import Profiler, ProfilerSettings, partial_path
from profiles.targets import resolve

from .helpers import ACTIONS, read_json

RUNS = 2
WARMUP = 1


def _target():
    _what, [target] = resolve(str(ACTIONS / "pinned.py"), {"seed": 1})
    return target


def _options(out: Path, batch: str = "1,2,4", stop_after: int | None = None) -> ProfilerSettings:
    return ProfilerSettings(parse_grid(batch, "1", "none", "A100-40GB"), RUNS, "A100-40GB", out, WARMUP,
                   progress=False, stop_after=stop_after)


def _batches(configs: int, workers: int = 1) -> int:
    """Batches sent for `configs` configurations: one cold-start request per worker, warm-up + timed runs."""
    return workers + configs * (WARMUP + RUNS)


def test_interrupted_run_resumes_with_only_the_missing_configurations(tmp_path):
    host = detect_host()
    first = Profiler(_target(), _options(tmp_path, stop_after=1), host, log=lambda m: None)
    with pytest.raises(KeyboardInterrupt):
        first.run()
    assert first.report.measured == [Config(1, 1)] and first.report.batches_run == _batches(1)
    partial = read_json(partial_path(tmp_path, "pinned"))           # consistent after the interruption
    assert list(partial["results"]) == ["b1/1c/cpu"]
    assert not (tmp_path / "pinned.json").exists()

    second = Profiler(_target(), _options(tmp_path), host, log=lambda m: None).run()
    assert second.resumed == [Config(1, 1)]
    assert second.measured == [Config(2, 1), Config(4, 1)]
    assert second.batches_run == _batches(2)
    table = load_profile(tmp_path / "pinned.json")
    assert [c.batch for c in table.configs] == [1, 2, 4]

    assert not partial_path(tmp_path, "pinned").exists()             # finished: the table holds it all
    third = Profiler(_target(), _options(tmp_path), host, log=lambda m: None).run()
    assert third.measured == [] and third.batches_run == 0 and len(third.resumed) == 3


def test_a_finished_table_is_extended_with_only_the_new_configurations(tmp_path):
    host = detect_host()
    Profiler(_target(), _options(tmp_path, "1,2"), host, log=lambda m: None).run()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pinned.json"]     # no partial file left
    more = Profiler(_target(), _options(tmp_path, "1,2,8"), host, log=lambda m: None).run()
    assert more.resumed == [Config(1, 1), Config(2, 1)]
    assert more.measured == [Config(8, 1)] and more.batches_run == _batches(1)
    assert [c.batch for c in load_profile(tmp_path / "pinned.json").configs] == [1, 2, 8]


def test_a_configuration_deleted_from_the_partial_file_is_measured_again(tmp_path):
    host = detect_host()
    with pytest.raises(KeyboardInterrupt):
        Profiler(_target(), _options(tmp_path, "1,2,4", stop_after=2), host, log=lambda m: None).run()
    path = partial_path(tmp_path, "pinned")
    data = read_json(path)
    del data["results"]["b2/1c/cpu"]
    path.write_text(json.dumps(data))
    again = Profiler(_target(), _options(tmp_path, "1,2,8"), host, log=lambda m: None).run()
    assert again.resumed == [Config(1, 1)]
    assert again.measured == [Config(2, 1), Config(8, 1)] and again.batches_run == _batches(2)


def test_changed_runs_start_over(tmp_path):
    host = detect_host()
    Profiler(_target(), _options(tmp_path, "1"), host, log=lambda m: None).run()
    notes: list[str] = []
    opts = ProfilerSettings(parse_grid("1", "1", "none", "A100-40GB"), RUNS + 1, "A100-40GB", tmp_path, WARMUP,
                   progress=False)
    report = Profiler(_target(), opts, host, log=notes.append).run()
    assert report.measured == [Config(1, 1)] and report.resumed == []
    assert any("different runs: starting over" in n for n in notes)


def test_ctrl_c_in_the_cli_keeps_the_partial_file_and_says_how_to_resume(esg, tmp_path, monkeypatch):
    real = Profiler._measure
    calls = []

    def measure_then_interrupt(self, config, store):
        calls.append(config)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(self, config, store)

    monkeypatch.setattr(Profiler, "_measure", measure_then_interrupt)
    args = ["profile", ACTIONS / "pinned.py", "--batch", "1,2,4", "--vcpus", "1", "--runs", "1",
            "--out", tmp_path, "--no-progress"]
    r = esg(*args)
    assert r.code == 130
    assert f"kept in {partial_path(tmp_path, 'pinned')}" in r.err and "run the same command again" in r.err
    assert list(read_json(partial_path(tmp_path, "pinned"))["results"]) == ["b1/1c/cpu"]

    monkeypatch.setattr(Profiler, "_measure", real)
    r = esg(*args)
    assert r.code == 0, r.err
    assert "pinned: 2 measured, 1 resumed" in r.out
