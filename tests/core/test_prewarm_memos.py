"""The per-node figures ESG's pool rule and warm-kind look-ups remember on ``NodeState.memo``
(:mod:`esg.prewarm`) against a fresh scan of the node, before and after the snapshot changes it."""

from __future__ import annotations

from esg.cluster import (
    IDLE_BY_KIND,
    IDLE_COMPUTE,
    INSTANCES,
    ClusterSnapshot,
    Fit,
    NodeState,
    Slice,
    SliceRef,
)
from esg.model import Config
from esg.prewarm import idle_by_function, idle_by_kind, idle_of_kind, instances_by_profile, stocked_profiles

ONE, TWO, THREE = SliceRef("1g.5gb", 0), SliceRef("1g.5gb", 1), SliceRef("3g.20gb", 4)


def _node() -> NodeState:
    return NodeState("n0", 16, 16, "A100-40GB", [Slice(ONE), Slice(TWO, busy=True), Slice(THREE)],
                     idle_workers={("a", ONE): 1, ("b", TWO): 2, ("a", THREE): 1, ("c", None): 3, ("d", ONE): 0})


def _scan(node: NodeState) -> dict:
    """What the memos must say, counted from scratch."""
    idle = [s.ref for s in node.slices if not s.busy]
    kinds: dict[str, dict[str | None, int]] = {}
    for (f, ref), n in node.idle_workers.items():
        if n > 0:
            kind = None if ref is None else ref.profile
            kinds.setdefault(f, {})
            kinds[f][kind] = kinds[f].get(kind, 0) + n
    per_profile: dict[str, int] = {}
    for s in node.slices:
        per_profile[s.ref.profile] = per_profile.get(s.ref.profile, 0) + 1
    by_function = {p: {f: sum(1 for (g, r), n in node.idle_workers.items() if g == f and n > 0 and r in idle
                                and r.profile == p)
                       for f in {g for (g, r), n in node.idle_workers.items()
                                 if n > 0 and r in idle and r is not None and r.profile == p}}
                   for p in ("1g.5gb", "3g.20gb")}
    stocked = {r.profile for (_, r), n in node.idle_workers.items() if n > 0 and r in idle}
    return {"kinds": kinds, "instances": per_profile, "by_function": by_function, "stocked": stocked}


def _memos(node: NodeState) -> dict:
    return {"kinds": idle_by_kind(node), "instances": instances_by_profile(node),
            "by_function": {p: idle_by_function(node, p) for p in ("1g.5gb", "3g.20gb")},
            "stocked": set(stocked_profiles(node))}


def test_the_memos_match_a_scan_of_the_node():
    node = _node()
    want = _scan(node)
    assert want["kinds"] == {"a": {"1g.5gb": 1, "3g.20gb": 1}, "b": {"1g.5gb": 2}, "c": {None: 3}}
    assert want["stocked"] == {"1g.5gb", "3g.20gb"}
    assert want["by_function"] == {"1g.5gb": {"a": 1}, "3g.20gb": {"a": 1}}
    assert _memos(node) == want
    assert _memos(node) == want  # remembered: the same answers again
    assert list(idle_by_kind(node)["a"]) == ["1g.5gb", "3g.20gb"]  # kinds in the order of a scan


def test_the_memos_follow_the_snapshots_changes():
    snap = ClusterSnapshot({"n0": _node()}, tracks_workers=True)
    node = snap.nodes["n0"]
    _memos(node)
    assert idle_of_kind(snap, "a", "1g.5gb") == 1
    # a batch of "a" takes its idle worker on ONE: ONE is busy, no idle worker of "a" is left on it
    snap.reserve(Config(1, 1, "1g.5gb"), Fit("n0", ONE, warm_worker=("a", ONE)))
    assert _memos(node) == _scan(node)
    assert idle_of_kind(snap, "a", "1g.5gb") == 0
    assert "1g.5gb" not in stocked_profiles(node)  # TWO is busy, ONE now too
    # the batch ends: the worker waits idle on ONE again
    snap.finish("a", Config(1, 1, "1g.5gb"), Fit("n0", ONE, warm_worker=("a", ONE)))
    assert _memos(node) == _scan(node)
    assert idle_of_kind(snap, "a", "1g.5gb") == 1
    assert stocked_profiles(node) == {"1g.5gb", "3g.20gb"}


