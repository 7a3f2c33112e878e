"""The planner over whole apps: grouping, exactness, ordering of functions."""

from __future__ import annotations

from esg.model import App
from esg.planner import Planner
from tests.core._helpers import make_profile


def test_functions_listed_out_of_topological_order():
    # an app file may list a sink before its predecessor
    app = App("rev", 100, ("b", "a"), (("a", "b"),))
    profiles = {f: make_profile(f, [(1, 1, None, 10.0), (1, 2, None, 6.0)]) for f in ("a", "b")}
    for kw in ({}, {"exact": True}, {"brute_force": True}):
        result = Planner(app, profiles, **kw).plan(100, 2)
        assert result.feasible
        assert [p.cost for p in result.paths] == [20.0, 22.0]
        assert result.paths[0].latency_ms == 20.0
