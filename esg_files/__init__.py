"""The core's files on disk: app files, profile tables, arrivals files and hop samples, read and written.

The core (:mod:`esg`) parses and checks these formats from plain values (:func:`esg.model.app_from_dict`,
:func:`esg.profiles.profile_from_dict`, :func:`esg.arrivals.parse_arrivals`) and never touches a file;
this module is the one place that opens them, for every caller (the ``esg`` command, the scheduler's
metadata, the agent's twin, the profiler, benchmarks and tests). A missing or unreadable file is the
same one-line error the parser raises for a bad field, naming the file.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from esg.arrivals import ArrivalsError, arrivals_rows, parse_arrivals
from esg.errors import AppError, EsgError, ProfileError
from esg.events import Request
from esg.model import App, app_from_dict
from esg.profiles import Profile, profile_from_dict


def _read_json(path: Path, error: type[EsgError], what: str) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise error(f"{path}: no such {what}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise error(f"{path}: not a readable JSON {what} ({exc})") from None
    except RecursionError:
        raise error(f"{path}: not a readable JSON {what} (nested too deeply)") from None


def load_app(path: str | Path) -> App:
    """The app of an app file (``docs/architecture.md`` §6)."""
    path = Path(path)
    return app_from_dict(_read_json(path, AppError, "app file"), str(path))


def load_profile(path: str | Path) -> Profile:
    """The profile table of one file (``docs/architecture.md`` §6)."""
    path = Path(path)
    return profile_from_dict(_read_json(path, ProfileError, "profile table"), str(path))


def load_profiles(directory: str | Path, functions: Iterable[str]) -> dict[str, Profile]:
    """The tables ``<directory>/<f>.json`` for each function; a missing one is named."""
    directory = Path(directory)
    if not directory.is_dir():
        raise ProfileError(f"{directory}: no such profiles directory")
    out: dict[str, Profile] = {}
    for f in functions:
        path = directory / f"{f}.json"
        if not path.exists():
            raise ProfileError(f"function {f!r} has no profile: {path} does not exist")
        prof = load_profile(path)
        if prof.function != f:
            raise ProfileError(f"{path}: field 'function' is {prof.function!r}, expected {f!r}")
        out[f] = prof
    models = {p.gpu_model for p in out.values()}
    if len(models) > 1:
        raise ProfileError(f"profiles in {directory} mix GPU models: {', '.join(sorted(models))}")
    return out


def read_arrivals(path: str | Path, apps: Sequence[str] | None = None) -> list[Request]:
    """The requests of an arrivals file (:mod:`esg.arrivals` says the format and its checks)."""
    path = Path(path)
    try:
        with open(path, newline="") as fh:
            return parse_arrivals(fh, str(path), apps)
    except FileNotFoundError:
        raise ArrivalsError(f"{path}: no such arrivals file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ArrivalsError(f"{path}: not a readable arrivals file ({exc})") from None


def write_arrivals(path: str | Path, requests: Iterable[Request]) -> int:
    """Write ``requests`` as an arrivals file; the number written."""
    rows = arrivals_rows(requests)
    with open(path, "w", newline="") as fh:
        csv.writer(fh, lineterminator="\n").writerows(rows)
    return len(rows) - 1


def read_hop_samples(path: str | Path) -> tuple[float, ...]:
    """The hops of a hop-samples file (``esg emulate --hop-samples``): one per line, in milliseconds, each
    a finite number, 0 or more; blank lines and lines starting with ``#`` are skipped; at least one."""
    path = Path(path)
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        raise EsgError(f"{path}: no such hop-samples file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise EsgError(f"{path}: not a readable hop-samples file ({exc})") from None
    out = []
    for n, line in enumerate(lines, 1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        try:
            value = float(text)
        except ValueError:
            raise EsgError(f"{path}:{n}: {text[:40]!r} is not a number of milliseconds") from None
        if not math.isfinite(value) or value < 0:
            raise EsgError(f"{path}:{n}: a hop must be a finite number, 0 or more, got {text[:40]}")
        out.append(value)
    if not out:
        raise EsgError(f"{path}: no hop samples (one number of milliseconds per line)")
    return tuple(out)


def write_hop_samples(path: str | Path, hops_ms: Iterable[float], comment: str = "") -> int:
    """Write a hop-samples file (:func:`read_hop_samples`); the number written."""
    values = list(hops_ms)
    with open(path, "w") as fh:
        if comment:
            fh.write(f"# {comment}\n")
        fh.writelines(f"{v:.3f}\n" for v in values)
    return len(values)
