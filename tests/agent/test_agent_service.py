"""``esg agent`` end to end: the real agent as a subprocess, the real Redis, an OpenWhisk REST stand-in.

The test plays the scheduler: it adds :class:`agent_channel.protocol.DispatchMessage` entries to the node's
dispatch stream and reads :class:`BatchResult` and :class:`Heartbeat` entries back.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import uuid

import pytest

from agent_channel.protocol import InputRef
from esg.cluster import SliceRef
from esg.model import Config
from esg_cli.servers import free_port
from tests.agent.agent_harness import (
    AUTH,
    REPO,
    AgentProcess,
    OpenWhiskStandIn,
    SchedulerSide,
    orphan_worker_dir,
)

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
    return {"ok": True}
"""
BROKEN = "import no_such_module_for_esg_tests\ndef main(args):\n    return {}\n"
BIG = """
def main(args):
    return {"blob": "x" * args["n"]}
"""
STAGE = """
def main(args):
    return {"seen": args, "pid_file": open("/proc/self/stat").read().split()[0]}
"""


@pytest.fixture(scope="module")
def openwhisk():
    ow = OpenWhiskStandIn()
    ow.add("echo", ECHO)
    ow.add("slow", SLOW)
    ow.add("count", COUNT)
    ow.add("broken", BROKEN)
    ow.add("big", BIG)
    ow.add("stage", STAGE)
    yield ow
    ow.close()


@pytest.fixture(scope="module")
def agent(redis_url, openwhisk, tmp_path_factory):
    """One agent (fake A100-40GB, 4 advertised vCPUs) shared by the tests that do not stop it."""
    prefix = f"t{uuid.uuid4().hex[:8]}_"
    node = "node-a"
    proc = AgentProcess(tmp_path_factory.mktemp("agent"), redis_url, openwhisk.url, node, prefix,
                        "--fake-gpu", "A100-40GB", "--vcpus", "4", "--memory-mb", "8192")
    sched = SchedulerSide(redis_url, prefix)
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


def test_an_action_of_another_namespace_is_read_as_the_caller(agent, openwhisk):
    sched, node, _ = agent
    alice = "a11ce000-71f6-4ed5-8c54-816aa4f8c502:AliceSecretKey0123456789abcdef"
    openwhisk.keys[alice] = "alice"
    openwhisk.add("mine", ECHO, namespace="alice")        # the agent's own key (guest's) may not read it
    refused = sched.result(sched.dispatch(node, "mine", [{"i": 1}], namespace="alice").batch_id)
    assert refused.results[0].status_code == 3 and "agent's credentials" in refused.results[0].result["error"]
    ran = sched.result(sched.dispatch(node, "mine", [{"i": 2}], namespace="alice", api_key=alice).batch_id)
    assert ran.results[0].status_code == 0 and ran.results[0].result["i"] == 2
    # a caller whose own key may not read it: the caller's error, never a fault of the invoker
    bob = "b0b00000-71f6-4ed5-8c54-816aa4f8c502:BobSecretKey0123456789abcdef"
    openwhisk.keys[bob] = "bob"
    other = sched.result(sched.dispatch(node, "mine", [{"i": 3}], namespace="alice", api_key=bob).batch_id)
    assert other.results[0].status_code == 2 and "caller's credentials" in other.results[0].result["error"]


def test_action_that_fails_to_import_and_missing_action_are_developer_errors(agent):
    sched, node, _ = agent
    res = sched.result(sched.dispatch(node, "broken", [{}, {}]).batch_id)
    assert [r.status_code for r in res.results] == [2, 2]
    assert "no_such_module_for_esg_tests" in res.results[0].result["error"]
    missing = sched.result(sched.dispatch(node, "nope", [{}]).batch_id)
    assert missing.results[0].status_code == 2 and "/guest/nope" in missing.results[0].result["error"]


def runs(batch_id: str, *agents: AgentProcess) -> int:
    """How many times the agents started running ``batch_id`` (each run logs it: an action in its sandbox
    can leave no trace on the host for a test to count)."""
    return sum(a.output().count(f"batch {batch_id}: ") for a in agents)


