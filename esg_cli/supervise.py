"""``esg up`` keeps its children running: one that exits while the cluster runs is restarted and reported.

A local cluster should behave as a deployment's restart policy does: a scheduler or an agent that dies
(``kill -9``, a crash) is started again with the same command and environment, and the cluster goes on
serving -- a standby scheduler takes the lead meanwhile, a restarted agent finds its unanswered
dispatches. Each restart is printed (which child, its exit status, its new pid). One that keeps dying
(:data:`MAX_RESTARTS` within :data:`WINDOW_S`) is not restarted again: :attr:`Supervisor.failed` says why,
and ``esg up`` stops with a failure.

The supervisor's thread starts the new processes, so it lives as long as they should: a child's
parent-death signal fires when the thread that started it ends (:mod:`invoker_agent.lifetime`).
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

MAX_RESTARTS = 5
WINDOW_S = 60.0
POLL_S = 0.2


@dataclass
class Child:
    """A supervised process: how to start it again, and its current process."""

    cmd: list[str]
    env: dict[str, str]
    log: Path
    proc: subprocess.Popen
    restarts: list[float] = field(default_factory=list)
    given_up: bool = False


class Supervisor:
    def __init__(self, children: dict[str, Child], procs: dict[str, subprocess.Popen],
                 spawn: Callable[[list[str], dict[str, str], Path], subprocess.Popen], out=sys.stderr) -> None:
        self.children = children
        self.procs = procs
        """Name -> current process, kept up to date (what ``esg up`` stops on the way out)."""
        self.spawn = spawn
        self.out = out
        self.failed: str | None = None
        self.restarted = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._watch, name="esg-up-supervisor", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop restarting (before the children are stopped on the way out)."""
        with self._lock:
            self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def _watch(self) -> None:
        while not self._stop.wait(POLL_S):
            for name, child in self.children.items():
                if child.proc.poll() is not None:
                    self._restart(name, child)

    def _restart(self, name: str, child: Child) -> None:
        now = time.monotonic()
        child.restarts = [t for t in child.restarts if now - t < WINDOW_S]
        status = child.proc.returncode
        with self._lock:
            if self._stop.is_set():
                return
            if child.given_up:
                return
            if len(child.restarts) >= MAX_RESTARTS:
                child.given_up = True
                if self.failed is None:
                    self.failed = (f"{name} exited {len(child.restarts) + 1} times within {WINDOW_S:.0f} s "
                                   f"(last status {status}); see {child.log}")
                    print(f"esg up: {self.failed}; not restarting it", file=self.out, flush=True)
                return
            print(f"esg up: {name} (pid {child.proc.pid}) exited with status {status}; restarting it",
                  file=self.out, flush=True)
            child.proc = self.spawn(child.cmd, child.env, child.log)
            self.procs[name] = child.proc
            child.restarts.append(now)
            self.restarted += 1
        print(f"esg up: {name} restarted (pid {child.proc.pid})", file=self.out, flush=True)
