"""Run an app's functions in-process, in topological order, with the scheduler's data rules.

- entry functions (no predecessor) get the app activation's parameters;
- a function with one predecessor gets that predecessor's result as its parameters;
- a function with several gets an object keyed by predecessor name.

The app's result is its sink's result (or an object keyed by sink name if there are several).
An ``{"error": ...}`` result stops the run, as an application error would.

    PYTHONPATH=. python -m actions.local_run apps/image-classification.json '{"seed": 1}'
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from actions import function_module


@dataclass
class AppRun:
    app: str
    result: dict
    results: dict[str, dict] = field(default_factory=dict)  # every function's result
    latency_ms: dict[str, float] = field(default_factory=dict)
    error: str | None = None  # name of the function that failed, if any


def load_app(app: dict | str | Path) -> dict:
    if isinstance(app, dict):
        return app
    with open(app, encoding="utf-8") as f:
        return json.load(f)


def topological_order(functions: list[str], edges: list[list[str]]) -> list[str]:
    """Kahn's algorithm, stable in the app file's function order; ValueError on a cycle or bad edge."""
    known = set(functions)
    for a, b in edges:
        if a not in known or b not in known:
            raise ValueError(f"edge {a} -> {b} names a function not in the app's functions")
    indegree = {f: 0 for f in functions}
    for _a, b in edges:
        indegree[b] += 1
    order, ready = [], [f for f in functions if indegree[f] == 0]
    while ready:
        f = ready.pop(0)
        order.append(f)
        for a, b in edges:
            if a == f:
                indegree[b] -= 1
                if indegree[b] == 0:
                    ready.append(b)
    if len(order) != len(functions):
        raise ValueError("the app's edges contain a cycle")
    return order


def predecessors(name: str, edges: list[list[str]]) -> list[str]:
    return [a for a, b in edges if b == name]


def function_params(name: str, edges: list[list[str]], params: dict, results: dict[str, dict]) -> dict:
    preds = predecessors(name, edges)
    if not preds:
        return params
    if len(preds) == 1:
        return results[preds[0]]
    return {p: results[p] for p in preds}


def run_app(app: dict | str | Path, params: dict,
            resolve: Callable[[str], Callable[[dict], dict]] | None = None) -> AppRun:
    """Run one activation of `app` with `params`; `resolve(name)` gives a function's main."""
    spec = load_app(app)
    functions, edges = spec["functions"], spec.get("edges", [])
    resolve = resolve or (lambda name: function_module(name).main)
    run = AppRun(app=spec.get("name", "?"), result={})
    for name in topological_order(functions, edges):
        start = time.perf_counter()
        out = resolve(name)(function_params(name, edges, params, run.results))
        run.latency_ms[name] = (time.perf_counter() - start) * 1000.0
        run.results[name] = out
        if isinstance(out, dict) and "error" in out:
            run.error, run.result = name, out
            return run
    sinks = [f for f in functions if not any(a == f for a, _b in edges)]
    run.result = run.results[sinks[0]] if len(sinks) == 1 else {s: run.results[s] for s in sinks}
    return run


def _shorten(value, limit: int = 80):
    if isinstance(value, dict):
        return {k: _shorten(v, limit) for k, v in value.items()}
    if isinstance(value, list):
        return [_shorten(v, limit) for v in value[:10]]
    if isinstance(value, str) and len(value) > limit:
        return value[:limit] + f"...({len(value)} chars)"
    return value


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m actions.local_run", description=__doc__.split("\n\n")[0])
    ap.add_argument("app", help="app file (apps/<name>.json)")
    ap.add_argument("params", nargs="?", default='{"seed": 0}', help="activation parameters (JSON)")
    ap.add_argument("--full", action="store_true", help="print long strings (images, tensors) in full")
    ns = ap.parse_args(argv)
    run = run_app(ns.app, json.loads(ns.params))
    out = {"app": run.app, "result": run.result if ns.full else _shorten(run.result),
           "latency_ms": {k: round(v, 1) for k, v in run.latency_ms.items()}}
    if run.error:
        out["failed"] = run.error
    print(json.dumps(out, indent=2))
    return 1 if run.error else 0


if __name__ == "__main__":
    sys.exit(main())
