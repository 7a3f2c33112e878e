"""GPU memory per MIG instance (:mod:`esg.memory`): the eviction rule against a brute force, and the
fits, placements and pre-warms that follow it."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from esg import placement
from esg.cluster import ClusterSnapshot, NodeState, Slice, SliceRef
from esg.defaults import StartupCosts
from esg.memory import evictions, held_mb, instance_memory_mb
from esg.model import Config
from esg.prewarm import WarmUp, place_warmup
from esg.profiles import ProfileError, profile_from_dict

ONE, ONE_B = SliceRef("1g.5gb", 0), SliceRef("1g.5gb", 1)
SMALL = Config(1, 2, "1g.5gb")
MEMORY = {"a": {"1g.5gb": 2400}, "b": {"1g.5gb": 1700}, "c": {"1g.5gb": 1500}, "big": {"1g.5gb": 6000}}


def _brute(idle: dict[str, int], memory: dict[str, int], capacity: int, need: int) -> int | None:
    """The fewest idle workers whose stopping lets ``need`` fit, over every choice (None: none does)."""
    names = sorted(idle)
    best = None
    for counts in itertools.product(*(range(idle[f] + 1) for f in names)):
        left = {f: idle[f] - k for f, k in zip(names, counts)}
        if held_mb(left, memory) + need <= capacity and (best is None or sum(counts) < best):
            best = sum(counts)
    return best


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from("pqrs"), st.integers(0, 4), max_size=4),
       st.dictionaries(st.sampled_from("pqrs"), st.integers(0, 3000), max_size=4),
       st.integers(0, 12000), st.integers(0, 6000))
def test_evictions_stop_the_fewest_workers_that_make_room(idle, memory, capacity, need):
    stop = evictions(idle, memory, capacity, need)
    best = _brute(idle, memory, capacity, need)
    if stop is None:
        assert best is None
        return
    assert best is not None and sum(n for _, n in stop) == best
    left = dict(idle)
    for f, n in stop:
        assert 0 < n <= left[f]
        left[f] -= n
    assert held_mb(left, memory) + need <= capacity


BUSY = [Slice(SliceRef("1g.5gb", s), busy=True) for s in range(2, 7)]
"""Five busy 1g.5gb instances: with two more, the GPU has no space for another instance."""


def _node(slices, idle) -> ClusterSnapshot:
    snap = ClusterSnapshot({"n0": NodeState("n0", 16, 16, "A100-40GB", slices, idle_workers=idle)}, tracks_workers=True)
    snap.use_memory(MEMORY)
    return snap


def test_a_1g_5gb_instance_holds_what_its_memory_holds():
    assert instance_memory_mb("A100-40GB", "1g.5gb") == 5120
    # a and b idle there (4,100 MiB): c's 1,500 do not fit beside them; the GPU is full, so one a is
    # stopped first (the larger)
    snap = _node([Slice(ONE), Slice(ONE_B, busy=True), *BUSY], {("a", ONE): 1, ("b", ONE): 1})
    fit = snap.fit("n0", SMALL, "c")
    assert fit is not None and fit.slice == ONE and fit.evict == (("a", 1),)
    # the function with no figure is not limited, and the fit without a function stays as it was
    assert snap.fit("n0", SMALL, "unknown").evict == ()
    assert snap.fit("n0", SMALL).evict == ()
    # a worker that no 1g.5gb instance can hold does not fit there at all
    assert snap.fit("n0", SMALL, "big") is None


def test_an_instance_with_room_then_a_new_one_are_taken_before_workers_are_stopped():
    snap = _node([Slice(ONE), Slice(ONE_B), *BUSY], {("a", ONE): 2})
    fit = snap.fit("n0", SMALL, "b")
    assert fit is not None and (fit.slice, fit.create, fit.evict) == (ONE_B, False, ())
    # the GPU has space for another instance: it is carved rather than a's worker stopped
    spare = _node([Slice(ONE)], {("a", ONE): 2})
    fit = spare.fit("n0", SMALL, "b")
    assert fit is not None and fit.create and fit.evict == ()


def test_reserving_an_evicting_fit_stops_the_workers_it_names():
    snap = _node([Slice(ONE), Slice(ONE_B, busy=True), *BUSY], {("a", ONE): 1, ("b", ONE): 1})
    fit = snap.fit("n0", SMALL, "c")
    snap.reserve(SMALL, fit)
    assert snap.nodes["n0"].idle_workers.get(("a", ONE), 0) == 0
    assert snap.nodes["n0"].idle_workers[("b", ONE)] == 1
    assert snap.nodes_with_warm("a") == set()


def _head(function: str, budget: float = 1e9) -> placement.HeadBatch:
    return placement.HeadBatch(function, (SMALL,), lambda c: 10.0, [], budget, StartupCosts(2000.0, 1000.0),
                               lambda start_ms: True)


def test_a_batch_goes_elsewhere_rather_than_stop_another_functions_workers():
    full = NodeState("n0", 16, 16, "A100-40GB", [Slice(ONE), Slice(ONE_B, busy=True), *BUSY],
                     idle_workers={("a", ONE): 2})
    room = NodeState("n1", 16, 16, "A100-40GB", [Slice(ONE), Slice(ONE_B, busy=True), *BUSY],
                     idle_workers={("a", ONE): 1})
    snap = ClusterSnapshot({"n0": full, "n1": room}, tracks_workers=True)
    snap.use_memory(MEMORY)
    placed = placement.place(snap, placement.HeadBatch("b", (SMALL,), lambda c: 10.0, ["n0"], 1e9,
                                                       StartupCosts(2000.0, 1000.0), lambda start_ms: True), set())
    assert placed.fit.node == "n1" and placed.fit.evict == ()
    # with nowhere else to go, it stops one of a's idle workers
    alone = _node([Slice(ONE), Slice(ONE_B, busy=True), *BUSY], {("a", ONE): 2})
    placed = placement.place(alone, _head("b"), set())
    assert placed.fit.evict == (("a", 1),)
    assert alone.nodes["n0"].idle_workers[("a", ONE)] == 1


def test_a_configuration_that_no_instance_holds_for_one_function_still_fits_for_others():
    """The walk's "fits nowhere" is about the configuration, not the function: a worker too large for a
    1g.5gb instance must not make the configuration look full for every other function in the step."""
    snap = _node([Slice(ONE)], {})
    no_fit: set[Config] = set()
    assert not isinstance(placement.place(snap, _head("big"), no_fit), placement.Placement)
    assert SMALL not in no_fit and SMALL not in snap.nowhere
    assert isinstance(placement.place(snap, _head("a"), no_fit), placement.Placement)


def test_a_prewarm_never_stops_another_functions_worker():
    snap = _node([Slice(ONE), Slice(ONE_B, busy=True), *BUSY], {("a", ONE): 1, ("b", ONE): 1})
    assert place_warmup(snap, WarmUp("app", "c", SMALL, preferred=("n0",))) is None
    assert place_warmup(snap, WarmUp("app", "c", SMALL, preferred=("n0",), instance=ONE)) is None
    roomy = _node([Slice(ONE)], {("b", ONE): 1})
    assert place_warmup(roomy, WarmUp("app", "c", SMALL, preferred=("n0",), instance=ONE)) is not None


def _table(rows, table_mb=None) -> dict:
    data = {"function": "m", "gpu_model": "A100-40GB", "configs": [
        {"batch": b, "vcpus": 1, "gpu": g, "latency_ms": 10.0, **({"gpu_memory_mb": mb} if mb else {})}
        for b, g, mb in rows]}
    if table_mb is not None:
        data["gpu_memory_mb"] = table_mb
    return data


def test_a_workers_memory_per_mig_profile_is_its_largest_row_there():
    p = profile_from_dict(_table([(1, "1g.5gb", 2100), (8, "1g.5gb", 3900), (32, "3g.20gb", 10300),
                                  (1, None, None)], 10300), "m")
    assert p.worker_memory() == {"1g.5gb": 3900, "3g.20gb": 10300}
    # without row figures, the table's
    q = profile_from_dict(_table([(1, "1g.5gb", None), (1, "3g.20gb", None)], 2318), "m")
    assert q.worker_memory() == {"1g.5gb": 2318, "3g.20gb": 2318}


def test_a_row_whose_worker_its_instance_cannot_hold_is_no_configuration():
    p = profile_from_dict(_table([(1, "1g.5gb", 2100), (32, "1g.5gb", 10300), (32, "3g.20gb", 10300)]), "m")
    assert {(c.batch, c.gpu) for c in p.configs} == {(1, "1g.5gb"), (32, "3g.20gb")}
    with pytest.raises(ProfileError, match="gpu_memory_mb"):
        profile_from_dict(_table([(1, "1g.5gb", None)], 6000), "m")
    with pytest.raises(ProfileError, match=r"configs\[0\].*gpu_memory_mb"):
        profile_from_dict(_table([(1, "1g.5gb", -5)]), "m")


def test_a_scale_out_start_stops_no_workers_while_a_start_elsewhere_stops_none():
    """Nothing is in time: the scale-out rule starts the soonest placement, but one that stops another
    function's idle workers only when every placement would (else two functions evict each other)."""
    full = NodeState("n0", 16, 16, "A100-40GB", [Slice(ONE), Slice(ONE_B, busy=True), *BUSY],
                     idle_workers={("a", ONE): 2})
    empty = NodeState("n1", 16, 16, "A100-40GB")
    snap = ClusterSnapshot({"n0": full, "n1": empty}, tracks_workers=True)
    snap.use_memory(MEMORY)
    placed = placement.place(snap, _head("b", budget=0.0), set())
    # on n1 it waits a MIG change more than on n0, where it would stop one of a's workers
    assert placed.fit.node == "n1" and placed.fit.create and placed.fit.evict == ()
