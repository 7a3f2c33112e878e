"""``esg agent`` end to end: the real agent as a subprocess, the real broker, an OpenWhisk REST stand-in.

The test plays the scheduler: it sends :class:`esg.protocol.DispatchMessage` records to the node's
dispatch topic and reads :class:`ResultMessage` and :class:`Heartbeat` records back.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import uuid

import pytest

from esg.cluster import SliceRef
from esg.model import Config
from tests.agent.agent_harness import AUTH, REPO, AgentProcess, OpenWhiskStandIn, SchedulerSide

pytestmark = pytest.mark.timeout(90)

ECHO = """
import os
def main(args):
    print("echo ran", args.get("i"))
    return {"i": args.get("i"), "cvd": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "cpus": sorted(os.sched_getaffinity(0))}
"""
SLOW = """
import time
def main(args):
    time.sleep(args.get("sleep", 2))
    return {"slept": args.get("sleep", 2)}
"""
COUNT = """
def main(args):
    with open(args["file"], "a") as f:
        f.write("run\\n")
    return {"ok": True}
"""
BROKEN = "import no_such_module_for_esg_tests\ndef main(args):\n    return {}\n"


@pytest.fixture(scope="module")
def openwhisk():
    ow = OpenWhiskStandIn()
    ow.add("echo", ECHO)
    ow.add("slow", SLOW)
    ow.add("count", COUNT)
    ow.add("broken", BROKEN)
    yield ow
    ow.close()


@pytest.fixture(scope="module")
def agent(kafka_bootstrap, openwhisk, tmp_path_factory):
    """One agent (fake A100-40GB, 4 advertised vCPUs) shared by the tests that do not stop it."""
    prefix = f"t{uuid.uuid4().hex[:8]}_"
    node = "node-a"
    proc = AgentProcess(tmp_path_factory.mktemp("agent"), kafka_bootstrap, openwhisk.url, node, prefix,
                        "--fake-gpu", "A100-40GB", "--vcpus", "4", "--memory-mb", "8192")
    sched = SchedulerSide(kafka_bootstrap, prefix)
    try:
        sched.heartbeat(node, timeout=30)
    except AssertionError:
        proc.stop()
        raise AssertionError("agent never sent a heartbeat:\n" + proc.output()) from None
    yield sched, node, proc
    sched.close()
    proc.stop()
    assert AUTH.split(":")[1] not in proc.output(), "the OpenWhisk key reached the agent's log"


def test_heartbeat_describes_the_node(agent):
    sched, node, _ = agent
    hb = sched.heartbeat(node)
    assert (hb.vcpus_total, hb.memory_mb, hb.gpu_model, hb.draining) == (4, 8192, "A100-40GB", False)
    assert 0 <= hb.vcpus_free <= 4
    later = sched.heartbeat(node, lambda h: h.seq > hb.seq)
    assert later.sent_ms >= hb.sent_ms


def test_cpu_batch_returns_results_in_order(agent):
    sched, node, _ = agent
    msg = sched.dispatch(node, "echo", [{"i": i} for i in range(3)], config=Config(3, 2, None))
    res = sched.result(msg.batch_id)
    assert res.node == node and res.error is None
    assert [r.activation_id for r in res.results] == [r.activation_id for r in msg.requests]
    assert [r.status_code for r in res.results] == [0, 0, 0]
    assert [r.result["i"] for r in res.results] == [0, 1, 2]
    first = res.results[0]
    assert first.result["cvd"] == ""                      # CPU only: every GPU hidden
    assert first.init_ms is not None and first.init_ms > 0   # a cold start
    assert all(r.start_ms <= r.end_ms for r in res.results)
    assert res.results[0].end_ms <= res.results[1].start_ms + 1
    assert any("echo ran 1" in line for line in res.results[1].logs)
    # warm now: the heartbeat names the (function, config) and the next batch pays no cold start
    sched.heartbeat(node, lambda h: ("echo", Config(3, 2, None)) in h.warm)
    again = sched.result(sched.dispatch(node, "echo", [{"i": 9}] * 3, config=Config(3, 2, None)).batch_id)
    assert [r.init_ms for r in again.results] == [None] * 3, (again, sched.heartbeats[-1])


def test_gpu_batch_creates_its_slice_busy_then_idle(agent):
    sched, node, _ = agent
    target = SliceRef("3g.20gb", 4)
    mark = len(sched.heartbeats)
    msg = sched.dispatch(node, "slow", [{"sleep": 1.5}], slice_=target, config=Config(1, 1, "3g.20gb"))
    busy = sched.heartbeat(node, lambda h: any(s.ref == target and s.busy for s in h.slices), after=mark)
    uuid_ = next(s.uuid for s in busy.slices if s.ref == target)
    assert uuid_ and uuid_.startswith("MIG-")
    res = sched.result(msg.batch_id)
    assert res.results[0].status_code == 0, res
    mark = len(sched.heartbeats)
    idle = sched.heartbeat(node, lambda h: any(s.ref == target and not s.busy for s in h.slices), after=mark)
    assert next(s.uuid for s in idle.slices if s.ref == target) == uuid_      # idle slices are kept
    # the worker on it sees only that MIG device
    out = sched.result(sched.dispatch(node, "echo", [{"i": 1}], slice_=target,
                                      config=Config(1, 1, "3g.20gb")).batch_id)
    assert out.results[0].result["cvd"] == uuid_


def test_unknown_profile_and_impossible_layout_are_whisk_errors(agent):
    sched, node, _ = agent
    bad = sched.result(sched.dispatch(node, "echo", [{"i": 1}, {"i": 2}], slice_=SliceRef("5g.99gb", 0),
                                      config=Config(2, 1, "5g.99gb")).batch_id)
    assert [r.status_code for r in bad.results] == [3, 3]
    assert "5g.99gb" in bad.results[0].result["error"] and "unknown" in bad.results[0].result["error"]
    wrong_start = sched.result(sched.dispatch(node, "echo", [{"i": 1}], slice_=SliceRef("3g.20gb", 1),
                                              config=Config(1, 1, "3g.20gb")).batch_id)
    assert wrong_start.results[0].status_code == 3
    assert "cannot start at memory slice 1" in wrong_start.results[0].result["error"]
    # the agent keeps answering
    ok = sched.result(sched.dispatch(node, "echo", [{"i": 3}]).batch_id)
    assert ok.results[0].status_code == 0


def test_busy_slice_in_the_way_is_an_error_and_is_not_touched(agent):
    sched, node, _ = agent
    slow = sched.dispatch(node, "slow", [{"sleep": 2}], slice_=SliceRef("1g.5gb", 0),
                          config=Config(1, 1, "1g.5gb"))
    sched.heartbeat(node, lambda h: any(s.ref == SliceRef("1g.5gb", 0) and s.busy for s in h.slices))
    clash = sched.result(sched.dispatch(node, "echo", [{"i": 1}], slice_=SliceRef("2g.10gb", 0),
                                        destroy=(SliceRef("1g.5gb", 0),), config=Config(1, 1, "2g.10gb")).batch_id)
    assert clash.results[0].status_code == 3 and "2g.10gb@0" in clash.results[0].result["error"]
    assert sched.result(slow.batch_id).results[0].status_code == 0


def test_action_that_fails_to_import_and_missing_action_are_developer_errors(agent):
    sched, node, _ = agent
    res = sched.result(sched.dispatch(node, "broken", [{}, {}]).batch_id)
    assert [r.status_code for r in res.results] == [2, 2]
    assert "no_such_module_for_esg_tests" in res.results[0].result["error"]
    missing = sched.result(sched.dispatch(node, "nope", [{}]).batch_id)
    assert missing.results[0].status_code == 2 and "/guest/nope" in missing.results[0].result["error"]


def test_redelivered_batch_is_not_run_twice(agent, tmp_path):
    sched, node, _ = agent
    counter = tmp_path / "runs.txt"
    msg = sched.dispatch(node, "count", [{"file": str(counter)}])
    sched.dispatch(node, "count", [{"file": str(counter)}], batch_id=msg.batch_id)    # same batch again
    assert sched.result(msg.batch_id).results[0].status_code == 0
    follow = sched.dispatch(node, "echo", [{"i": 1}])          # after the duplicate in the topic
    sched.result(follow.batch_id)
    assert sum(r.batch_id == msg.batch_id for r in sched.results) == 1
    assert counter.read_text() == "run\n"


def test_malformed_dispatches_are_answered_or_skipped(agent):
    sched, node, _ = agent
    sched.send(node, b"{not json")
    sched.send(node, b'{"type":"dispatch","batch_id":"bad-1","requests":[{"activation_id":"x1"}]}')
    res = sched.result("bad-1")
    assert res.error and "malformed dispatch" in res.error
    assert [(r.activation_id, r.status_code) for r in res.results] == [("x1", 3)]
    assert sched.result(sched.dispatch(node, "echo", [{"i": 1}]).batch_id).results[0].status_code == 0


def test_too_many_vcpus_is_an_error(agent):
    sched, node, _ = agent
    res = sched.result(sched.dispatch(node, "echo", [{"i": 1}], config=Config(1, 5, None)).batch_id)
    assert res.results[0].status_code == 3 and "5 vCPUs" in res.results[0].result["error"]


def test_concurrent_batches_never_share_a_vcpu(agent):
    sched, node, _ = agent
    a = sched.dispatch(node, "slow", [{"sleep": 1}], config=Config(1, 2, None))
    b = sched.dispatch(node, "slow", [{"sleep": 1}], config=Config(1, 2, None))
    sched.heartbeat(node, lambda h: h.vcpus_free == 0)
    for m in (a, b):
        assert sched.result(m.batch_id).results[0].status_code == 0
    sched.heartbeat(node, lambda h: h.vcpus_free == 4)


def test_sigterm_drains_then_a_restart_resumes_after_the_committed_offset(kafka_bootstrap, openwhisk, tmp_path):
    prefix = f"t{uuid.uuid4().hex[:8]}_"
    node = "node-drain"
    sched = SchedulerSide(kafka_bootstrap, prefix)
    proc = AgentProcess(tmp_path, kafka_bootstrap, openwhisk.url, node, prefix, "--fake-gpu", "A100-40GB")
    try:
        sched.heartbeat(node, timeout=30)
        first = sched.dispatch(node, "echo", [{"i": 1}])
        sched.result(first.batch_id)
        slow = sched.dispatch(node, "slow", [{"sleep": 2}])
        sched.heartbeat(node, lambda h: h.vcpus_free < h.vcpus_total)     # it is running
        proc.proc.send_signal(signal.SIGTERM)
        sched.heartbeat(node, lambda h: h.draining and h.vcpus_free < h.vcpus_total)    # still running
        assert sched.result(slow.batch_id).results[0].status_code == 0
        assert proc.wait(30) == 0, proc.output()
        sched.heartbeat(node, lambda h: h.draining and h.vcpus_free == h.vcpus_total)
        for _ in range(5):                                   # read whatever else arrived
            sched.poll()
        # the periodic heartbeat may already have said "drained" before the final one: either way the
        # node's last word is that it is draining with every vCPU free
        last = [h for h in sched.heartbeats if h.node == node][-1]
        assert last.draining and last.vcpus_free == last.vcpus_total, last
    finally:
        proc.stop()
    # a new incarnation resumes after the committed offsets: nothing it already answered runs again
    proc2 = AgentProcess(tmp_path, kafka_bootstrap, openwhisk.url, node, prefix, "--fake-gpu", "A100-40GB")
    try:
        mark = len(sched.heartbeats)
        sched.heartbeat(node, lambda h: not h.draining, after=mark, timeout=30)
        nxt = sched.dispatch(node, "echo", [{"i": 2}])
        sched.result(nxt.batch_id)
        assert [r.batch_id for r in sched.results] == [first.batch_id, slow.batch_id, nxt.batch_id]
    finally:
        proc2.stop()
        sched.close()


def test_a_killed_agent_runs_the_batch_it_had_taken_after_a_restart(kafka_bootstrap, openwhisk, tmp_path):
    prefix = f"t{uuid.uuid4().hex[:8]}_"
    node = "node-kill"
    sched = SchedulerSide(kafka_bootstrap, prefix)
    counter = tmp_path / "runs.txt"
    proc = AgentProcess(tmp_path, kafka_bootstrap, openwhisk.url, node, prefix, "--fake-gpu", "A30",
                        "--idle-ttl-s", "1")
    try:
        sched.heartbeat(node, timeout=30)
        done = sched.dispatch(node, "count", [{"file": str(counter)}])
        sched.result(done.batch_id)
        sched.heartbeat(node, lambda h: any(f == "count" for f, _ in h.warm))
        sched.heartbeat(node, lambda h: not h.warm, after=len(sched.heartbeats))   # evicted after its TTL
        taken = sched.dispatch(node, "slow", [{"sleep": 3}])
        sched.heartbeat(node, lambda h: h.vcpus_free < h.vcpus_total)     # taken and running
        proc.proc.kill()
        proc.wait(10)
    finally:
        proc.stop()
    proc2 = AgentProcess(tmp_path, kafka_bootstrap, openwhisk.url, node, prefix, "--fake-gpu", "A30")
    try:
        # the uncommitted batch is read again and run; the answered one before it is not
        assert sched.result(taken.batch_id).results[0].status_code == 0
        assert counter.read_text() == "run\n"
        assert [r.batch_id for r in sched.results] == [done.batch_id, taken.batch_id]
    finally:
        proc2.stop()
        sched.close()


def _esg_agent(*args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "esg_cli.main", "agent", "--openwhisk-api", "http://127.0.0.1:9",
                           "--openwhisk-auth", AUTH, *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout)


def test_unknown_fake_gpu_model_exits_2_naming_it(kafka_bootstrap):
    r = _esg_agent("--kafka", kafka_bootstrap, "--fake-gpu", "T4")
    assert r.returncode == 2
    assert "T4" in r.stderr and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_without_fake_gpu_real_nvml_fails_clearly(kafka_bootstrap):
    r = _esg_agent("--kafka", kafka_bootstrap, "--name", "nvml-node", timeout=10)
    if r.returncode == 0 or "NVML" not in r.stderr:
        pytest.skip("this machine has a working NVIDIA driver")
    assert r.returncode == 2 and "--fake-gpu" in r.stderr and "Traceback" not in r.stderr


def test_unreachable_kafka_exits_2_naming_it():
    t0 = time.monotonic()
    r = _esg_agent("--kafka", "127.0.0.1:1", "--fake-gpu", "A30")
    assert r.returncode == 2 and "Kafka" in r.stderr and "127.0.0.1:1" in r.stderr
    assert "Traceback" not in r.stderr and time.monotonic() - t0 < 20