def test_redelivered_batch_is_not_run_twice(agent):
    sched, node, proc = agent
    msg = sched.dispatch(node, "count", [{}])
    sched.dispatch(node, "count", [{}], batch_id=msg.batch_id)    # same batch again
    assert sched.result(msg.batch_id).results[0].status_code == 0
    follow = sched.dispatch(node, "echo", [{"i": 1}])          # after the duplicate in the topic
    sched.result(follow.batch_id)
    assert sum(r.batch_id == msg.batch_id for r in sched.results) == 1
    assert runs(msg.batch_id, proc) == 1


def test_malformed_dispatches_are_answered_or_skipped(agent):
    sched, node, _ = agent
    sched.send(node, b"{not json")
    sched.send(node, b'{"type":"dispatch","batch_id":"bad-0","requests":[{"activation_id":"x0"}]}')  # nowhere to answer
    sched.send(node, json.dumps({"type": "dispatch", "batch_id": "bad-1", "reply_to": sched.follow(node),
                                 "requests": [{"activation_id": "x1"}]}).encode())
    res = sched.result("bad-1")
    assert res.error and "malformed dispatch" in res.error
    assert [(r.activation_id, r.status_code) for r in res.results] == [("x1", 3)]
    assert sched.result(sched.dispatch(node, "echo", [{"i": 1}]).batch_id).results[0].status_code == 0
    # all three are retired: none stays pending or in the stream
    assert sched.pending(node) == 0 and sched.r.xlen(sched.keys.dispatch(node)) == 0


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


def test_sigterm_drains_then_a_restart_takes_only_what_is_new(redis_url, openwhisk, tmp_path):
    prefix = f"t{uuid.uuid4().hex[:8]}_"
    node = "node-drain"
    sched = SchedulerSide(redis_url, prefix)
    proc = AgentProcess(tmp_path, redis_url, openwhisk.url, node, prefix, "--fake-gpu", "A100-40GB")
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
    # a new incarnation finds nothing pending: nothing it already answered runs again
    proc2 = AgentProcess(tmp_path, redis_url, openwhisk.url, node, prefix, "--fake-gpu", "A100-40GB")
    try:
        mark = len(sched.heartbeats)
        sched.heartbeat(node, lambda h: not h.draining, after=mark, timeout=30)
        nxt = sched.dispatch(node, "echo", [{"i": 2}])
        sched.result(nxt.batch_id)
        assert [r.batch_id for r in sched.results] == [first.batch_id, slow.batch_id, nxt.batch_id]
    finally:
        proc2.stop()
        sched.close()


def test_a_killed_agent_answers_the_batch_it_had_started_with_an_error_after_a_restart(redis_url, openwhisk,
                                                                                       tmp_path):
    """At most once: a batch the agent had started when it was killed may have run part way; the restarted
    agent finds it in its pending list, claimed, and answers it with an error instead of running it again."""
    prefix = f"t{uuid.uuid4().hex[:8]}_"
    node = "node-kill"
    sched = SchedulerSide(redis_url, prefix)
    proc = AgentProcess(tmp_path, redis_url, openwhisk.url, node, prefix, "--fake-gpu", "A30",
                        "--idle-ttl-s", "1")
    try:
        sched.heartbeat(node, timeout=30)
        done = sched.dispatch(node, "count", [{}])
        sched.result(done.batch_id)
        sched.heartbeat(node, lambda h: any(f == "count" for f, _ in h.warm))
        sched.heartbeat(node, lambda h: not h.warm, after=len(sched.heartbeats))   # evicted after its TTL
        taken = sched.dispatch(node, "slow", [{"sleep": 3}])
        sched.heartbeat(node, lambda h: h.vcpus_free < h.vcpus_total)     # taken and running
        proc.kill()
    finally:
        proc.stop()
    orphan = orphan_worker_dir()     # as a kill between making a worker's directory and starting it leaves it
    proc2 = AgentProcess(tmp_path, redis_url, openwhisk.url, node, prefix, "--fake-gpu", "A30")
    try:
        sched.heartbeat(node, timeout=30, after=len(sched.heartbeats))
        assert not orphan.exists()                   # the new incarnation's start swept it
        # the batch it had started (pending in the group) is answered, not run again; the answered one is not
        r = sched.result(taken.batch_id).results[0]
        assert r.status_code == 2 and "is not run again" in r.result["error"]
        assert runs(done.batch_id, proc, proc2) == 1 and runs(taken.batch_id, proc, proc2) == 1
        assert "was started before this agent restarted" in proc2.output()
        assert [r.batch_id for r in sched.results] == [done.batch_id, taken.batch_id]
    finally:
        proc2.stop()
        sched.close()


