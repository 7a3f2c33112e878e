"""MIG-aware fitting on a node: reuse idle slices, carve new ones, never touch busy ones."""

from esg import mig
from esg.cluster import ClusterSnapshot, NodeState, Slice, SliceRef
from esg.model import Config


def node(*slices: tuple[str, int, bool]) -> ClusterSnapshot:
    return ClusterSnapshot.of([NodeState("n", 16, 16, "A100-40GB",
                                         [Slice(SliceRef(p, s), busy=b) for p, s, b in slices])])


def test_idle_slice_of_the_profile_is_reused():
    fit = node(("2g.10gb", 0, False)).fit("n", Config(1, 1, "2g.10gb"))
    assert fit.slice == SliceRef("2g.10gb", 0) and not fit.reconfigures


def test_new_slice_is_carved_in_free_memory_without_destroying_anything():
    fit = node(("3g.20gb", 0, True)).fit("n", Config(1, 1, "2g.10gb"))
    assert fit.create and fit.destroy == () and fit.slice.start in (4,)


def test_idle_slices_in_the_way_are_destroyed_but_busy_ones_never():
    snap = node(("3g.20gb", 0, True), ("1g.5gb", 4, False), ("1g.5gb", 5, False))
    fit = snap.fit("n", Config(1, 1, "3g.20gb"))
    assert fit.slice == SliceRef("3g.20gb", 4)
    assert set(fit.destroy) == {SliceRef("1g.5gb", 4), SliceRef("1g.5gb", 5)}
    snap.reserve(Config(1, 1, "3g.20gb"), fit)
    layout = [(s.ref.profile, s.ref.start) for s in snap.nodes["n"].slices]
    assert mig.place("A100-40GB", [], layout) is not None
    assert ("3g.20gb", 0) in layout


def test_no_fit_when_busy_slices_block_every_placement():
    snap = node(("3g.20gb", 0, True), ("3g.20gb", 4, True))
    assert snap.fit("n", Config(1, 1, "1g.5gb")) is None  # 3g+3g leave no room for a 1g
    assert snap.fit("n", Config(1, 1, None)) is not None


def test_vcpus_are_reserved_and_released():
    snap = node()
    fit = snap.fit("n", Config(1, 10, None))
    snap.reserve(Config(1, 10, None), fit)
    assert snap.fit("n", Config(1, 8, None)) is None
    snap.release(Config(1, 10, None), fit)
    assert snap.nodes["n"].vcpus_free == 16


def test_cpu_only_node_cannot_take_a_gpu_config_and_unknown_profile_never_fits():
    snap = ClusterSnapshot.of([NodeState("c", 8, 8, None)])
    assert snap.fit("c", Config(1, 1, "1g.5gb")) is None
    assert node().fit("n", Config(1, 1, "1g.6gb")) is None  # an A30 profile on an A100


def test_new_small_instance_does_not_block_the_big_placements():
    fit = node().fit("n", Config(1, 1, "1g.5gb"))
    assert fit.slice.start == 6  # leaves 0-3 for a 4g and 4-5 for a 2g


def test_a_fit_takes_the_idle_worker_of_the_function_on_any_idle_instance_of_the_profile():
    # two idle 1g instances: the layout's fit names one, the worker of f waits on the other
    refs = (SliceRef("1g.5gb", 5), SliceRef("1g.5gb", 6))
    snap = ClusterSnapshot({"n0": NodeState("n0", 16, 16, "A100-40GB", [Slice(r) for r in refs])},
                           tracks_workers=True)
    named = snap.fit("n0", Config(1, 1, "1g.5gb")).slice
    other = refs[1] if named == refs[0] else refs[0]
    state = snap.nodes["n0"]
    state.idle_workers = {("f", other): 1, ("g", named): 1}
    snap.put(state)
    warm = snap.fit("n0", Config(1, 1, "1g.5gb"), "f")
    assert warm.warm_worker == ("f", other) and warm.slice == other and not warm.create and not warm.destroy
    assert snap.fit("n0", Config(1, 1, "1g.5gb"), "h").warm_worker is None, "no worker of h: the layout's fit"
    next(sl for sl in state.slices if sl.ref == other).busy = True
    snap.put(state)
    assert snap.fit("n0", Config(1, 1, "1g.5gb"), "f").warm_worker is None, "f's instance is busy"
