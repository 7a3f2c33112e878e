"""The agent service's small parts: vCPU allocation, offset commits, slice reservation."""

from __future__ import annotations

import threading

import pytest

from esg.cluster import SliceRef
from invoker_agent.node import NodeAgent
from invoker_agent.offsets import OffsetTracker, RecentBatches
from invoker_agent.service import salvage
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


def test_offsets_commit_only_past_finished_prefix():
    t = OffsetTracker()
    for o in (5, 6, 7):
        t.taken("p", o)
    t.finished("p", 6)
    assert t.to_commit() == {"p": 5}       # 5 still running: nothing past it may be committed
    t.committed({"p": 5})
    assert t.to_commit() == {}
    t.finished("p", 5)
    assert t.to_commit() == {"p": 7}
    t.finished("p", 7)
    assert t.to_commit() == {"p": 8}
    assert t.pending() == 0


def test_recent_batches_is_bounded():
    r = RecentBatches(size=2)
    assert r.add("a") and r.add("b") and not r.add("a")
    assert r.add("c") and "a" not in r and "c" in r


def test_salvage_reads_what_it_can():
    assert salvage(b"{nope") == (None, [])
    assert salvage(b'{"batch_id":"b","requests":[{"activation_id":"x"},{"y":1}]}') == ("b", ["x"])


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
