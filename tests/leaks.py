"""What a test run leaves behind: child processes, listening ports, temporary directories.

``tests/conftest.py`` uses this to fail the run when anything outlives it:

* the pytest process becomes a *child subreaper* (``prctl(PR_SET_CHILD_SUBREAPER)``), so a process a
  test started and lost track of -- an orphan that Linux would otherwise hand to PID 1 -- is re-parented
  to pytest and is found among its descendants at the end;
* the whole run gets a private temporary directory (``TMPDIR``, inherited by every child), so anything
  left in it besides pytest's own ``pytest-of-*`` directories was left by the project;
* listening TCP sockets are read from ``/proc/net/tcp{,6}`` and matched to the descendants' and pytest's
  own file descriptors;
* every test's time span (set-up and tear-down included) is kept, so a process left behind is reported
  with the test it was started in, read from its start time in ``/proc/PID/stat``.

Linux only (``/proc``); elsewhere the checks find nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36
#: Files other programs put in the temporary directory, one fixed name each (they do not pile up):
#: ``.ses`` is onnxruntime's telemetry session id, written when it is imported.
NOT_OURS = frozenset({".ses"})


def become_subreaper() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` from the third (the state) on, or None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[-1].split()


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, ppid) of ``pid`` from ``/proc/PID/stat``, or None when it is gone."""
    fields = _fields(pid)
    return None if fields is None else (fields[0], int(fields[1]))


def now_s() -> float:
    """Seconds since boot, the clock ``/proc/PID/stat`` gives a process's start time in."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def started_s(pid: int) -> float | None:
    """When ``pid`` started, in seconds since boot (field 22 of ``/proc/PID/stat``), or None when it is
    gone."""
    fields = _fields(pid)
    return None if fields is None else int(fields[19]) / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Span:
    """One test's time span in seconds since boot."""

    nodeid: str
    start_s: float
    end_s: float


def started_in(pid: int, spans: list[Span]) -> str:
    """Which test ``pid`` was started in: the span holding its start time (the clock ticks in 10 ms
    steps, so a start on a boundary may name the test before or after), or the last test that began
    before it."""
    t = started_s(pid)
    if t is None:
        return "gone"
    tick = 1 / os.sysconf("SC_CLK_TCK")
    inside = [s.nodeid for s in spans if s.start_s - tick <= t <= s.end_s + tick]
    if inside:
        return "started in " + " or ".join(inside)
    before = [s for s in spans if s.start_s <= t]
    return f"started after {before[-1].nodeid}" if before else "started before the first test"


def alive(pid: int) -> bool:
    """``pid`` runs (a zombie -- exited, not yet reaped -- does not count)."""
    st = _stat(pid)
    return st is not None and st[0] not in ("Z", "X")


def descendants(root: int) -> list[int]:
    """Live descendants of ``root``, from ``/proc``."""
    children: dict[int, list[int]] = {}
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return []
    for pid in pids:
        st = _stat(pid)
        if st is not None and st[0] not in ("Z", "X"):
            children.setdefault(st[1], []).append(pid)
    out, stack = [], [root]
    while stack:
        for child in children.get(stack.pop(), []):
            out.append(child)
            stack.append(child)
    return out


def reap() -> None:
    """Collect exited children (orphans re-parented to us included), so they stop showing as zombies."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"


def _listening_inodes() -> dict[int, int]:
    """socket inode -> port of every TCP socket in LISTEN state."""
    out: dict[int, int] = {}
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(name).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if len(f) > 9 and f[3] == "0A":
                out[int(f[9])] = int(f[1].rsplit(":", 1)[1], 16)
    return out


def listening_ports(pids: list[int]) -> dict[int, list[int]]:
    """pid -> ports it listens on."""
    inodes = _listening_inodes()
    out: dict[int, list[int]] = {}
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                port = inodes.get(int(target[8:-1]))
                if port is not None:
                    out.setdefault(pid, []).append(port)
    return out


def _describe(path: Path) -> str:
    """The path, and for a directory what it holds (a worker's log says which action it ran)."""
    if not path.is_dir():
        return str(path)
    inside = sorted(p.name for p in path.iterdir())[:8]
    log = path / "action.log"
    tail = log.read_text(errors="replace")[-200:].replace("\n", " | ") if log.is_file() else ""
    return f"{path} {inside}" + (f" log: {tail}" if tail else "")


@dataclass
class Leaks:
    processes: list[str] = field(default_factory=list)
    ports: list[str] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.processes or self.ports or self.paths)

    def report(self) -> list[str]:
        lines = []
        for title, items in (("child processes still running", self.processes),
                             ("ports still listening", self.ports),
                             ("temporary files and directories left", self.paths)):
            if items:
                lines.append(f"{title}:")
                lines += [f"  {i}" for i in items]
        return lines


@dataclass
class Watch:
    """Started at the beginning of the run; :meth:`check` at its end lists what was left behind."""

    tmp_root: Path
    own_ports: set[int] = field(default_factory=set)
    failed: bool = False
    spans: list[Span] = field(default_factory=list)

    @classmethod
    def start(cls, tmp_root: Path) -> Watch:
        become_subreaper()
        return cls(tmp_root, set(listening_ports([os.getpid()]).get(os.getpid(), [])))

    def check(self, grace_s: float = 10.0) -> Leaks:
        me = os.getpid()
        deadline = time.monotonic() + grace_s
        while True:                                  # children being stopped get a moment to exit
            reap()
            kids = descendants(me)
            if not kids or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        leaks = Leaks()
        leaks.processes = [f"pid {p}: {cmdline(p)[:200]} ({started_in(p, self.spans)})" for p in kids]
        ports = listening_ports([me, *kids])
        leaks.ports = [f"{port} (pid {pid}{', this pytest process' if pid == me else ''}: {cmdline(pid)[:120]})"
                       for pid, ps in ports.items() for port in ps
                       if not (pid == me and port in self.own_ports)]
        try:
            entries = sorted(self.tmp_root.iterdir())
        except OSError:
            entries = []
        leaks.paths = [_describe(p) for p in entries if not p.name.startswith("pytest-of-") and p.name not in NOT_OURS]
        return leaks

    def clean_up(self) -> None:
        """Stop what leaked (so one bad run does not burden the machine)."""
        for pid in descendants(os.getpid()):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.2)
        reap()
