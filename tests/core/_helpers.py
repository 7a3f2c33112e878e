"""Shared builders for the core tests: apps, profile tables on disk, independent longest paths."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

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
