"""Scratch directories that name their owner, and the sweep that removes those whose owner is gone.

A local server's directory (its log, its working files) and an action worker's (its log, the action's
temporary files) are removed when the server or worker is stopped. When the process that started it is
killed outright (``kill -9``), the server or worker itself still stops (its parent-death signal,
:mod:`invoker_agent.lifetime`) but nobody may be left to remove the directory: a worker whose agent died
between making the directory and starting the process never runs to remove its own. So each
such directory records its owner (pid and process start time) in :data:`OWNER_FILE`, and the next
:func:`sweep` -- run whenever a new one is made -- removes those whose owner no longer runs.
Directories without that file, and those of live processes, are never touched.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

OWNER_FILE = ".esg-owner"
PREFIX = "esg-"


def _start_time(pid: int) -> str | None:
    """The start time of ``pid`` in clock ticks since boot (``/proc/PID/stat`` field 22), or None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[-1].split()[19]


def _owner_alive(directory: Path) -> bool:
    try:
        pid_text, _, started = (directory / OWNER_FILE).read_text().partition(" ")
        pid = int(pid_text)
    except (OSError, ValueError):
        return True  # not ours to judge
    current = _start_time(pid)
    if current is None:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return not Path("/proc").is_dir()  # no /proc to compare start times: trust the pid
    return current == started.strip()


def make(prefix: str) -> Path:
    """A new ``esg-<prefix>...`` directory in the temp directory, owned by this process."""
    sweep()
    path = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{prefix}"))
    (path / OWNER_FILE).write_text(f"{os.getpid()} {_start_time(os.getpid()) or ''}")
    return path


def sweep(root: str | os.PathLike | None = None) -> list[Path]:
    """Remove the scratch directories (with an owner file) whose owner no longer runs; return them."""
    base = Path(root or tempfile.gettempdir())
    gone = []
    try:
        candidates = [p for p in base.iterdir() if p.name.startswith(PREFIX) and (p / OWNER_FILE).is_file()]
    except OSError:
        return gone
    for p in candidates:
        if not _owner_alive(p):
            shutil.rmtree(p, ignore_errors=True)
            gone.append(p)
    return gone