def test_a_killed_agent_runs_each_unstarted_batch_once_after_a_restart(redis_url, openwhisk, tmp_path):
    """kill -9 with batches running and more waiting: after the restart each waiting one runs once, and the
    running ones are answered with an error (they may have run part way: at most once), none run twice."""
    prefix = f"t{uuid.uuid4().hex[:8]}_"
    node = "node-pending"
    sched = SchedulerSide(redis_url, prefix)
    proc = AgentProcess(tmp_path, redis_url, openwhisk.url, node, prefix, "--fake-gpu", "A30",
                        "--max-batches", "2")
    try:
        sched.heartbeat(node, timeout=30)
        slow = [sched.dispatch(node, "slow", [{"sleep": 3}]) for _ in range(2)]
        sched.wait_for(lambda: sched.pending(node) == 2, 20, "two batches taken")
        sched.wait_for(lambda: all(sched.r.get(sched.keys.claim(node, m.batch_id)) for m in slow), 20,
                       "both claimed: started")
        counts = [sched.dispatch(node, "count", [{}]) for _ in range(3)]   # wait in the stream
        proc.kill()
    finally:
        proc.stop()
    assert sched.pending(node) == 2 and not sched.results
    proc2 = AgentProcess(tmp_path, redis_url, openwhisk.url, node, prefix, "--fake-gpu", "A30")
    try:
        for m in slow:
            assert sched.result(m.batch_id, timeout=40).results[0].status_code == 2
        for m in counts:
            assert sched.result(m.batch_id, timeout=40).results[0].status_code == 0
        sched.wait_for(lambda: sched.pending(node) == 0, 10, "nothing pending")
        assert [runs(m.batch_id, proc, proc2) for m in counts] == [1] * 3
        assert sorted(r.batch_id for r in sched.results) == sorted(m.batch_id for m in slow + counts)
        assert sched.r.xlen(sched.keys.dispatch(node)) == 0          # answered dispatches are deleted
    finally:
        proc2.stop()
        sched.close()


def test_outputs_stay_on_the_node_and_in_the_store_for_successors(agent):
    sched, node, proc = agent
    first = sched.dispatch(node, "stage", [{"i": 1}, {"i": 2}], return_output=False)
    res = sched.result(first.batch_id)
    assert [r.status_code for r in res.results] == [0, 0]
    assert all(r.result is None and r.output_key and r.output_bytes > 0 for r in res.results)
    assert (res.function, res.config, res.run_ms is not None) == ("stage", first.config, True)
    stored = json.loads(sched.r.get(res.results[0].output_key))
    assert stored["seen"] == {"i": 1}
    assert sched.r.ttl(res.results[0].output_key) > 0
    # a successor on this node reads this node's copy; one input fans in from "another node" (the store)
    elsewhere = sched.keys.data("node-z", "a0", "other")
    sched.r.set(elsewhere, json.dumps({"far": True}), ex=60)
    refs = [[InputRef("stage", res.results[0].output_key, node, res.results[0].output_bytes),
             InputRef("other", elsewhere, "node-z", 12)],
            [InputRef("stage", res.results[1].output_key, node, res.results[1].output_bytes)]]
    nxt = sched.result(sched.dispatch(node, "echo", [None, None], inputs=refs).batch_id)
    assert [r.status_code for r in nxt.results] == [0, 0], nxt
    assert f"batch {nxt.batch_id}: 2 input(s) from this node, 1 from the store" in proc.output()
    assert nxt.results[0].result["i"] is None and nxt.results[1].result["i"] is None
    # the echo action saw the composed inputs: fan-in keyed by name, one predecessor as it is
    two = sched.result(sched.dispatch(node, "stage", [None, None], inputs=refs).batch_id)
    assert two.results[0].result["seen"] == {"stage": stored, "other": {"far": True}}
    assert two.results[1].result["seen"]["seen"] == {"i": 2}


