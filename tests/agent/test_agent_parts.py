"""The agent service's small parts: vCPU allocation, local outputs and their limits, slice reservation."""

from __future__ import annotations

import threading

import pytest

from agent_channel.keys import Keys
from agent_channel.protocol import ActionRef, DispatchMessage, RunRequest, RunResult
from esg.cluster import SliceRef
from esg.model import Config
from invoker_agent import data
from invoker_agent.data import DataPlane, LocalOutputs
from invoker_agent.node import NodeAgent
from invoker_agent.service import RecentBatches, salvage
from invoker_agent.slices import SliceError, SliceManager
from invoker_agent.vcpus import VcpuAllocator, VcpuError

pytestmark = pytest.mark.timeout(30)


def test_vcpus_are_never_shared_and_map_round_robin_onto_host_cpus():
    a = VcpuAllocator(6, host_cpus=[0, 1])
    x = a.try_acquire(4)
    assert x == (0, 1, 2, 3) and a.free == 2
    assert a.try_acquire(3) is None
    y = a.try_acquire(2)
    assert set(x).isdisjoint(y) and a.free == 0
    assert a.host_ids(x) == (0, 1) and a.host_ids((4,)) == (0,)
    a.release(x)
    with pytest.raises(VcpuError, match="released twice"):
        a.release(x)
    with pytest.raises(VcpuError, match="7 vCPUs; this node has 6"):
        a.try_acquire(7)


def test_acquire_waits_for_a_release():
    a = VcpuAllocator(2, host_cpus=[0])
    held = a.try_acquire(2)
    got = []
    t = threading.Thread(target=lambda: got.append(a.acquire(1, timeout_s=5)))
    t.start()
    assert a.acquire(1, timeout_s=0.05) is None
    a.release(held)
    t.join(5)
    assert got and len(got[0]) == 1


def test_local_outputs_are_bounded_by_bytes_and_expire():
    now = [0.0]
    lo = LocalOutputs(100, clock=lambda: now[0])
    lo.put("a", {"a": 1}, 40, ttl_s=10)
    lo.put("b", {"b": 1}, 40, ttl_s=10)
    assert lo.get("a") == (True, {"a": 1})          # a is now the most recently used
    lo.put("c", {"c": 1}, 40, ttl_s=10)              # over 100 bytes: b (least recently used) goes
    assert lo.get("b") == (False, None) and lo.get("a")[0] and lo.get("c")[0] and lo.bytes == 80
    lo.put("huge", {}, 101, ttl_s=10)                 # larger than the whole budget: not kept
    assert lo.get("huge") == (False, None) and lo.bytes == 80
    now[0] = 11.0
    assert lo.get("a") == (False, None) and lo.bytes == 40
    assert not LocalOutputs(0).get("x")[0]


def _dispatch(return_output: bool) -> DispatchMessage:
    return DispatchMessage("b1", "n0", "app", "pre", ActionRef("guest", "pre"), Config(2, 1, None), None, (),
                           (RunRequest("a" * 32, "t", {}, 0, "guest"), RunRequest("b" * 32, "t", {}, 0, "guest")),
                           "esg:0:results", return_output, 30)


def test_outputs_are_stored_and_referenced_or_inline_within_the_limits(monkeypatch):
    plane = DataPlane(None, Keys("p_"), LocalOutputs(1 << 20))
    ok = RunResult("a" * 32, 0, {"v": "x" * 50}, 1, 2)
    failed = RunResult("b" * 32, 1, {"error": "no"}, 1, 2)
    results, writes = plane.outputs(_dispatch(False), [ok, failed])
    key = f"esg:p_:node:n0:data:{'a' * 32}:pre"        # in the producing node's own key space
    assert [w.key for w in writes] == [key] and writes[0].ttl_s == 30
    assert results[0].result is None and results[0].output_key == key
    assert results[0].output_bytes == len(writes[0].blob) == len('{"v":"' + "x" * 50 + '"}')
    assert results[1] == failed                       # errors always come back inline
    assert plane.local.get(key) == (True, {"v": "x" * 50})
    inline, none = plane.outputs(_dispatch(True), [ok])
    assert inline == [ok] and none == []
    # the runtime's reply is stored as it came (not encoded again), and its length is the size
    raw = b'{"v": "' + b"x" * 50 + b'"}'
    results, writes = plane.outputs(_dispatch(False), [ok], {"a" * 32: raw})
    assert writes[0].blob is raw and results[0].output_bytes == len(raw)
    monkeypatch.setattr(data, "MAX_DATA_BYTES", 20)
    monkeypatch.setattr(data, "MAX_RESULT_BYTES", 20)
    too_big, none = plane.outputs(_dispatch(False), [ok])
    assert none == [] and too_big[0].status_code == 2 and "limit of 20 bytes" in too_big[0].result["error"]
    too_big, _ = plane.outputs(_dispatch(True), [ok])
    assert too_big[0].status_code == 2
    assert too_big[0].result["error"].endswith("exceeded the allowed length: 58 > 20 bytes.")


