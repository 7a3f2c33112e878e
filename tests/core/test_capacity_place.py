"""The snapshot's capacity order finds where a node's key goes with its own binary search
(``cluster._place_in``), which must answer what ``bisect.bisect_left`` answers."""

from __future__ import annotations

import bisect

from hypothesis import given
from hypothesis import strategies as st

from esg.cluster import _place_in

keys = st.tuples(st.integers(-8, 0), st.integers(-16, 0), st.sampled_from(["n0", "n1", "n2", "n3"]))


@given(st.lists(keys, max_size=20), keys)
def test_the_place_found_is_bisect_lefts(ordered, key):
    ordered.sort()
    assert _place_in(ordered, key) == bisect.bisect_left(ordered, key)
