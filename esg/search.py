"""ESG_1Q: the K cheapest feasible configuration paths of a group of functions, by A* search.

A group is a small DAG of functions. A *path* assigns one configuration to every function; its latency
is the longest path through the DAG (parallel branches overlap), its cost the sum of the functions'
per-request costs. A path is feasible when its latency is within the budget.

The search walks the layered configuration graph in topological order of the functions:

* g = cost of the configurations chosen so far;
* h = sum over the remaining functions of their cheapest option's cost (admissible and consistent);
* **time blade**: a partial path is dropped when its latency with every remaining function at its
  fastest option already exceeds the budget. That bound is exact for the all-fastest completion, so a
  partial path that survives always has a feasible completion;
* **cost blade**: a partial path is dropped when g + h is no better than the K-th best complete path.

Options are sorted by cost, and a node is expanded lazily (its next sibling and its first child are
pushed, never all 256 children at once), so complete paths leave the heap in cost order and the search
stops after K of them. :func:`brute_force_top_k` is the reference: it enumerates every path with numpy.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np

from esg.model import Config


@dataclass(frozen=True, order=True)
class Option:
    """One candidate configuration of one function, with its profiled batch latency and cost."""

    cost: float
    latency_ms: float
    config: Config = field(compare=False)


@dataclass(frozen=True)
class Path:
    cost: float
    latency_ms: float
    configs: Mapping[str, Config]

    def to_dict(self) -> dict:
        return {"cost": self.cost, "latency_ms": self.latency_ms,
                "configs": {f: c.to_dict() for f, c in self.configs.items()}}


@dataclass(frozen=True)
class Group:
    """The search problem: functions in topological order, their edges, their options."""

    functions: tuple[str, ...]
    edges: tuple[tuple[str, str], ...]
    options: Mapping[str, Sequence[Option]]

    def pred_index(self) -> tuple[tuple[int, ...], ...]:
        pos = {f: i for i, f in enumerate(self.functions)}
        return tuple(tuple(pos[a] for a, b in self.edges if b == f) for f in self.functions)


def longest_path(lat: Sequence[float], preds: Sequence[Sequence[int]]) -> float:
    finish: list[float] = []
    for i, lt in enumerate(lat):
        start = max((finish[p] for p in preds[i]), default=0.0)
        finish.append(start + lt)
    return max(finish, default=0.0)


@dataclass
class SearchStats:
    expanded: int = 0
    pruned_time: int = 0
    pruned_cost: int = 0


@dataclass(frozen=True)
class _Layer:
    """One function's options prepared for the search: the K-frontier, sorted by cost, with jump
    pointers along strictly decreasing latencies so the first option fast enough is found in O(log n)."""

    options: tuple[Option, ...]
    cost: tuple[float, ...]
    lat: tuple[float, ...]
    up: tuple[tuple[int, ...], ...]  # up[t][j]: the 2^t-th next strictly faster option after j

    def first_within(self, j: int, limit: float) -> int:
        """The first index >= j whose latency is <= limit (len(options) if none)."""
        m, lat = len(self.lat), self.lat
        if j >= m or lat[j] <= limit:
            return j
        for row in reversed(self.up):
            u = row[j]
            if u < m and lat[u] > limit:
                j = u
        return self.up[0][j]


def _prepare(options: Sequence[Option], k: int) -> _Layer:
    # K-frontier: an option with at least k others at most as costly and at most as slow never changes
    # the top-k costs (each path through it has k distinct paths at least as cheap and as fast).
    kept: list[Option] = []
    fastest_k: list[float] = []  # the k smallest latencies among the cheaper-or-equal options seen
    for o in sorted(options):
        if len(fastest_k) >= k and fastest_k[k - 1] <= o.latency_ms:
            continue
        kept.append(o)
        bisect.insort(fastest_k, o.latency_ms)
        del fastest_k[k:]
    m = len(kept)
    lat = tuple(o.latency_ms for o in kept)
    nxt = [m] * m
    stack: list[int] = []
    for j in range(m):  # next strictly smaller latency
        while stack and lat[j] < lat[stack[-1]]:
            nxt[stack.pop()] = j
        stack.append(j)
    up = [tuple(nxt) + (m,)]
    while len(up) < max(1, m.bit_length()):
        prev = up[-1]
        up.append(tuple(prev[prev[j]] for j in range(m)) + (m,))
    return _Layer(tuple(kept), tuple(o.cost for o in kept), lat, tuple(up))


_PREPARED: Final[dict[tuple[int, int], tuple[Sequence[Option], _Layer]]] = {}


def _layer(options: Sequence[Option], k: int) -> _Layer:
    """Prepared options, cached for immutable option tuples (the planner reuses them across calls)."""
    if not isinstance(options, tuple):
        return _prepare(options, k)
    key = (id(options), k)
    hit = _PREPARED.get(key)
    if hit is not None and hit[0] is options:
        return hit[1]
    if len(_PREPARED) >= 4096:
        _PREPARED.clear()
    layer = _prepare(options, k)
    _PREPARED[key] = (options, layer)  # holding the tuple keeps its id from being reused
    return layer


def astar_top_k(group: Group, budget_ms: float, k: int = 1,
                stats: SearchStats | None = None) -> list[Path]:
    """The ``k`` cheapest feasible paths of ``group`` within ``budget_ms``, cheapest first."""
    n = len(group.functions)
    if n == 0 or k <= 0:
        return []
    stats = stats if stats is not None else SearchStats()
    layers = [_layer(group.options[f], k) for f in group.functions]
    if any(not layer.options for layer in layers):
        return []
    opts = [layer.options for layer in layers]
    preds = group.pred_index()
    fastest = [min(layer.lat) for layer in layers]
    succs: list[list[int]] = [[] for _ in range(n)]
    for i, ps in enumerate(preds):
        for p in ps:
            succs[p].append(i)
    tail = [0.0] * n  # longest all-fastest path after each function
    for i in reversed(range(n)):
        tail[i] = max((fastest[s] + tail[s] for s in succs[i]), default=0.0)
    head = [0.0] * n  # longest all-fastest path before each function
    for i in range(n):
        head[i] = max((head[p] + fastest[p] for p in preds[i]), default=0.0)
    if max(head[i] + fastest[i] for i in range(n)) > budget_ms:
        return []
    # Time limits are exact up to rounding: ``margin`` absorbs it, and an option within ``margin`` of a
    # limit is checked exactly with ``bound`` (the same arithmetic as the brute force's).
    margin = 1e-9 * max(1.0, abs(budget_ms))
    # h[i]: for each remaining function, the cheapest option that fits the budget with everything else
    # at its fastest (admissible and consistent; tighter than the cheapest option when time is short)
    cheapest = []
    for i, layer in enumerate(layers):
        j = layer.first_within(0, budget_ms - head[i] - tail[i] + margin)
        if j == len(layer.options):
            return []
        cheapest.append(layer.cost[j])
    h = list(itertools.accumulate(reversed(cheapest), initial=0.0))[::-1]  # h[i] = sum cheapest[i:]

    def bound(finish: tuple[float, ...]) -> float:
        """Latency if every unassigned function took its fastest option (exact for that completion)."""
        fin = list(finish)
        for i in range(len(fin), n):
            fin.append(max((fin[p] for p in preds[i]), default=0.0) + fastest[i])
        return max(fin)

    def feasible_from(finish: tuple[float, ...], layer: int, j: int):
        """First option index >= j of ``layer`` that passes the time blade, with its finish tuple."""
        start = max((finish[p] for p in preds[layer]), default=0.0)
        lay = layers[layer]
        # the prefix passed the blade with this function at its fastest, so only paths through this
        # function can break the budget: its latency may be at most ``limit``
        limit = budget_ms - start - tail[layer]
        m = len(lay.lat)
        while True:
            found = lay.first_within(j, limit + margin)
            stats.pruned_time += found - j
            if found >= m:
                return None
            fin = finish + (start + lay.lat[found],)
            if lay.lat[found] <= limit - margin or bound(fin) <= budget_ms:
                return found, fin
            stats.pruned_time += 1
            j = found + 1

    # Ties in f are broken by the options' indices (a prefix before its extensions), so complete paths
    # leave the heap in (cost, indices) order whatever the budget: a lower budget that keeps every
    # returned path feasible returns the same paths (what PlanResult.valid_from_ms relies on).
    heap: list = []

    def push(prefix_cost: float, finish: tuple[float, ...], choice: tuple[int, ...], j: int) -> None:
        layer = len(choice)
        found = feasible_from(finish, layer, j)
        if found is None:
            return
        j, fin = found
        g = prefix_cost + layers[layer].cost[j]
        node = choice + (j,)
        heapq.heappush(heap, (g + h[layer + 1], node, g, prefix_cost, finish, fin))

    push(0.0, (), (), 0)
    results: list[Path] = []
    while heap and len(results) < k:
        f, choice, g, prefix_cost, parent_fin, fin = heapq.heappop(heap)
        stats.expanded += 1
        # sibling: same prefix, next option of the last layer (never cheaper: options sorted by cost)
        push(prefix_cost, parent_fin, choice[:-1], choice[-1] + 1)
        if len(choice) == n:
            results.append(Path(g, max(fin), {fn: opts[i][c].config
                                              for i, (fn, c) in enumerate(zip(group.functions, choice))}))
        else:
            push(g, fin, choice, 0)
    # The heap orders by g + h with a consistent h, so the cost blade (g + h no better than the K-th
    # best complete path) never has to fire explicitly: every node left in the heap is that node.
    stats.pruned_cost += len(heap)
    return results


def brute_force_top_k(group: Group, budget_ms: float, k: int = 1, chunk: int = 1 << 22) -> list[Path]:
    """Reference: enumerate every path (vectorised), keep the feasible ones, return the k cheapest."""
    n = len(group.functions)
    if n == 0 or k <= 0:
        return []
    opts = [sorted(group.options[f]) for f in group.functions]
    if any(not o for o in opts):
        return []
    preds = group.pred_index()
    lat = [np.array([o.latency_ms for o in layer]) for layer in opts]
    cost = [np.array([o.cost for o in layer]) for layer in opts]
    sizes = [len(layer) for layer in opts]
    total = int(np.prod(sizes))
    best: list[tuple[float, int]] = []
    digits: tuple[Any, ...]
    for lo in range(0, total, chunk):
        idx = np.arange(lo, min(total, lo + chunk))
        digits = np.unravel_index(idx, sizes)
        c = np.zeros(len(idx))
        finish: list[np.ndarray] = []
        for i in range(n):
            c = c + cost[i][digits[i]]
            start = np.zeros(len(idx))
            for p in preds[i]:
                start = np.maximum(start, finish[p])
            finish.append(start + lat[i][digits[i]])
        latency = np.max(np.stack(finish), axis=0)
        ok = np.nonzero(latency <= budget_ms)[0]
        if ok.size == 0:
            continue
        take = ok[np.argsort(c[ok], kind="stable")[:k]]
        best.extend((float(c[t]), int(idx[t])) for t in take)
        best = sorted(best)[:k]
    out = []
    for total_cost, flat in best:
        digits = np.unravel_index(flat, sizes)
        chosen = [opts[i][int(digits[i])] for i in range(n)]
        out.append(Path(total_cost, longest_path([o.latency_ms for o in chosen], preds),
                        {f: o.config for f, o in zip(group.functions, chosen)}))
    return out
