"""Shared builders for the core tests: apps, profile tables on disk, independent longest paths."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from hypothesis import strategies as st

from esg.cost import Prices, config_cost
from esg.model import App, Config
from esg.profiles import Profile, ProfileEntry


def make_profile(function: str, rows: Sequence[tuple[int, int, str | None, float]],
                 gpu_model: str = "A100-40GB") -> Profile:
    return Profile(function, gpu_model,
                   tuple(ProfileEntry(Config(b, v, g), float(lat)) for b, v, g, lat in rows))


def write_profile(directory: Path, function: str, rows: Sequence[tuple[int, int, str | None, float]],
                  gpu_model: str = "A100-40GB", **extra) -> Path:
    data = {"function": function, "gpu_model": gpu_model,
            "configs": [{"batch": b, "vcpus": v, "gpu": g, "latency_ms": lat} for b, v, g, lat in rows],
            "cold_start_ms": 1000, "output_bytes": 100, **extra}
    path = Path(directory) / f"{function}.json"
    path.write_text(json.dumps(data))
    return path


def write_app(path: Path, app: App | Mapping) -> Path:
    data = app.to_dict() if isinstance(app, App) else dict(app)
    Path(path).write_text(json.dumps(data))
    return Path(path)


def dag_latency(functions: Sequence[str], edges: Sequence[tuple[str, str]],
                latency: Mapping[str, float]) -> float:
    """Longest path through the DAG (node weights), by memoised recursion over predecessors."""
    preds: dict[str, list[str]] = {f: [] for f in functions}
    for a, b in edges:
        preds[b].append(a)
    memo: dict[str, float] = {}

    def finish(f: str) -> float:
        if f not in memo:
            memo[f] = max((finish(p) for p in preds[f]), default=0.0) + latency[f]
        return memo[f]

    return max((finish(f) for f in functions), default=0.0)


SLICES_A100 = {None: 0, "1g.5gb": 1, "1g.10gb": 1, "2g.10gb": 2, "3g.20gb": 3, "4g.20gb": 4, "7g.40gb": 7}


def grid_rows(seed: int, base_ms: float, batches=(1, 4), vcpus=(1, 2), gpus=(None, "1g.5gb", "3g.20gb")
              ) -> list[tuple[int, int, str | None, float]]:
    """A shipped-like profile grid: latency grows with batch, shrinks with vCPUs and GPU slices."""
    import random

    rng = random.Random(seed)
    rows = []
    for b in batches:
        for v in vcpus:
            for g in gpus:
                s = SLICES_A100[g]
                speed = v ** 0.6 if g is None else 3.0 * s ** 0.7 * (1 + 0.05 * v)
                lat = base_ms * b ** 0.7 / speed * rng.uniform(0.9, 1.1)
                rows.append((b, v, g, round(lat, 1)))
    return rows


def k_cheapest_costs(app: App, profiles: Mapping[str, Profile], budget: float, k: int,
                     latency_of: Callable[[str, ProfileEntry], float]) -> list[float]:
    """The K cheapest feasible paths' costs, by listing every path: a path is feasible when its longest
    path over ``latency_of`` (the figure a planner plans with) fits ``budget``; its cost is on the
    tables' ``latency_ms``."""
    fs = list(app.functions)
    costs = []
    for entries in itertools.product(*(profiles[f].entries for f in fs)):
        lat = {f: latency_of(f, e) for f, e in zip(fs, entries)}
        if dag_latency(fs, app.edges, lat) <= budget + 1e-9:
            costs.append(sum(config_cost(Prices(), profiles[f].gpu_model, e.config, e.latency_ms)
                             for f, e in zip(fs, entries)))
    return sorted(costs)[:k]


def draw_dag(draw) -> tuple[list[str], tuple[tuple[str, str], ...]]:
    """A random DAG of 2-5 functions (hypothesis): its functions and its edges (each forward pair or not)."""
    n = draw(st.integers(2, 5))
    fs = [f"f{i}" for i in range(n)]
    return fs, tuple((fs[i], fs[j]) for i in range(n) for j in range(i + 1, n) if draw(st.booleans()))


def draw_cells(draw) -> list[tuple[int, int, str | None]]:
    """1-4 distinct (batch, vCPUs, MIG profile) configurations of one function (hypothesis)."""
    m = draw(st.integers(1, 4))
    return draw(st.lists(st.tuples(st.sampled_from([1, 2, 4]), st.sampled_from([1, 2]),
                                   st.sampled_from([None, "1g.5gb", "3g.20gb"])),
                         min_size=m, max_size=m, unique=True))
