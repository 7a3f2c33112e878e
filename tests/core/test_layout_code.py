"""A node's MIG layout as one integer (``ClusterIndex.layout_code``), the key under which the index's fit
remembers where a GPU configuration goes: two nodes get the same code exactly when they have the same
layout, and a fit found through the code is the one ``gpu_fit`` gives for the layout itself."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from esg import mig
from esg.cluster import ClusterSnapshot, NodeState, Slice, SliceRef, gpu_fit
from esg.model import Config

MODEL = "A100-40GB"
PLACEMENTS = sorted({(p, s) for layout in mig.all_placements(MODEL) for p, s in layout})


def _node(name: str, instances: list[tuple[tuple[str, int], bool]]) -> NodeState:
    return NodeState(name, 16, 16, MODEL, [Slice(SliceRef(p, s), busy) for (p, s), busy in instances])


# a node's instances: distinct (profile, start) placements, each idle or busy, in any order
instances = st.lists(st.tuples(st.sampled_from(PLACEMENTS), st.booleans()), max_size=8,
                     unique_by=lambda i: i[0]).flatmap(st.permutations)


@settings(max_examples=300, deadline=None)
@given(instances, instances, st.data())
def test_two_nodes_have_the_same_code_exactly_when_they_have_the_same_layout(a, other, data):
    # b: a's instances in another order, some of them with the other busy state; other: unrelated
    flips = data.draw(st.lists(st.booleans(), min_size=len(a), max_size=len(a)))
    b = data.draw(st.permutations([(ref, busy != flip) for (ref, busy), flip in zip(a, flips)]))
    snap = ClusterSnapshot.of([_node("a", a), _node("b", b), _node("c", other)])
    for x, y in (("a", "b"), ("a", "c")):
        same_layout = snap.layout(x) == snap.layout(y)
        code = snap.index.layout_code
        assert (code(snap.nodes[x]) == code(snap.nodes[y])) == same_layout


def test_the_code_ignores_the_order_of_the_instances_and_sees_each_busy_state():
    one = [(("1g.5gb", 0), False), (("3g.20gb", 4), True)]
    layout_code = ClusterSnapshot({}).index.layout_code
    assert layout_code(_node("n", one)) == layout_code(_node("n", one[::-1]))
    assert layout_code(_node("n", one)) != layout_code(_node("n", [(("1g.5gb", 0), True), (("3g.20gb", 4), True)]))


@settings(max_examples=200, deadline=None)
@given(instances)
def test_a_fit_found_by_code_is_the_fit_of_the_layout(layout):
    """Every profile's fit, asked twice of one snapshot whose node changed in between (the second finds
    the first's by the layout's code), is what ``gpu_fit`` answers for the node's layout."""
    snap = ClusterSnapshot.of([_node("n", layout)])
    for _ in range(2):
        snap.put(snap.nodes["n"])
        for profile in mig.geometry(MODEL).profiles:
            fit = snap.fit("n", Config(1, 1, profile))
            placed = gpu_fit(MODEL, snap.layout("n"), profile)
            if placed is None:
                assert fit is None
            else:
                assert fit is not None and (fit.slice, fit.create, fit.destroy) == placed
