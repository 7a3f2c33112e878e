"""End to end: ``esg up`` with the real scheduler, real agents, real actions and the real broker/Redis."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from esg_cli.openwhisk_standin import GUEST_KEY, OpenWhiskStandIn

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.integration


def test_every_app_answers_through_the_whole_stack(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "esg_cli.main", "up", "--nodes", "2", "--requests", "2", "--logs", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=420)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = {m.group(1): (int(m.group(2)), int(m.group(3)))
            for m in re.finditer(r"^(\S+)\s+(\d+)/(\d+)\s", proc.stdout, re.M)}
    assert set(rows) == {"image-classification", "depth-recognition", "background-elimination",
                         "expanded-image-classification"}
    assert all(ok == total == 2 for ok, total in rows.values()), proc.stdout
    assert "2 invoker agent(s) healthy" in proc.stdout
    # the scheduler really dispatched to both kinds of process, and no key reached a log
    logs = "".join(p.read_text(errors="replace") for p in tmp_path.glob("*.log"))
    assert GUEST_KEY.split(":")[1] not in logs


def test_up_names_bad_arguments(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "esg_cli.main", "up", "--fake-gpu", "B200-9GB"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "B200-9GB" in proc.stderr and "Traceback" not in proc.stderr


def test_standin_routes_invokes_to_the_controller_like_openwhisk():
    calls = []

    def invoker(inv):
        calls.append((inv.fqn, inv.params, inv.blocking, inv.user.namespace))
        if not inv.blocking:
            return "a" * 32
        return {"activationId": "b" * 32, "response": {"statusCode": 0, "result": {"echo": inv.params}}}

    with OpenWhiskStandIn(invoker=invoker) as api:
        user, key = GUEST_KEY.split(":")
        url = f"{api.url}/api/v1/namespaces/_/actions/hello"
        assert requests.post(url, json={}, auth=(user, key), timeout=5).status_code == 404
        api.put_action("guest/hello", {"exec": {"kind": "python:3", "code": "def main(a): return a"}})
        r = requests.post(url + "?blocking=true&result=true", json={"x": 1}, auth=(user, key), timeout=5)
        assert r.status_code == 200 and r.json() == {"echo": {"x": 1}}
        r = requests.post(url, json={"x": 2}, auth=(user, key), timeout=5)
        assert r.status_code == 202 and r.json() == {"activationId": "a" * 32}
        assert requests.post(url, json={}, auth=(user, "wrong"), timeout=5).status_code == 401
    assert calls == [("guest/hello", {"x": 1}, True, "guest"), ("guest/hello", {"x": 2}, False, "guest")]


def test_up_says_when_its_activation_store_dies_and_stops(tmp_path):
    """A store that dies is never served around silently: ``esg up --serve`` names it and stops."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "esg_cli.main", "up", "--nodes", "1", "--requests", "0", "--serve",
         "--logs", str(tmp_path)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("serving"):
                break
        pid = next(int(m.group(1)) for ln in lines if (m := re.search(r"pouchdb-server.*pid (\d+)", ln)))
        os.kill(pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 1, "".join(lines) + out + err
    assert "pouchdb-server (the activation store) exited with status -9" in err
    assert "esg up: stopping everything: the cluster cannot serve without it" in err
