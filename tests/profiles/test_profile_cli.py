"""``esg profile`` end to end on cheap functions: tables the planner accepts, failures, skips, bad input."""

from __future__ import annotations

import json
import statistics

import pytest

from esg_files import load_profile
from profiles.host import detect_gpu

from .helpers import ACTIONS, read_json

TINY = '{"seed": 0, "size": 32}'


def test_profile_writes_a_table_the_planner_accepts(esg, tmp_path):
    out = tmp_path / "tables"
    r = esg("profile", "preprocess", "--params", TINY, "--batch", "1,2", "--vcpus", "1", "--runs", "2",
            "--out", out, "--no-progress")
    assert r.code == 0, r.err
    prof = load_profile(out / "preprocess.json")
    assert prof.function == "preprocess" and prof.gpu_model == "A100-40GB"
    assert [(c.batch, c.vcpus, c.gpu) for c in prof.configs] == [(1, 1, None), (2, 1, None)]
    for e in prof.entries:
        assert e.latency_ms == e.extra["p50_ms"] > 0
        assert e.extra["p99_ms"] >= e.extra["p95_ms"] >= e.extra["p50_ms"] and e.extra["samples"] == 2
        runs = e.extra["samples_ms"]   # the spread it measured: the runs' standard deviation over their mean
        assert e.extra["latency_cv"] == pytest.approx(statistics.stdev(runs) / statistics.fmean(runs), abs=1e-4)
    assert prof.cold_start_ms > 0 and prof.output_bytes > 0
    measured = prof.extra["measured"]
    assert measured["runner"] == "process" and measured["runs"] == 2 and measured["cpu"] and measured["date"]

    app = tmp_path / "pre.json"
    app.write_text(json.dumps({"name": "pre", "slo_ms": 5000, "functions": ["preprocess"], "edges": []}))
    r = esg("plan", "--app", app, "--profiles", out, "--json")
    assert r.code == 0, r.err
    plan = json.loads(r.out)
    assert plan["feasible"] and plan["paths"][0]["configs"]["preprocess"]["gpu"] is None
    # two runs show no p95 (20 are needed): planning at p95 uses the spread they measured
    r = esg("plan", "--app", app, "--profiles", out, "--json", "--slo-percentile", "95")
    assert r.code == 0, r.err
    path = json.loads(r.out)["paths"][0]
    e = next(e for e in prof.entries if e.config.batch == path["configs"]["preprocess"]["batch"])
    from esg.tail import spread_factor
    assert path["latency_ms"] == pytest.approx(e.latency_ms * spread_factor(e.extra["latency_cv"], 95))


def test_thread_count_follows_the_pinned_vcpus(esg, tmp_path):
    # the action answers an error unless ESG_ACTION_THREADS == the CPUs it is pinned to
    r = esg("profile", ACTIONS / "pinned.py", "--batch", "1,3", "--vcpus", "1", "--runs", "2",
            "--out", tmp_path, "--no-progress")
    assert r.code == 0, r.err
    table = read_json(tmp_path / "pinned.json")
    assert len(table["configs"]) == 2 and "failed" not in table


def test_an_action_that_raises_is_recorded_as_failed_and_the_run_goes_on(esg, tmp_path):
    r = esg("profile", ACTIONS / "single_fails.py", "--batch", "1,2,4", "--vcpus", "1", "--runs", "2",
            "--out", tmp_path, "--no-progress")
    assert r.code == 0, r.err
    assert "b1/1c/cpu failed" in r.err and "single requests are not supported" in r.err
    table = read_json(tmp_path / "single-fails.json")
    assert [c["batch"] for c in table["configs"]] == [2, 4]          # measured after the failure
    assert [(f["batch"], f["vcpus"], f["gpu"]) for f in table["failed"]] == [(1, 1, None)]
    assert "single requests are not supported" in table["failed"][0]["error"]
    load_profile(tmp_path / "single-fails.json")                     # failures are not latencies


def test_every_configuration_failing_exits_non_zero(esg, tmp_path):
    r = esg("profile", ACTIONS / "always_fails.py", "--batch", "1,2", "--vcpus", "1", "--runs", "1",
            "--out", tmp_path, "--no-progress")
    assert r.code == 1
    assert "every configuration of always-fails failed" in r.err and "boom" in r.err
    assert not (tmp_path / "always-fails.json").exists()


@pytest.mark.skipif(detect_gpu()[0] is not None, reason="a GPU is present: MIG configurations would run")
def test_mig_and_oversized_configurations_are_skipped_with_a_message(esg, tmp_path):
    r = esg("profile", ACTIONS / "pinned.py", "--batch", "1", "--vcpus", "1,999", "--gpu", "none,1g.5gb,3g.20gb",
            "--runs", "1", "--out", tmp_path, "--no-progress")
    assert r.code == 0, r.err
    assert "skipped 2 configuration(s) of MIG profile 1g.5gb: no NVIDIA GPU" in r.err
    assert "skipped 2 configuration(s) of MIG profile 3g.20gb: no NVIDIA GPU" in r.err
    assert "skipped 1 configuration(s) of 999 vCPUs: needs 999 vCPUs" in r.err
    table = read_json(tmp_path / "pinned.json")
    assert [(c["batch"], c["vcpus"], c["gpu"]) for c in table["configs"]] == [(1, 1, None)]
    assert {(s["vcpus"], s["gpu"]) for s in table["skipped"]} == {(999, None), (1, "1g.5gb"), (999, "1g.5gb"),
                                                                   (1, "3g.20gb"), (999, "3g.20gb")}


@pytest.mark.skipif(detect_gpu()[0] is not None, reason="a GPU is present: MIG configurations would run")
def test_nothing_measurable_exits_non_zero(esg, tmp_path):
    r = esg("profile", ACTIONS / "pinned.py", "--batch", "1", "--vcpus", "1", "--gpu", "2g.10gb",
            "--runs", "1", "--out", tmp_path, "--no-progress")
    assert r.code == 1 and "nothing measured for pinned" in r.err


@pytest.mark.parametrize("args, named", [
    (["vote", "--batch", "0"], "--batch: 0 is not a positive integer"),
    (["vote", "--batch", "1,,2"], "--batch: expected a comma-separated list"),
    (["vote", "--vcpus", "x"], "--vcpus: 'x' is not a positive integer"),
    (["vote", "--gpu", "9g.9gb"], "--gpu: MIG profile '9g.9gb' is unknown to A100-40GB"),
    (["vote", "--gpu-model", "V100"], "--gpu-model: unknown GPU model 'V100'"),
    (["vote", "--runs", "0"], "--runs: must be at least 1, got 0"),
    (["vote", "--warmup", "0"], "--warmup must be at least 1"),
    (["vote", "--params", "{bad"], "--params is not JSON"),
    (["no-such-fn"], "unknown action or app 'no-such-fn'"),
    (["apps/no-such-app.json"], "unknown action or app 'apps/no-such-app.json'"),
    (["missing_action.py"], "action file missing_action.py does not exist"),
])
def test_bad_arguments_exit_2_naming_the_problem(esg, tmp_path, args, named):
    r = esg("profile", *args, "--out", tmp_path)
    assert r.code == 2
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and named in lines[0], r.err
    assert list(tmp_path.iterdir()) == []