def test_recent_batches_is_bounded():
    r = RecentBatches(size=2)
    assert r.add("a") and r.add("b") and not r.add("a")
    assert r.add("c") and "a" not in r and "c" in r


def test_salvage_reads_what_it_can():
    assert salvage(b"{nope") == (None, [], None)
    assert salvage(b'{"batch_id":"b","requests":[{"activation_id":"x"},{"y":1}]}') == ("b", ["x"], None)
    assert salvage(b'{"batch_id":3,"reply_to":"r"}') == (None, [], "r")


def test_slice_manager_creates_reserves_and_never_destroys_a_reserved_slice():
    node = NodeAgent.create("n", vcpus=2, fake_gpu="A100-40GB")
    try:
        sm = SliceManager(node)
        u = sm.ensure(SliceRef("1g.5gb", 0))
        assert u.startswith("MIG-") and u in sm.busy_uuids()
        with pytest.raises(SliceError, match="2g.10gb@0"):
            sm.ensure(SliceRef("2g.10gb", 0), destroy=(SliceRef("1g.5gb", 0),))
        assert [(s.ref, s.busy) for s in sm.status()] == [(SliceRef("1g.5gb", 0), True)]
        sm.release(u)
        v = sm.ensure(SliceRef("2g.10gb", 0), destroy=(SliceRef("1g.5gb", 0),))
        assert [(s.ref, s.uuid) for s in sm.status()] == [(SliceRef("2g.10gb", 0), v)]
        sm.release(v)
        # an idle slice in the target's way goes even when the dispatch did not list it
        w = sm.ensure(SliceRef("3g.20gb", 0))
        assert [s.ref for s in sm.status()] == [SliceRef("3g.20gb", 0)]
        sm.release(w)
        with pytest.raises(SliceError, match="unknown"):
            sm.ensure(SliceRef("9g.1gb", 0))
    finally:
        node.close()


def test_a_batch_on_a_slice_that_exists_reads_no_layout_and_a_change_made_elsewhere_is_seen_once_stale(monkeypatch):
    from invoker_agent import slices
    node = NodeAgent.create("n", vcpus=2, fake_gpu="A100-40GB")
    reads = []
    real_read = node.reconciler.read_state
    node.reconciler.read_state = lambda gpu: reads.append(gpu) or real_read(gpu)
    try:
        sm = SliceManager(node)
        u, changes = sm.carve(SliceRef("1g.5gb", 0))
        assert changes == 1 and reads                # read, created, read back (kept)
        sm.release(u)
        n = len(reads)
        for _ in range(3):                           # a settled layout: no NVML read per batch
            v, changes = sm.carve(SliceRef("1g.5gb", 0))
            assert (v, changes) == (u, 0) and v in sm.busy_uuids()
            sm.release(v)
        assert len(reads) == n
        # a slice the dispatch destroys is never taken from the copy: read, changed, read again
        w, changes = sm.carve(SliceRef("2g.10gb", 2), destroy=(SliceRef("1g.5gb", 0),))
        assert changes == 2 and len(reads) > n
        assert [s.ref for s in sm.status()] == [SliceRef("2g.10gb", 2)]
        sm.release(w)
        # destroyed outside the agent: seen once the copy is older than STATE_FRESH_S
        gi = next(g for g in node.backend.gpu_instances(sm.gpu) if g.start == 2)
        for ci in node.backend.compute_instances(sm.gpu):
            if ci.gi_id == gi.gi_id:
                node.backend.destroy_compute_instance(sm.gpu, gi.gi_id, ci.ci_id)
        node.backend.destroy_gpu_instance(sm.gpu, gi.gi_id)
        monkeypatch.setattr(slices, "STATE_FRESH_S", 0.0)
        x, changes = sm.carve(SliceRef("2g.10gb", 2))
        assert changes == 1 and x != w
        assert [s.ref for s in sm.status()] == [SliceRef("2g.10gb", 2)]
        sm.release(x)
    finally:
        node.close()
