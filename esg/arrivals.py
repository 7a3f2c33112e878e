"""Arrivals files: one request a line, ``time_s,app``, so the emulator and a live cluster can be given
the very same requests.

A file starts with the header ``time_s,app``; each line is the request's arrival in seconds from the
start of the run (non-negative, finite, in order) and the app it calls. :func:`parse_arrivals` checks
every line and names the first bad one (:class:`ArrivalsError`); :func:`arrivals_rows` gives the rows
of what :func:`esg.emulator.workload.generate` made (times to the microsecond). The file itself is read
and written by :mod:`esg_files`.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Sequence

from esg.errors import EsgError
from esg.events import Request

HEADER = ["time_s", "app"]


class ArrivalsError(EsgError):
    """An arrivals file is missing, malformed, out of order or names an unknown app."""


def arrivals_rows(requests: Iterable[Request]) -> list[list[str]]:
    """The header and one row per request (in the order given, arrivals sorted)."""
    return [HEADER, *([f"{r.arrival_ms / 1000:.6f}", r.app] for r in requests)]


def parse_arrivals(lines: Iterable[str], source: str, apps: Sequence[str] | None = None) -> list[Request]:
    """The requests of an arrivals file's ``lines`` (ids ``r0``, ``r1``, ... in file order); errors name
    ``source`` and the line. With ``apps``, an app not among them is an error naming its line."""
    try:
        rows = list(csv.reader(lines))
    except csv.Error as exc:
        raise ArrivalsError(f"{source}: not a readable arrivals file ({exc})") from None
    if not rows or [c.strip() for c in rows[0]] != HEADER:
        raise ArrivalsError(f"{source}: line 1 must be the header 'time_s,app'")
    known = set(apps) if apps is not None else None
    out: list[Request] = []
    last = 0.0
    for i, row in enumerate(rows[1:], start=2):
        if not row:
            continue
        if len(row) != 2:
            raise ArrivalsError(f"{source}: line {i}: expected 'time_s,app', got {len(row)} fields")
        try:
            t = float(row[0])
        except ValueError:
            raise ArrivalsError(f"{source}: line {i}: time_s {row[0]!r} is not a number") from None
        if not math.isfinite(t) or t < 0:
            raise ArrivalsError(f"{source}: line {i}: time_s must be a finite number, 0 or more, got {row[0]}")
        if t < last:
            raise ArrivalsError(f"{source}: line {i}: time_s {row[0]} is earlier than the line before")
        app = row[1].strip()
        if not app:
            raise ArrivalsError(f"{source}: line {i}: no app")
        if known is not None and app not in known:
            raise ArrivalsError(f"{source}: line {i}: unknown app {app!r} (known: {', '.join(sorted(known))})")
        last = t
        out.append(Request(f"r{len(out)}", app, t * 1000))
    if not out:
        raise ArrivalsError(f"{source}: no arrivals")
    return out


def span_s(requests: Sequence[Request]) -> float:
    """The time the arrivals cover: up to the last one (at least 1 ms)."""
    return max(requests[-1].arrival_ms / 1000, 0.001) if requests else 0.0