def test_missing_input_is_a_whisk_error_naming_it(agent):
    sched, node, _ = agent
    gone = [[InputRef("pre", f"esg:{sched.keys.prefix}:data:nothing-here", "node-z", 10)], []]
    res = sched.result(sched.dispatch(node, "echo", [None, {"i": 5}], inputs=gone).batch_id)
    codes = {r.activation_id: r.status_code for r in res.results}
    assert sorted(codes.values()) == [0, 3]
    bad = next(r for r in res.results if r.status_code == 3)
    assert "pre" in bad.result["error"] and "data store" in bad.result["error"]


def test_oversize_result_is_a_developer_error_naming_the_limit(agent):
    sched, node, _ = agent
    res = sched.result(sched.dispatch(node, "big", [{"n": 1_100_000}, {"n": 10}]).batch_id)
    assert [r.status_code for r in res.results] == [2, 0]
    assert "exceeded the allowed length" in res.results[0].result["error"]
    assert "1048576 bytes" in res.results[0].result["error"]
    stored = sched.result(sched.dispatch(node, "big", [{"n": 1_100_000}], return_output=False).batch_id)
    assert stored.results[0].status_code == 0 and stored.results[0].output_bytes > 1_100_000


def _esg_agent(*args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "esg_cli.main", "agent", "--openwhisk-api", "http://127.0.0.1:9",
                           "--openwhisk-auth", AUTH, *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout)


def test_unknown_fake_gpu_model_exits_2_naming_it(redis_url):
    r = _esg_agent("--redis", redis_url, "--fake-gpu", "T4")
    assert r.returncode == 2
    assert "T4" in r.stderr and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_without_fake_gpu_real_nvml_fails_clearly(redis_url):
    r = _esg_agent("--redis", redis_url, "--name", "nvml-node", timeout=10)
    if r.returncode == 0 or "NVML" not in r.stderr:
        pytest.skip("this machine has a working NVIDIA driver")
    assert r.returncode == 2 and "--fake-gpu" in r.stderr and "Traceback" not in r.stderr


def test_unreachable_redis_exits_2_naming_it_without_password():
    t0 = time.monotonic()
    port = free_port()
    r = _esg_agent("--redis", f"redis://:hunter2secret@127.0.0.1:{port}/0", "--kafka", "127.0.0.1:1",
                   "--fake-gpu", "A30")
    assert r.returncode == 2 and "Redis" in r.stderr and f"127.0.0.1:{port}" in r.stderr
    assert "hunter2secret" not in r.stderr and "Kafka" not in r.stderr    # --kafka is accepted, unused
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert time.monotonic() - t0 < 20


def test_no_redis_is_named(monkeypatch):
    monkeypatch.delenv("ESG_REDIS", raising=False)
    r = _esg_agent("--fake-gpu", "A30")
    assert r.returncode == 2 and "ESG_REDIS" in r.stderr


def test_password_protected_redis_works(redis_auth, openwhisk, tmp_path):
    url, password = redis_auth
    prefix = f"t{uuid.uuid4().hex[:8]}_"
    sched = SchedulerSide(url, prefix)
    proc = AgentProcess(tmp_path, url, openwhisk.url, "node-auth", prefix, "--fake-gpu", "A30")
    try:
        sched.heartbeat("node-auth", timeout=30)
        assert sched.result(sched.dispatch("node-auth", "echo", [{"i": 7}]).batch_id).results[0].result["i"] == 7
    finally:
        proc.stop()
        sched.close()
    assert password not in proc.output()
