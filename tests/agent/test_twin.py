"""``esg agent --runner twin``: workers that wait the profiled latency with the emulator's model."""

from __future__ import annotations

import statistics
import time
import uuid
from pathlib import Path

import pytest

from esg.cluster import SliceRef
from esg.emulator.config import EmulatorParams
from esg.model import Config
from esg_files import load_profile
from invoker_agent.actions import ActionCode
from invoker_agent.runtime_client import BATCH_KEY, WorkerStartError
from invoker_agent.twin import TwinClock, TwinError, TwinFactory, TwinProfiles
from invoker_agent.workers import WorkerSpec
from tests.agent.agent_harness import REPO, AgentProcess, OpenWhiskStandIn, SchedulerSide

A100 = REPO / "profiles" / "tables" / "a100"


def action(name: str, **annotations) -> ActionCode:
    return ActionCode(f"/guest/{name}", "0.0.1", "python:3", "", annotations=annotations)


def twin(sleeps: list[float], name: str = "resnet50", cv: float = 0.05, **annotations):
    clock = TwinClock(EmulatorParams(noise_cv=cv), 3, "n0")
    factory = TwinFactory(TwinProfiles(A100), clock, lambda uuid: {"MIG-a": "3g.20gb"}.get(uuid))
    w = factory(WorkerSpec((0,), "MIG-a", 256, Config(1, 2, "3g.20gb")), action(name, **annotations))
    w.sleep = sleeps.append
    return w


def test_a_twin_worker_waits_the_cold_start_then_the_profiled_latency_of_its_dispatched_config():
    sleeps: list[float] = []
    w = twin(sleeps, cv=0.0)
    w.start()
    assert sleeps == [2.5] and w.alive()
    status, body = w.run({"value": {BATCH_KEY: [{"x": 1}, {"x": 2}]}}, 60)
    expected = load_profile(A100 / "resnet50.json").latency(Config(2, 2, "3g.20gb"))
    assert status == 200 and sleeps[1] == pytest.approx(expected / 1000)
    assert body == {BATCH_KEY: [{"twin": "resnet50", "config": "b2/2c/3g.20gb", "index": 0},
                                {"twin": "resnet50", "config": "b2/2c/3g.20gb", "index": 1}]}
    # a warm worker re-used for another vCPU count times the batch by that count
    w.config = Config(1, 4, "3g.20gb")
    w.run({"value": {"x": 1}}, 60)
    assert sleeps[2] == pytest.approx(load_profile(A100 / "resnet50.json").latency(Config(1, 4, "3g.20gb")) / 1000)


def test_the_noise_is_the_emulators_lognormal_of_mean_one_and_seeded():
    a = TwinClock(EmulatorParams(), 3, "n0")
    draws = [a.factor() for _ in range(4000)]
    assert statistics.fmean(draws) == pytest.approx(1.0, abs=0.005)
    assert statistics.stdev(draws) == pytest.approx(0.05, rel=0.1)
    b = TwinClock(EmulatorParams(), 3, "n0")
    assert [b.factor() for _ in range(5)] == draws[:5]
    assert [TwinClock(EmulatorParams(), 3, "n1").factor() for _ in range(5)] != draws[:5]


def test_profile_by_annotation_and_unknown_ones_are_named():
    sleeps: list[float] = []
    assert twin(sleeps, "classify", **{"esg-profile": "densenet121"}).profile.function == "densenet121"
    with pytest.raises(WorkerStartError, match="no profile for /guest/nope"):
        twin(sleeps, "nope").start()
    w = twin(sleeps, "vote")      # vote is CPU only: a MIG configuration is not in its table
    w.start()
    status, body = w.run({"value": {"x": 1}}, 60)
    assert status != 200 and "vote" in body["error"] and "b1/2c/3g.20gb" in body["error"]


def test_bad_profiles_directories_are_named(tmp_path: Path):
    with pytest.raises(TwinError, match="not a directory"):
        TwinProfiles(tmp_path / "missing")
    with pytest.raises(TwinError, match="no profile tables"):
        TwinProfiles(tmp_path)
    (tmp_path / "f.json").write_text("{")
    with pytest.raises(TwinError, match="f.json"):
        TwinProfiles(tmp_path)


@pytest.mark.timeout(90)
def test_a_twin_agent_carves_the_slice_pays_mig_time_and_cold_start_then_runs_warm(redis_url, tmp_path):
    ow = OpenWhiskStandIn()
    ow.add("resnet50", "def main(args):\n    raise SystemExit('never run by the twin')\n")
    prefix = f"t{uuid.uuid4().hex[:8]}_"
    proc = AgentProcess(tmp_path, redis_url, ow.url, "twin-a", prefix, "--fake-gpu", "A100-40GB", "--vcpus", "16",
                        "--runner", "twin", "--profiles", str(A100))
    sched = SchedulerSide(redis_url, prefix)
    try:
        sched.heartbeat("twin-a", timeout=30)
        three = SliceRef("3g.20gb", 4)
        t0 = time.monotonic()
        first = sched.result(sched.dispatch("twin-a", "resnet50", [{"i": 1}, {"i": 2}], slice_=three,
                                            config=Config(2, 2, "3g.20gb")).batch_id)
        took = time.monotonic() - t0
        assert [r.status_code for r in first.results] == [0, 0], first
        assert first.cold is True and first.reconfigured == 1
        assert first.results[0].result == {"twin": "resnet50", "config": "b2/2c/3g.20gb", "index": 0}
        # one MIG instance created (2 s) and a cold start (2.5 s) before the run
        assert took >= 4.5 and first.results[0].init_ms >= 2500
        t0 = time.monotonic()
        warm = sched.result(sched.dispatch("twin-a", "resnet50", [{"i": 3}], slice_=three,
                                           config=Config(1, 2, "3g.20gb")).batch_id)
        assert warm.cold is False and warm.reconfigured == 0 and time.monotonic() - t0 < 2.0, warm
        hb = sched.heartbeat("twin-a", lambda h: warm.batch_id in h.done)
        assert [(w.function, w.slice, w.count) for w in hb.idle] == [("resnet50", three, 1)]
    finally:
        sched.close()
        proc.stop()
        ow.close()
