"""The end-of-run check (tests/leaks.py) finds what a test leaves behind: it can fail."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest

from tests.leaks import Span, Watch, alive, descendants, now_s

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def test_an_orphaned_grandchild_is_still_found(tmp_path):
    # the shell exits at once; its background sleep is orphaned and re-parented to the pytest process
    out = subprocess.run(["sh", "-c", "sleep 60 >/dev/null 2>&1 & echo $!"], capture_output=True, text=True,
                         check=True)
    orphan = int(out.stdout.strip())
    try:
        assert alive(orphan)
        assert orphan in descendants(os.getpid())
        leaks = Watch(tmp_path).check(grace_s=0.2)
        assert any(f"pid {orphan}:" in p and "sleep 60" in p for p in leaks.processes), leaks
    finally:
        os.kill(orphan, 9)
    deadline = time.monotonic() + 5
    while alive(orphan) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(orphan)            # a killed orphan is reaped, not left as a zombie
    assert orphan not in descendants(os.getpid())


def test_a_listening_port_and_a_left_file_are_found(tmp_path):
    watch = Watch.start(tmp_path)
    (tmp_path / "esg-action-x").mkdir()
    (tmp_path / "pytest-of-someone").mkdir()           # pytest's own: not a leak
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        leaks = watch.check(grace_s=0)
        assert any(line.startswith(f"{port} ") for line in leaks.ports), leaks
    assert leaks.paths == [f"{tmp_path / 'esg-action-x'} []"]
    assert not any(line.startswith(f"{port} ") for line in watch.check(grace_s=0).ports)


def test_a_process_left_behind_is_reported_with_the_test_that_started_it(tmp_path):
    watch = Watch(tmp_path)
    watch.spans.append(Span("tests/a.py::earlier", now_s() - 60, now_s() - 30))
    start = now_s()
    proc = subprocess.Popen(["sleep", "60"])
    try:
        time.sleep(0.05)
        watch.spans.append(Span("tests/b.py::starts_it", start, now_s()))
        watch.spans.append(Span("tests/c.py::later", now_s() + 30, now_s() + 60))
        leaks = watch.check(grace_s=0)
        line = next(p for p in leaks.processes if f"pid {proc.pid}:" in p)
        assert line.endswith("(started in tests/b.py::starts_it)"), line
        watch.spans[1:2] = []                           # no span holds it: the last test begun before it
        line = next(p for p in watch.check(grace_s=0).processes if f"pid {proc.pid}:" in p)
        assert line.endswith("(started after tests/a.py::earlier)"), line
    finally:
        proc.kill()
        proc.wait()
