"""The cluster index (:mod:`esg.index`) against fresh scans of the nodes' states: the per-node facts
ESG's pool rule and warm-kind look-ups ask for, what a change carries over, the generations, and every
answer after random sequences of changes against an index built from scratch."""

from __future__ import annotations

import copy

from hypothesis import given, settings
from hypothesis import strategies as st

from esg.cluster import ClusterSnapshot, Fit, NodeState, Slice, SliceRef
from esg.model import Config
from esg.prewarm import idle_of_kind

ONE, TWO, THREE = SliceRef("1g.5gb", 0), SliceRef("1g.5gb", 1), SliceRef("3g.20gb", 4)


def _node() -> NodeState:
    return NodeState("n0", 16, 16, "A100-40GB", [Slice(ONE), Slice(TWO, busy=True), Slice(THREE)],
                     idle_workers={("a", ONE): 1, ("b", TWO): 2, ("a", THREE): 1, ("c", None): 3, ("d", ONE): 0})


def _scan(node: NodeState) -> dict:
    """What the index must say, counted from scratch."""
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


def _memos(snap: ClusterSnapshot, name: str = "n0") -> dict:
    index = snap.index
    return {"kinds": index.idle_by_kind(name), "instances": index.instances(name),
            "by_function": {p: index.idle_by_function(name, p) for p in ("1g.5gb", "3g.20gb")},
            "stocked": set(index.stocked_profiles(name))}


def test_the_index_matches_a_scan_of_the_node():
    snap = ClusterSnapshot.of([_node()])
    node = snap.nodes["n0"]
    want = _scan(node)
    assert want["kinds"] == {"a": {"1g.5gb": 1, "3g.20gb": 1}, "b": {"1g.5gb": 2}, "c": {None: 3}}
    assert want["stocked"] == {"1g.5gb", "3g.20gb"}
    assert want["by_function"] == {"1g.5gb": {"a": 1}, "3g.20gb": {"a": 1}}
    assert _memos(snap) == want
    assert _memos(snap) == want  # remembered: the same answers again
    assert list(snap.index.idle_by_kind("n0")["a"]) == ["1g.5gb", "3g.20gb"]  # kinds in the order of a scan


def test_the_index_follows_the_snapshots_changes():
    snap = ClusterSnapshot({"n0": _node()}, tracks_workers=True)
    node = snap.nodes["n0"]
    _memos(snap)
    assert idle_of_kind(snap, "a", "1g.5gb") == 1
    # a batch of "a" takes its idle worker on ONE: ONE is busy, no idle worker of "a" is left on it
    snap.reserve(Config(1, 1, "1g.5gb"), Fit("n0", ONE, warm_worker=("a", ONE)))
    assert _memos(snap) == _scan(node)
    assert idle_of_kind(snap, "a", "1g.5gb") == 0
    assert "1g.5gb" not in snap.index.stocked_profiles("n0")  # TWO is busy, ONE now too
    # the batch ends: the worker waits idle on ONE again
    snap.finish("a", Config(1, 1, "1g.5gb"), Fit("n0", ONE, warm_worker=("a", ONE)))
    assert _memos(snap) == _scan(node)
    assert idle_of_kind(snap, "a", "1g.5gb") == 1
    assert snap.index.stocked_profiles("n0") == {"1g.5gb", "3g.20gb"}


def test_a_change_of_one_count_carries_the_idle_counts_over_even_to_or_from_zero():
    # "a" has workers on THREE and on ONE; ONE's count goes 2 -> 1 -> 0 -> 1 -> 2, "b"'s 1 -> 0 -> 1
    node = NodeState("n0", 16, 16, "A100-40GB", [Slice(ONE), Slice(TWO), Slice(THREE)],
                     idle_workers={("a", ONE): 2, ("a", THREE): 1, ("b", TWO): 1})
    snap = ClusterSnapshot({"n0": node}, tracks_workers=True)
    first = snap.index.idle_by_kind("n0")
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
        assert snap.index.facts("n0").idle_by_kind is not None  # carried over the change, not left to a rescan
        assert snap.index.idle_by_kind("n0") == _scan(node)["kinds"]
    assert first == {"a": {"1g.5gb": 2, "3g.20gb": 1}, "b": {"1g.5gb": 1}}  # the old dict is left as it was
    assert snap.index.idle_by_kind("n0") == {"a": {"1g.5gb": 2, "3g.20gb": 1}, "b": {"1g.5gb": 1}}


