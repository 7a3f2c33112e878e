"""A stop signal is acted on outside the signal handler, and a stop that hangs is cut short.

Each case runs in a process of its own (signal handlers belong to the main thread of a process)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(body: str, timeout: float = 20) -> subprocess.CompletedProcess:
    code = "import os, signal, threading, time\nfrom esg_cli.stop_signals import StopSignals\n" + textwrap.dedent(body)
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def test_a_signal_that_arrives_while_the_main_thread_holds_the_stop_lock_still_stops():
    # the stop takes a lock the main thread holds when the signal comes: a handler that called it would wait
    # for its own thread forever
    done = _run("""
        lock, stopped = threading.Lock(), threading.Event()
        def stop(signum):
            with lock:
                stopped.set()
        StopSignals(stop, [signal.SIGTERM]).install()
        with lock:
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):       # the handler runs between these instructions, the lock held
                pass
            time.sleep(0.2)
        print("stopped" if stopped.wait(5) else "not stopped")
    """)
    assert (done.returncode, done.stdout.strip()) == (0, "stopped"), done.stderr


def test_each_signal_reaches_stop_with_its_number():
    done = _run("""
        seen = []
        StopSignals(seen.append, [signal.SIGTERM, signal.SIGHUP]).install()
        os.kill(os.getpid(), signal.SIGHUP)
        time.sleep(0.2)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.2)
        print(seen)
    """)
    assert done.stdout.strip() == "[1, 15]", done.stderr


def test_a_stop_that_hangs_is_cut_short_after_the_grace():
    t0 = time.monotonic()
    done = _run("""
        StopSignals(lambda signum: time.sleep(60), [signal.SIGTERM], 0.5, "svc: did not stop").install()
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(30)
        print("still here")
    """)
    assert done.returncode == 1 and done.stdout == "", done
    assert done.stderr.strip() == "svc: did not stop"
    assert time.monotonic() - t0 < 15


def test_a_stop_within_the_grace_ends_normally():
    done = _run("""
        stopped = threading.Event()
        StopSignals(lambda signum: stopped.set(), [signal.SIGTERM], 0.5, "svc: did not stop").install()
        os.kill(os.getpid(), signal.SIGTERM)
        stopped.wait(5)
        print("clean")
    """)
    assert (done.returncode, done.stdout.strip(), done.stderr) == (0, "clean", "")
