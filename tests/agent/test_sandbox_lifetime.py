"""A sandboxed worker's processes never outlive whoever started them, whenever in its start that one goes.

``bwrap`` makes the sandbox's first process die with the outer ``bwrap`` only late in that process's
set-up; before that, an outer ``bwrap`` that dies (with its agent, or killed by it) would leave the sandbox
running on its own, or blocked for ever on a signal the outer never sends. Each test kills at many
moments of a start and looks for what is left.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from invoker_agent.actions import ActionCode
from invoker_agent.runtime_client import WorkerStartError
from invoker_agent.sandbox import kill_tree, tree
from invoker_agent.workers import ProcessWorker, WorkerSpec
from tests.leaks import alive, cmdline, descendants

pytestmark = [pytest.mark.timeout(120),
              pytest.mark.skipif(not os.path.exists("/proc/self/ns/user"), reason="needs Linux namespaces")]

ROOT = Path(__file__).resolve().parents[2]
CPU = sorted(os.sched_getaffinity(0))[0]
#: Moments (ms after the start began) at which the starter or the worker is killed, over a sandbox's start.
#: Every millisecond of the first 30 (bwrap's own set-up, where the windows are), then sparser.
MOMENTS_MS = [*range(30), *range(30, 120, 5), 150, 200, 300]

# An agent in miniature: starts one sandboxed Python worker, then waits to be killed.
STARTER = textwrap.dedent(f"""
    import ctypes, signal, time
    ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)    # dies with the holder, should the test time out
    from invoker_agent.sandbox import sandbox
    from invoker_agent.workers import ProcessWorker, WorkerSpec
    sandbox()                                     # the agent's one check of the sandbox, at its start
    worker = ProcessWorker(WorkerSpec(({CPU},)))
    print("starting", flush=True)
    worker.start()
    time.sleep(600)
""")

# Kills the starter ``ms`` after its worker's start began, for each ``ms``, and reports what of its processes is
# left 5 s later. A subreaper, so whatever the starter leaves is re-parented here, not to the test run.
HOLDER = textwrap.dedent("""
    import ctypes, json, os, signal, subprocess, sys, time
    from invoker_agent import scratch
    from tests.leaks import descendants, cmdline, reap
    ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)                 # PR_SET_CHILD_SUBREAPER
    ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)     # dies with the test, should it time out
    left = {}
    for ms in json.loads(sys.argv[2]):
        starter = subprocess.Popen([sys.executable, "-c", sys.argv[1]], stdout=subprocess.PIPE)
        if starter.stdout.readline() != b"starting\\n":     # the start begins now
            sys.exit(f"the starter failed before its worker's start (exit code {starter.wait()})")
        end = time.perf_counter() + ms / 1000
        while time.perf_counter() < end:
            pass
        starter.kill()
        starter.wait()
        deadline = time.monotonic() + 5
        while descendants(os.getpid()) and time.monotonic() < deadline:
            reap()
            time.sleep(0.02)
        still = descendants(os.getpid())
        if still:
            left[ms] = [cmdline(p)[:80] for p in still]
            for p in still:
                os.kill(p, signal.SIGKILL)
            time.sleep(0.1)
            reap()
    scratch.sweep()                                   # as the next agent's start does: the killed ones' directories
    print(json.dumps(left))
""")


def test_a_worker_whose_agent_dies_at_any_moment_of_its_start_leaves_nothing_running():
    out = subprocess.run([sys.executable, "-c", HOLDER, STARTER, json.dumps(MOMENTS_MS)], capture_output=True,
                         text=True, timeout=110, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    left = json.loads(out.stdout.strip().splitlines()[-1])
    assert left == {}, f"processes left running after the starter was killed at (ms): {left}"


def _start_in_background(worker: ProcessWorker) -> threading.Thread:
    def start() -> None:
        try:
            worker.start()
        except WorkerStartError:
            pass                                    # killed while it started: what the test does
    t = threading.Thread(target=start, daemon=True)
    t.start()
    return t


def test_a_worker_killed_at_any_moment_of_its_start_leaves_nothing_running():
    # the lifeline stays open until each check is done: killing the tree alone must leave nothing
    before = set(descendants(os.getpid()))
    left = {}
    for ms in MOMENTS_MS:
        worker = ProcessWorker(WorkerSpec((CPU,)))
        thread = _start_in_background(worker)
        while worker.proc is None and thread.is_alive():
            time.sleep(0.0005)
        assert worker.proc is not None, worker.log_tail()
        end = time.perf_counter() + ms / 1000
        while time.perf_counter() < end:
            pass
        kill_tree(worker.proc.pid)
        worker.proc.wait(timeout=10)
        deadline = time.monotonic() + 3
        while (still := set(descendants(os.getpid())) - before) and time.monotonic() < deadline:
            time.sleep(0.02)
        if still:
            left[ms] = [cmdline(p)[:80] for p in still]
            for p in still:
                os.kill(p, signal.SIGKILL)
        worker.kill()
        thread.join(timeout=30)
    assert left == {}, f"processes left running after the worker was killed at (ms): {left}"


@pytest.mark.parametrize("kind", ["python:3", pytest.param("nodejs:20", marks=pytest.mark.skipif(
    shutil.which("node") is None, reason="needs Node.js"))])
def test_a_runtime_whose_lifeline_closes_exits_with_its_sandbox(kind):
    # the agent (this process) lives on and kills nothing: only the closed lifeline can end the worker
    worker = ProcessWorker(WorkerSpec((CPU,)), ActionCode("/guest/a", "1", kind, ""))
    worker.start()
    try:
        pids = tree(worker.proc.pid)
        assert len(pids) == 3 and worker.alive()         # outer bwrap, the sandbox's init, the runtime
        os.close(worker._lifeline)
        worker._lifeline = None
        assert worker.proc.wait(timeout=10) is not None
        deadline = time.monotonic() + 5
        while any(alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not any(alive(p) for p in pids)
    finally:
        worker.kill()
