"""The snapshot's capacity order and routes: its own binary search (``cluster._place_in``) answers what
``bisect.bisect_left`` answers, a node's new key put in (``cluster._reorder``) keeps the order sorted, and
a route puts the preferred nodes first (``cluster._preferred_first``)."""

from __future__ import annotations

import bisect

from hypothesis import given
from hypothesis import strategies as st

from esg.index import _place_in, _preferred_first, _reorder
from esg.state import NodeState

keys = st.tuples(st.integers(-8, 0), st.integers(-16, 0), st.sampled_from(["n0", "n1", "n2", "n3"]))


@given(st.lists(keys, max_size=20), keys)
def test_the_place_found_is_bisect_lefts(ordered, key):
    ordered.sort()
    assert _place_in(ordered, key) == bisect.bisect_left(ordered, key)


names = st.sampled_from(["n0", "n1", "n2", "n3", "n4"])
capacity = st.tuples(st.integers(-8, 0), st.integers(-16, 0))


@given(st.lists(st.tuples(names, capacity), max_size=40))
def test_a_node_put_back_in_the_order_keeps_it_sorted_and_says_when_nodes_changed_places(updates):
    """``_reorder`` against sorting from scratch: after each new key of a node the keys are sorted, each
    node's place is its key's, and the answer is whether the order of names changed."""
    ordered: list[tuple] = []
    names: list[str] = []
    places: dict[str, int] = {}
    current: dict[str, tuple] = {}
    for name, (idle, vcpus) in updates:
        before = [k[-1] for k in ordered]
        current[name] = key = (idle, vcpus, name)
        moved = _reorder(ordered, names, places, name, key)
        assert ordered == sorted(current.values())
        assert names == [k[-1] for k in ordered]
        assert places == {k[-1]: i for i, k in enumerate(ordered)}
        assert moved == ([k[-1] for k in ordered] != before)


@given(st.lists(st.sampled_from(["n0", "n1", "n2", "n3", "gone"]), max_size=4),
       st.permutations(["n0", "n1", "n2", "n3"]))
def test_a_route_takes_the_preferred_nodes_that_exist_once_then_the_rest_in_order(preferred, order):
    nodes = {n: NodeState(n, 8, 8) for n in order}
    first = [n for n in dict.fromkeys(preferred) if n in nodes]
    assert _preferred_first(tuple(preferred), nodes, list(order)) == first + [n for n in order if n not in first]