def test_instance_counts_and_idle_compute_are_kept_over_busy_and_idle_and_follow_a_mig_change():
    snap = ClusterSnapshot({"n0": _node()}, tracks_workers=True)
    node = snap.nodes["n0"]
    new = SliceRef("2g.10gb", 2)  # (memory slices 2-3: free next to ONE and TWO)
    busy_only = [lambda: snap.reserve(Config(1, 1, "1g.5gb"), Fit("n0", ONE, warm_worker=("a", ONE))),
                 lambda: snap.finish("a", Config(1, 1, "1g.5gb"), Fit("n0", ONE, warm_worker=("a", ONE)))]
    for change in busy_only:
        before = snap.index.instances("n0")
        snap.idle_compute("n0")
        change()
        assert snap.index.facts("n0").instances is before  # carried over: the same instances
        assert snap.index.facts("n0").idle_compute >= 0  # carried over, moved by the instance taken or freed
        assert _memos(snap) == _scan(node)
        assert snap.idle_compute("n0") == node.idle_compute_slices()
    mig_changes = [lambda: snap.reserve(Config(1, 1, "2g.10gb"), Fit("n0", new, create=True)),
                   lambda: snap.finish("b", Config(1, 1, "2g.10gb"), Fit("n0", new, create=True)),
                   # the idle 2g.10gb instance (with b's worker on it) destroyed for a 1g.5gb one
                   lambda: snap.reserve(Config(1, 1, "1g.5gb"), Fit("n0", SliceRef("1g.5gb", 2), create=True,
                                                                    destroy=(new,)))]
    for change in mig_changes:
        snap.index.instances("n0")
        snap.idle_compute("n0")
        change()
        assert _memos(snap) == _scan(node)
        assert snap.idle_compute("n0") == node.idle_compute_slices()
    assert snap.index.instances("n0") == {"1g.5gb": 3, "3g.20gb": 1}
    assert ("b", new) not in node.idle_workers
    # a finish on an instance the node's state did not show yet (its report lagged) counts it
    snap.index.instances("n0")
    snap.idle_compute("n0")
    snap.finish("c", Config(1, 1, "1g.5gb"), Fit("n0", SliceRef("1g.5gb", 3)))
    assert snap.index.instances("n0") == {"1g.5gb": 4, "3g.20gb": 1}
    assert _memos(snap) == _scan(node)
    assert snap.idle_compute("n0") == node.idle_compute_slices() == 7 - 2  # TWO and the 1g.5gb made at 2 busy


def test_the_instance_generation_moves_when_a_nodes_instance_counts_may_have():
    """``ClusterIndex.instances_generation`` moves at a change after which a node's instance counts are
    not known to be the same (a state put, an instance created) and stays over one that keeps them (an
    instance made busy): the cluster's sum is kept while it stays."""
    snap = ClusterSnapshot.of([_node()])
    total = snap.index.instances_total()
    generation = snap.index.instances_generation
    snap.reserve(Config(2, 1, "1g.5gb"), Fit("n0", ONE, False))  # an idle instance made busy
    assert snap.index.instances_generation == generation and snap.index.instances_total() is total
    assert total == _scan(snap.nodes["n0"])["instances"]
    snap.reserve(Config(2, 1, "1g.5gb"), Fit("n0", SliceRef("1g.5gb", 2), True))  # an instance created
    assert snap.index.instances_generation > generation
    assert snap.index.instances_total() == _scan(snap.nodes["n0"])["instances"]
    generation = snap.index.instances_generation
    snap.put(NodeState("n0", 16, 16, "A100-40GB", [Slice(THREE)]))
    assert snap.index.instances_generation > generation and snap.index.instances_total() == {"3g.20gb": 1}


# -- random changes: every answer of a kept index is that of one built from scratch -----------------
MODEL = "A100-40GB"
FUNCTIONS = ("a", "b", "c")
MEMORY = {f: {p: mb for p in ("1g.5gb", "2g.10gb", "3g.20gb", "7g.40gb")}
          for f, mb in (("a", 2400), ("b", 1700), ("c", 1500))}
