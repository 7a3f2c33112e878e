"""The nesting limit on JSON from outside is one rule, in :mod:`esg.nesting`, used by every reader."""

from __future__ import annotations

import ast
import json
import random
from pathlib import Path

from esg.nesting import MAX_MESSAGE_NESTING, MAX_NESTING, deeper_than, text_deeper_than

ROOT = Path(__file__).resolve().parents[2]


def _depth(value) -> int:
    """The definition: levels of arrays and objects, recursively."""
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list | tuple):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


def _value(rng: random.Random, depth: int):
    if depth == 0 or rng.random() < 0.2:
        return rng.choice([1, "x", None, 2.5, True])
    if rng.random() < 0.5:
        return [_value(rng, depth - 1) for _ in range(rng.randint(0, 3))]
    return {f"k{i}": _value(rng, depth - 1) for i in range(rng.randint(0, 3))}


def test_deeper_than_is_the_recursive_depth():
    rng = random.Random(3)
    for _ in range(500):
        value = _value(rng, rng.randint(0, 8))
        limit = rng.randint(0, 8)
        assert deeper_than(value, limit) == (_depth(value) > limit), value


def test_text_deeper_than_is_the_recursive_depth_of_the_parsed_text():
    rng = random.Random(5)
    for _ in range(500):
        value = _value(rng, rng.randint(0, 8))
        if rng.random() < 0.3:   # brackets inside strings count, never change the answer
            value = {"s": "[[{{" * rng.randint(0, 3), "v": value}
        text = json.dumps(value)
        limit = rng.randint(0, 8)
        want = _depth(value) > limit
        assert text_deeper_than(text, value, limit) == want, (text, limit)
        assert text_deeper_than(text.encode(), value, limit) == want, (text, limit)


def test_text_deeper_than_skips_the_walk_when_the_text_has_few_brackets(monkeypatch):
    import esg.nesting as nesting
    walks = []
    monkeypatch.setattr(nesting, "deeper_than", lambda v, limit=MAX_NESTING: walks.append(v) or False)
    value = {"a": [1, {"b": 2}], "s": "x"}
    assert not nesting.text_deeper_than(json.dumps(value), value, 3) and walks == []
    assert not nesting.text_deeper_than(json.dumps(value), value, 2) and walks == [value]


def test_deeper_than_takes_values_past_the_recursion_limit():
    value: object = 1
    for _ in range(5000):
        value = [value]
    assert deeper_than(value) and deeper_than(value, 4999) and not deeper_than(value, 5000)
    assert MAX_MESSAGE_NESTING > MAX_NESTING


def test_no_other_module_defines_the_limit():
    found = []
    for top in sorted(ROOT.iterdir()):
        if not top.is_dir() or top.name.startswith(".") or top.name in ("tests", "node_modules"):
            continue
        for path in sorted(top.rglob("*.py")):
            if path == ROOT / "esg" / "nesting.py":
                continue
            for node in ast.parse(path.read_text(encoding="utf-8")).body:
                targets = (node.targets if isinstance(node, ast.Assign)
                           else [node.target] if isinstance(node, ast.AnnAssign) else [])
                names = [t.id for t in targets if isinstance(t, ast.Name)]
                if isinstance(node, ast.FunctionDef):
                    names.append(node.name)
                found += [f"{path.relative_to(ROOT)}:{node.lineno}: {n}" for n in names
                          if n in ("MAX_NESTING", "MAX_MESSAGE_NESTING", "deeper_than")]
    assert found == []
