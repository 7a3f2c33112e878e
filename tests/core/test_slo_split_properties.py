"""The dominator-based SLO split against networkx's dominators, computed here on our own graph."""

from __future__ import annotations

import networkx as nx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from esg.model import App
from esg.slo_split import dominator_chain, groups, regions, split_slo
from tests.core._helpers import dag_latency

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SRC, SNK = "<src>", "<snk>"


@st.composite
def apps(draw) -> App:
    """A random DAG of 1 to 9 functions (several entries and sinks allowed), listed in random order."""
    n = draw(st.integers(1, 9))
    names = [f"f{i}" for i in range(n)]  # f_i before f_j in a hidden topological order when i < j
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    density = draw(st.sampled_from([0.15, 0.3, 0.5, 0.8]))
    keep = draw(st.lists(st.floats(0, 1), min_size=len(pairs), max_size=len(pairs)))
    edges = tuple((names[i], names[j]) for (i, j), x in zip(pairs, keep) if x < density)
    listed = draw(st.permutations(names))
    return App("rand", 100.0, tuple(listed), edges)


def _idom(app: App) -> dict[str, str]:
    g = nx.DiGraph()
    g.add_nodes_from([SRC, SNK, *app.functions])
    g.add_edges_from(app.edges)
    has_pred = {b for _, b in app.edges}
    has_succ = {a for a, _ in app.edges}
    g.add_edges_from((SRC, f) for f in app.functions if f not in has_pred)
    g.add_edges_from((f, SNK) for f in app.functions if f not in has_succ)
    return nx.immediate_dominators(g, SRC)


def _dominators(idom: dict[str, str], node: str) -> set[str]:
    out = {node}
    while node != SRC:
        node = idom[node]
        out.add(node)
    return out


def _chain(idom: dict[str, str]) -> tuple[str, ...]:
    chain, node = [], idom[SNK]
    while node != SRC:
        chain.append(node)
        node = idom[node]
    return tuple(reversed(chain))


@SETTINGS
@given(apps())
def test_dominator_chain_is_the_sinks_dominator_path(app):
    assert dominator_chain(app) == _chain(_idom(app))


@SETTINGS
@given(apps())
def test_regions_are_sequential_and_headed_by_the_chain(app):
    idom = _idom(app)
    chain = _chain(idom)
    regs = regions(app)
    where = {f: i for i, r in enumerate(regs) for f in r}
    assert sorted(where) == sorted(app.functions)
    assert sum(len(r) for r in regs) == len(app.functions)
    # each chain node opens its own region; a leading region holds what comes before the first one
    heads = [r[0] for r in regs]
    assert [h for h in heads if h in chain] == list(chain)
    assert all(h in chain for h in heads[1:])
    for r in regs:
        head = r[0] if r[0] in chain else None
        for f in r:
            doms = _dominators(idom, f) & set(chain)
            deepest = max(doms, key=chain.index) if doms else None
            assert deepest == head
    # regions run one after another: an edge stays in its region or enters the next region's head
    for a, b in app.edges:
        if where[a] != where[b]:
            assert where[b] == where[a] + 1 and b == regs[where[b]][0]


@SETTINGS
@given(apps(), st.integers(1, 4))
def test_groups_partition_the_app_into_sequential_bounded_groups(app, max_group):
    gs = groups(app, max_group)
    where = {}
    for i, g in enumerate(gs):
        assert 1 <= len(g) <= max_group
        for f in g:
            assert f not in where, f"{f} is in two groups"
            where[f] = i
    assert sorted(where) == sorted(app.functions)
    for a, b in app.edges:
        assert where[a] <= where[b], f"edge {a}->{b} goes back from group {where[a]} to {where[b]}"
    for g in gs:  # each group lists its functions in a topological order
        inside = [(a, b) for a, b in app.edges if a in g and b in g]
        for a, b in inside:
            assert g.index(a) < g.index(b)
    # consecutive pieces are merged while they fit, so no two neighbouring groups would fit together
    for g1, g2 in zip(gs, gs[1:]):
        assert len(g1) + len(g2) > max_group
    # groups never mix regions unless whole regions were packed together
    regs = regions(app)
    region_of = {f: i for i, r in enumerate(regs) for f in r}
    for g in gs:
        touched = sorted({region_of[f] for f in g})
        assert touched == list(range(touched[0], touched[-1] + 1))
        if len(touched) > 1:
            assert all(set(regs[i]) <= set(g) for i in touched[1:-1])


@SETTINGS
@given(apps(), st.integers(1, 4), st.floats(1.0, 1e4),
       st.lists(st.floats(0.1, 500.0), min_size=9, max_size=9))
def test_shares_sum_to_the_slo_in_proportion_to_the_estimates(app, max_group, slo, lats):
    estimates = {f: lats[i] for i, f in enumerate(sorted(app.functions))}
    shares = split_slo(app, slo, estimates, max_group)
    assert tuple(s.functions for s in shares) == groups(app, max_group)
    assert sum(s.share_ms for s in shares) == pytest.approx(slo)
    est = []
    for s in shares:
        inside = [(a, b) for a, b in app.edges if a in s.functions and b in s.functions]
        e = dag_latency(s.functions, inside, estimates)
        assert s.estimate_ms == pytest.approx(e)
        est.append(e)
    total = sum(est)
    for s, e in zip(shares, est):
        assert s.share_ms == pytest.approx(slo * e / total)


def test_known_shapes():
    diamond = App("d", 100, ("a", "b", "c", "d"), (("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")))
    assert dominator_chain(diamond) == ("a", "d")
    assert regions(diamond) == (("a", "b", "c"), ("d",))
    assert groups(diamond, 3) == (("a", "b", "c"), ("d",))
    two_entries = App("e", 100, ("x", "y", "z"), (("x", "z"), ("y", "z")))
    assert dominator_chain(two_entries) == ("z",)
    assert regions(two_entries) == (("x", "y"), ("z",))
    parallel = App("p", 100, ("x", "y"), ())
    assert dominator_chain(parallel) == ()
    assert groups(parallel, 1) == (("x",), ("y",))
    with pytest.raises(ValueError):
        groups(diamond, 0)


@SETTINGS
@given(st.integers(1, 3), st.integers(1, 3), st.lists(st.floats(0.1, 500.0), min_size=5, max_size=5))
def test_a_fork_join_region_keeps_its_branches_parallel(branches, max_group, lats):
    """head -> b0..bk -> tail: with k+1 <= max_group the groups' estimates add up to the app's longest
    path (the branches are estimated in parallel, not one after another)."""
    bs = tuple(f"b{i}" for i in range(branches))
    app = App("fj", 100, ("head", *bs, "tail"),
              tuple(("head", b) for b in bs) + tuple((b, "tail") for b in bs))
    est = {"head": lats[0], "tail": lats[4], **{b: lats[1 + i] for i, b in enumerate(bs)}}
    shares = split_slo(app, 100.0, est, max_group)
    if branches <= max_group:
        exact = lats[0] + max(est[b] for b in bs) + lats[4]
        assert sum(s.estimate_ms for s in shares) == pytest.approx(exact)