"""GPU memory per worker (MiB): one worker of each fills a 1g.5gb instance past its 5,120."""
CONFIGS = [Config(1, 2, "1g.5gb"), Config(1, 4, "2g.10gb"), Config(1, 2, "3g.20gb"), Config(1, 4, None),
           Config(1, 8, "7g.40gb")]


def _answers(snap: ClusterSnapshot) -> dict:
    index = snap.index
    names = sorted(snap.nodes)
    return {
        "routes": [index.route((), gpu) for gpu in (True, False)] + [index.route(("n1",), True)],
        "warm": {f: set(index.nodes_with_warm(f)) for f in FUNCTIONS},
        "totals": {f: index.idle_totals(f) for f in FUNCTIONS},
        "instances": index.instances_total(),
        "fits": {(n, c, f): index.fit(n, c, f) for n in names for c in CONFIGS for f in (None, *FUNCTIONS)},
        "nodes": {n: (index.idle_compute(n), index.layout(n), index.idle_profiles(n), index.idle_by_kind(n),
                      index.stocked_profiles(n), index.idle_by_function(n, "1g.5gb")) for n in names},
    }


ANY_CHANGE = st.integers(0, 3)


@st.composite
def _changes(draw, nodes=("n0", "n1", "n2"), whats=ANY_CHANGE, size=25):
    return draw(st.lists(st.tuples(st.sampled_from(nodes), st.sampled_from(CONFIGS),
                                   st.sampled_from(FUNCTIONS), st.booleans(), whats),
                         min_size=1, max_size=size))


@settings(max_examples=150, deadline=None)
@given(_changes())
def test_a_kept_index_answers_as_a_fresh_one_after_any_changes(changes):
    _kept_against_fresh(changes, memory=False)


@settings(max_examples=150, deadline=None)
@given(_changes(("n0", "n1"), st.sampled_from([0, 0, 1, 2, 3, 3]), 40))
def test_a_kept_index_answers_as_a_fresh_one_with_workers_gpu_memory(changes):
    """Workers' GPU memory weighed: new workers' fits stop idle workers of other functions (``Fit.evict``),
    batches ending often enough that instances hold several functions' idle workers."""
    _kept_against_fresh(changes, memory=True)


def _kept_against_fresh(changes, memory: bool) -> None:
    snap = ClusterSnapshot({n: NodeState(n, 16, 16, MODEL) for n in ("n0", "n1", "n2")}, tracks_workers=True)
    if memory:
        snap.use_memory(MEMORY)
    running: list[tuple[str, Config, Fit]] = []
    for node, config, function, warm, what in changes:
        _answers(snap)  # (everything asked, so that every answer is carried or moved by the change)
        generations = {f: snap.index.idle_generation(f) for f in FUNCTIONS}
        idle_before = {f: copy.deepcopy(_idle_of(snap, f)) for f in FUNCTIONS}
        if what == 0 and running:  # a batch ends: its worker idle
            function, config, fit = running.pop(0)
            snap.finish(function, config, fit)
        elif what == 1 and running:  # a claim undone
            _, config, fit = running.pop()
            snap.release(config, fit)
        elif what == 2:  # the driver puts a copy of the node's state
            snap.put(copy.deepcopy(snap.nodes[node]))
        else:
            fit = snap.fit(node, config, function if warm else None)
            if fit is None:
                continue
            snap.reserve(config, fit)
            running = [r for r in running if r[2].node != node or r[2].slice not in fit.destroy]
            running.append((function, config, fit))
        fresh = ClusterSnapshot({n: copy.deepcopy(s) for n, s in snap.nodes.items()}, tracks_workers=True)
        if memory:
            fresh.use_memory(MEMORY)
        assert _answers(snap) == _answers(fresh)
        for f in FUNCTIONS:  # a function's idle workers move only with its generation
            if snap.index.idle_generation(f) == generations[f]:
                assert _idle_of(snap, f) == idle_before[f], f


def _idle_of(snap: ClusterSnapshot, function: str) -> dict:
    return {(n, ref): k for n, s in snap.nodes.items() for (f, ref), k in s.idle_workers.items()
            if f == function and k > 0}
