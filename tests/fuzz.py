"""Mutated real messages for the fuzz tests: every consumer of the project gets them (hypothesis).

:func:`mutated` takes a real message (a JSON object as the project sends it) and draws one mutation of
it, as bytes on the wire: truncated, a field of the wrong type, a field dropped, unknown fields added,
a huge field, a deeply nested field, bytes that are not UTF-8 (or the message in another encoding), a
value that is not an object, or random bytes. :data:`FUZZ` are the settings every fuzz test uses:
deterministic (derandomized, no example database), bounded, no deadline (the broker-backed ones wait
on real servers).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

KINDS = ("truncated", "wrong type", "dropped field", "unknown fields", "huge", "deeply nested",
         "not UTF-8", "other encoding", "not an object", "random bytes")

FUZZ = settings(max_examples=300, derandomize=True, database=None, deadline=None, print_blob=False,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                       HealthCheck.data_too_large, HealthCheck.large_base_example])

_scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                     st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=12))
json_values = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=8)

_NEST = "\u0000nest\u0000"


def paths(value: Any, prefix: tuple = ()) -> Iterator[tuple]:
    """Every path (keys and indexes) to a value inside ``value``, the root included."""
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from paths(v, (*prefix, i))


def get(value: Any, path: tuple) -> Any:
    for p in path:
        value = value[p]
    return value


def _replace(base: Any, path: tuple, new: Any) -> Any:
    if not path:
        return new
    out = copy.deepcopy(base)
    get(out, path[:-1])[path[-1]] = new
    return out


def encode(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def _json_type(v: Any) -> str:
    return "bool" if isinstance(v, bool) else "num" if isinstance(v, int | float) else type(v).__name__


@st.composite
def mutated(draw, base: dict) -> bytes:
    """One mutation of the real message ``base``, as the bytes a consumer would read."""
    kind = draw(st.sampled_from(KINDS))
    raw = encode(base)
    inner = list(paths(base))[1:]
    if kind == "truncated":
        return raw[:draw(st.integers(0, len(raw) - 1))]
    if kind == "wrong type":
        path = draw(st.sampled_from(inner))
        old = _json_type(get(base, path))
        return encode(_replace(base, path, draw(json_values.filter(lambda v: _json_type(v) != old))))
    if kind == "dropped field":
        keyed = [p for p in inner if isinstance(get(base, p[:-1]), dict)]
        path = draw(st.sampled_from(keyed))
        out = copy.deepcopy(base)
        del get(out, path[:-1])[path[-1]]
        return encode(out)
    if kind == "unknown fields":
        objects = [p for p in paths(base) if isinstance(get(base, p), dict)]
        path = draw(st.sampled_from(objects))
        extra = draw(st.dictionaries(st.text(min_size=1, max_size=8), json_values, min_size=1, max_size=3))
        return encode(_replace(base, path, {**extra, **get(base, path)}))
    if kind == "huge":
        path = draw(st.sampled_from(inner))
        size = draw(st.integers(100_000, 400_000))
        return encode(_replace(base, path, draw(st.sampled_from(["x" * size, list(range(size // 8))]))))
    if kind == "deeply nested":
        path = draw(st.sampled_from(inner))
        depth = draw(st.integers(200, 20_000))
        return encode(_replace(base, path, _NEST)).replace(
            json.dumps(_NEST).encode(), b"[" * depth + b"]" * depth)
    if kind == "not UTF-8":
        at = draw(st.integers(0, len(raw)))
        bad = draw(st.sampled_from([b"\xff", b"\xfe\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\x80", b"\xf8\x88\x80"]))
        return raw[:at] + bad + raw[at:]
    if kind == "other encoding":
        text = json.dumps(base, ensure_ascii=False)
        return text.encode(draw(st.sampled_from(["utf-16", "utf-16-le", "utf-32", "latin-1"])), "replace")
    if kind == "not an object":
        return encode(draw(json_values.filter(lambda v: not isinstance(v, dict))))
    return draw(st.binary(max_size=300))
