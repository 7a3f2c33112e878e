"""Every process the project starts dies with its parent, and leaves no directory behind.

``esg up`` is stopped with SIGTERM, SIGHUP, Ctrl-C (SIGINT) or ``kill -9`` while it serves: every process it
listed as started (broker, Redis, pouchdb-server, scheduler, agent) and every action worker under them must be gone within
seconds. A parent of a server and an action worker that is killed outright takes them along too, and its
scratch directories are swept by the next start. (This session's pytest is a child subreaper, so orphans
come back to it: ``alive`` does not count their zombies.)
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from invoker_agent import scratch
from tests.leaks import alive, descendants

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.integration, pytest.mark.skipif(not sys.platform.startswith("linux"),
                                                          reason="the parent-death signal is Linux's")]


def _wait_gone(pids: list[int], timeout: float = 30.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = [p for p in pids if alive(p)]
        if not left:
            return []
        time.sleep(0.1)
    return [p for p in pids if alive(p)]


def _read_until(proc: subprocess.Popen, pattern: str, timeout: float) -> str:
    out = ""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            if proc.poll() is not None:
                break
            continue
        out += line
        if re.search(pattern, out):
            return out
    proc.kill()
    raise AssertionError(f"never saw {pattern!r}:\n{out}")


def _scratch_dirs() -> set[Path]:
    return {p for p in Path(tempfile.gettempdir()).glob("esg-*") if (p / scratch.OWNER_FILE).exists()}


def _interruptible() -> None:
    """Ctrl-C's signal as a terminal's foreground job has it. A job a shell starts in the background inherits
    SIGINT ignored (and ``esg up`` then keeps ignoring it, as Unix programs do); a suite run that way must
    still test what Ctrl-C does."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGKILL],
                         ids=lambda s: s.name)
def test_esg_up_leaves_nothing_running(sig):
    before = _scratch_dirs()                             # the session's own servers have theirs
    proc = subprocess.Popen([sys.executable, "-u", "-m", "esg_cli.main", "up", "--nodes", "1", "--requests", "0",
                             "--serve"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)), preexec_fn=_interruptible)
    try:
        out = _read_until(proc, r"serving; call an app", timeout=120)
        logs = Path(re.search(r"^logs: (\S+)", out, re.M).group(1))
        started = [int(p) for p in re.findall(r"pid (\d+)", out) if int(p) != proc.pid]
        assert len(started) == 5, out                    # broker, Redis, pouchdb-server, scheduler, one agent
        family = descendants(proc.pid)
        assert set(started) <= set(family)
        os.kill(proc.pid, sig)
        rc = proc.wait(60)
        assert _wait_gone(family) == [], [f"{p}" for p in family if alive(p)]
        if sig == signal.SIGKILL:
            assert rc == -signal.SIGKILL
            scratch.sweep()                              # what the next start does: the killed run's dirs go
        else:
            assert rc == 128 + sig, out + proc.stdout.read()
        assert not logs.exists()
        assert _scratch_dirs() <= before, "a scratch directory was left"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        proc.stdout.close()


PARENT = textwrap.dedent("""
    import sys, time
    from esg_cli.servers import start_redis
    from invoker_agent.actions import ActionCode
    from invoker_agent.workers import ProcessWorker, WorkerSpec
    import os
    server = start_redis()
    worker = ProcessWorker(WorkerSpec((sorted(os.sched_getaffinity(0))[0],)),
                           ActionCode("/guest/x", "1", "python:3", "def main(a):\\n    return a\\n"))
    worker.start()
    print(server.process.pid, server.workdir, worker.proc.pid, worker.dir, flush=True)
    time.sleep(120)
""")


def test_a_killed_parent_takes_its_server_and_worker_along():
    parent = subprocess.Popen([sys.executable, "-c", PARENT], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                              env=dict(os.environ, PYTHONPATH=str(ROOT)))
    try:
        server_pid, server_dir, worker_pid, worker_dir = parent.stdout.readline().split()
        pids = [int(server_pid), int(worker_pid)]
        assert all(alive(p) for p in pids)
        parent.kill()
        parent.wait(10)
        assert _wait_gone(pids, 15) == []
        # nobody left to remove the server's directory nor the worker's (a sandboxed worker cannot reach
        # it) ... until the next start sweeps them
        assert Path(server_dir).exists() and Path(worker_dir).exists()
        assert {Path(server_dir), Path(worker_dir)} <= set(scratch.sweep())
        assert not Path(server_dir).exists() and not Path(worker_dir).exists()
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait(10)
        parent.stdout.close()