def test_a_change_of_one_count_carries_the_idle_counts_over_even_to_or_from_zero():
    # "a" has workers on THREE and on ONE; ONE's count goes 2 -> 1 -> 0 -> 1 -> 2, "b"'s 1 -> 0 -> 1
    node = NodeState("n0", 16, 16, "A100-40GB", [Slice(ONE), Slice(TWO), Slice(THREE)],
                     idle_workers={("a", ONE): 2, ("a", THREE): 1, ("b", TWO): 1})
    snap = ClusterSnapshot({"n0": node}, tracks_workers=True)
    first = idle_by_kind(node)
    took = Fit("n0", ONE, warm_worker=("a", ONE))
    took_b = Fit("n0", TWO, warm_worker=("b", TWO))
    steps = [lambda: snap.reserve(Config(1, 1, "1g.5gb"), took),   # 2 -> 1
             lambda: snap.reserve(Config(1, 1, "1g.5gb"), took),   # 1 -> 0: "a" has no 1g.5gb worker
             lambda: snap.reserve(Config(1, 1, "1g.5gb"), took_b),  # "b" has no worker at all
             lambda: snap.finish("a", Config(1, 1, "1g.5gb"), took),  # 0 -> 1
             lambda: snap.finish("b", Config(1, 1, "1g.5gb"), took_b),  # "b" back
             lambda: snap.finish("a", Config(1, 1, "1g.5gb"), took)]  # 1 -> 2
    for step in steps:
        step()
        assert IDLE_BY_KIND in node.memo  # carried over the change, not left to a rescan
        assert idle_by_kind(node) == _scan(node)["kinds"]
    assert first == {"a": {"1g.5gb": 2, "3g.20gb": 1}, "b": {"1g.5gb": 1}}  # the old dict is left as it was
    assert idle_by_kind(node) == {"a": {"1g.5gb": 2, "3g.20gb": 1}, "b": {"1g.5gb": 1}}


def test_instance_counts_and_idle_compute_are_kept_over_busy_and_idle_and_follow_a_mig_change():
    snap = ClusterSnapshot({"n0": _node()}, tracks_workers=True)
    node = snap.nodes["n0"]
    new = SliceRef("2g.10gb", 2)  # (memory slices 2-3: free next to ONE and TWO)
    busy_only = [lambda: snap.reserve(Config(1, 1, "1g.5gb"), Fit("n0", ONE, warm_worker=("a", ONE))),
                 lambda: snap.finish("a", Config(1, 1, "1g.5gb"), Fit("n0", ONE, warm_worker=("a", ONE)))]
    for change in busy_only:
        before = instances_by_profile(node)
        snap.idle_compute("n0")
        change()
        assert node.memo.get(INSTANCES) is before  # carried over: the same instances
        assert IDLE_COMPUTE in node.memo  # carried over, moved by the instance taken or freed
        assert _memos(node) == _scan(node)
        assert snap.idle_compute("n0") == node.idle_compute_slices()
    mig_changes = [lambda: snap.reserve(Config(1, 1, "2g.10gb"), Fit("n0", new, create=True)),
                   lambda: snap.finish("b", Config(1, 1, "2g.10gb"), Fit("n0", new, create=True)),
                   # the idle 2g.10gb instance (with b's worker on it) destroyed for a 1g.5gb one
                   lambda: snap.reserve(Config(1, 1, "1g.5gb"), Fit("n0", SliceRef("1g.5gb", 2), create=True,
                                                                    destroy=(new,)))]
    for change in mig_changes:
        instances_by_profile(node)
        snap.idle_compute("n0")
        change()
        assert _memos(node) == _scan(node)
        assert snap.idle_compute("n0") == node.idle_compute_slices()
    assert instances_by_profile(node) == {"1g.5gb": 3, "3g.20gb": 1}
    assert ("b", new) not in node.idle_workers
    # a finish on an instance the node's state did not show yet (its report lagged) counts it
    instances_by_profile(node)
    snap.idle_compute("n0")
    snap.finish("c", Config(1, 1, "1g.5gb"), Fit("n0", SliceRef("1g.5gb", 3)))
    assert instances_by_profile(node) == {"1g.5gb": 4, "3g.20gb": 1}
    assert _memos(node) == _scan(node)
    assert snap.idle_compute("n0") == node.idle_compute_slices() == 7 - 2  # TWO and the 1g.5gb made at 2 busy


def test_the_instance_epoch_moves_when_a_nodes_instance_counts_may_have():
    """``ClusterSnapshot.instances_epoch`` moves at a change after which a node's instance counts memo is
    absent or another object (a state put with its own counts), and stays over a change that keeps the
    counts (an instance made busy): a sum of the nodes' counts is kept while it stays."""
    snap = ClusterSnapshot.of([_node()])
    instances_by_profile(snap.nodes["n0"])
    snap.put(snap.nodes["n0"], memo_kept=True)  # the counts seen at a change first
    epoch = snap.instances_epoch
    snap.reserve(Config(2, 1, "1g.5gb"), Fit("n0", ONE, False))  # an idle instance made busy
    assert snap.instances_epoch == epoch and instances_by_profile(snap.nodes["n0"]) == _scan(snap.nodes["n0"])["instances"]
    snap.reserve(Config(2, 1, "1g.5gb"), Fit("n0", SliceRef("1g.5gb", 2), True))  # an instance created
    assert snap.instances_epoch > epoch
    epoch = snap.instances_epoch
    other = NodeState("n0", 16, 16, "A100-40GB", [Slice(THREE)])
    instances_by_profile(other)  # counted on the state before it is put, memo kept
    snap.put(other, memo_kept=True)
    assert snap.instances_epoch > epoch
