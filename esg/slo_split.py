"""Dominator-based SLO distribution: cut an app into sequential groups and split its SLO among them.

With a virtual source before every entry and a virtual sink after every sink, the dominators of the
sink form a chain source = d0, d1, ..., dk = sink through which every request passes. Each chain node
d_i (a real function) opens a *region*: itself plus every function whose deepest chain dominator is
d_i; functions before the first real chain node (parallel entries) form a leading region. Regions run
one after another, so the app's latency is the sum of the regions' latencies.

Regions are then packed into *groups* of at most ``max_group`` functions: consecutive regions are merged
while they fit (fewer, larger groups plan better), and a region larger than ``max_group`` is cut at its
*levels* (a function's level is the length of the longest chain of the region's functions before it):
functions of one level have no edge between them, so a level kept in one group stays parallel in the
estimate, and consecutive levels are merged while they fit. Only a level wider than ``max_group`` is cut
into pieces in topological order, which are then treated as sequential (a conservative
approximation). A fork-join region -- a head, up to ``max_group`` parallel branches -- is thus
estimated exactly: head, then the slowest branch.

The SLO is split in proportion to each group's latency estimate: the group's longest path with every
function at its median-latency profiled configuration (the "typical" speed of a function, less skewed
than its fastest GPU configuration). ESG_1Q runs group by group; a group's budget is its share plus
whatever the earlier groups left unused.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import networkx as nx

from esg.model import App
from esg.search import longest_path

SOURCE = "__esg_source__"
SINK = "__esg_sink__"
DEFAULT_MAX_GROUP = 3


def dag(app: App) -> nx.DiGraph:
    g = nx.DiGraph()
    g.add_nodes_from((SOURCE, SINK, *app.functions))
    g.add_edges_from(app.edges)
    g.add_edges_from((SOURCE, f) for f in app.entries)
    g.add_edges_from((f, SINK) for f in app.sinks)
    return g


def dominator_chain(app: App) -> tuple[str, ...]:
    """The real functions every request passes through, in order (the sink's dominators)."""
    idom = nx.immediate_dominators(dag(app), SOURCE)
    chain = []
    node = idom[SINK]
    while node != SOURCE:
        chain.append(node)
        node = idom[node]
    return tuple(reversed(chain))


def regions(app: App) -> tuple[tuple[str, ...], ...]:
    """The app cut at its dominator chain: sequential regions, each in topological order."""
    g = dag(app)
    idom = nx.immediate_dominators(g, SOURCE)
    chain = set(dominator_chain(app))
    owner: dict[str, str] = {}
    for f in app.topo_order:
        node = f
        while node != SOURCE and node not in chain:
            node = idom[node]
        owner[f] = node
    order = [SOURCE, *dominator_chain(app)]
    out = []
    for head in order:
        members = tuple(f for f in app.topo_order if owner[f] == head)
        if members:
            out.append(members)
    return tuple(out)


def groups(app: App, max_group: int = DEFAULT_MAX_GROUP) -> tuple[tuple[str, ...], ...]:
    """Sequential groups of at most ``max_group`` functions (see the module docstring)."""
    if max_group < 1:
        raise ValueError("max_group must be at least 1")
    pieces: list[tuple[str, ...]] = []
    for region in regions(app):
        if len(region) <= max_group:
            pieces.append(region)
            continue
        for level in _levels(app, region):
            for i in range(0, len(level), max_group):
                pieces.append(level[i:i + max_group])
    out: list[tuple[str, ...]] = []
    for piece in pieces:
        fits = out and len(out[-1]) + len(piece) <= max_group
        if fits:
            out[-1] = out[-1] + piece
        else:
            out.append(piece)
    return tuple(out)


def _levels(app: App, region: tuple[str, ...]) -> list[tuple[str, ...]]:
    """The region's functions by level (longest chain of region functions before each), each level in
    the region's topological order."""
    inside = set(region)
    level: dict[str, int] = {}
    for f in region:  # topological order: predecessors first
        level[f] = max((level[p] + 1 for p in app.predecessors(f) if p in inside), default=0)
    return [tuple(f for f in region if level[f] == k) for k in range(max(level.values()) + 1)]


@dataclass(frozen=True)
class GroupShare:
    functions: tuple[str, ...]
    estimate_ms: float
    share_ms: float


def split_slo(app: App, budget_ms: float, estimates: Mapping[str, float],
              max_group: int = DEFAULT_MAX_GROUP) -> tuple[GroupShare, ...]:
    """Each group with its share of ``budget_ms`` (what is left of the request's SLO), proportional to
    its estimated latency."""
    gs = groups(app, max_group)
    est = [group_latency(app, g, estimates) for g in gs]
    total = sum(est)
    shares = [budget_ms * e / total if total > 0 else budget_ms / len(gs) for e in est]
    return tuple(GroupShare(g, e, s) for g, e, s in zip(gs, est, shares))


def group_latency(app: App, functions: tuple[str, ...], latency: Mapping[str, float]) -> float:
    sub = app.sub_app(functions)
    pos = {f: i for i, f in enumerate(sub.functions)}
    preds = [tuple(pos[p] for p in sub.predecessors(f)) for f in sub.functions]
    return longest_path([latency[f] for f in sub.functions], preds)
