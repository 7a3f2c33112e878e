"""Arrivals files: one request a line, ``time_s,app``, so the emulator and a live cluster can be given
the very same requests.

A file starts with the header ``time_s,app``; each line is the request's arrival in seconds from the
start of the run (non-negative, finite, in order) and the app it calls. :func:`read_arrivals` checks
every line and names the first bad one (:class:`ArrivalsError`); :func:`write_arrivals` writes what
:func:`esg.emulator.workload.generate` made (times to the microsecond).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Sequence
from pathlib import Path

from esg.errors import EsgError
from esg.events import Request

HEADER = ["time_s", "app"]


class ArrivalsError(EsgError):
    """An arrivals file is missing, malformed, out of order or names an unknown app."""


def write_arrivals(path: str | Path, requests: Iterable[Request]) -> int:
    """Write ``requests`` (sorted by arrival); the number written."""
    n = 0
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(HEADER)
        for r in requests:
            w.writerow([f"{r.arrival_ms / 1000:.6f}", r.app])
            n += 1
    return n


def read_arrivals(path: str | Path, apps: Sequence[str] | None = None) -> list[Request]:
    """The requests of an arrivals file (ids ``r0``, ``r1``, ... in file order); with ``apps``, an app
    not among them is an error naming its line."""
    path = Path(path)
    try:
        with open(path, newline="") as fh:
            rows = list(csv.reader(fh))
    except FileNotFoundError:
        raise ArrivalsError(f"{path}: no such arrivals file") from None
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise ArrivalsError(f"{path}: not a readable arrivals file ({exc})") from None
    if not rows or [c.strip() for c in rows[0]] != HEADER:
        raise ArrivalsError(f"{path}: line 1 must be the header 'time_s,app'")
    known = set(apps) if apps is not None else None
    out: list[Request] = []
    last = 0.0
    for i, row in enumerate(rows[1:], start=2):
        if not row:
            continue
        if len(row) != 2:
            raise ArrivalsError(f"{path}: line {i}: expected 'time_s,app', got {len(row)} fields")
        try:
            t = float(row[0])
        except ValueError:
            raise ArrivalsError(f"{path}: line {i}: time_s {row[0]!r} is not a number") from None
        if not math.isfinite(t) or t < 0:
            raise ArrivalsError(f"{path}: line {i}: time_s must be a finite number, 0 or more, got {row[0]}")
        if t < last:
            raise ArrivalsError(f"{path}: line {i}: time_s {row[0]} is earlier than the line before")
        app = row[1].strip()
        if not app:
            raise ArrivalsError(f"{path}: line {i}: no app")
        if known is not None and app not in known:
            raise ArrivalsError(f"{path}: line {i}: unknown app {app!r} (known: {', '.join(sorted(known))})")
        last = t
        out.append(Request(f"r{len(out)}", app, t * 1000))
    if not out:
        raise ArrivalsError(f"{path}: no arrivals")
    return out


def span_s(requests: Sequence[Request]) -> float:
    """The time the arrivals cover: up to the last one (at least 1 ms)."""
    return max(requests[-1].arrival_ms / 1000, 0.001) if requests else 0.0
