"""``esg up --schedulers 2``: a child killed outright (``kill -9``) is restarted and reported, and the cluster
keeps serving -- the standby scheduler takes over from a killed leader, a killed agent comes back -- with
every call answered once and no activation run twice."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import requests

from esg_cli.openwhisk_standin import GUEST_KEY
from invoker_agent.lifetime import die_with_parent

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]
PLAIN = "def main(a):\n    return {'i': a.get('i')}\n"


def started(out: Path, what: str) -> int:
    """The pid ``esg up`` printed for ``what`` (e.g. ``esg agent node0``)."""
    return int(re.search(rf"{re.escape(what)}\s+pid (\d+)", out.read_text()).group(1))


def leader(logs: Path) -> tuple[str, int]:
    """The leading scheduler's name and epoch, from ``esg status`` as the observer user."""
    env = {**os.environ, "ESG_REDIS_FILE": str(logs / "redis" / "observer" / "redis.url"), "PYTHONPATH": str(ROOT)}
    env.pop("ESG_REDIS", None)
    out = subprocess.run([sys.executable, "-m", "esg_cli.main", "status", "--json"], env=env, cwd=ROOT,
                         capture_output=True, text=True, timeout=60, check=True)
    sched = json.loads(out.stdout)["schedulers"]
    return sched["leader"].split("/")[0], sched["epoch"]


def test_a_child_killed_outright_is_restarted_and_the_cluster_keeps_serving(tmp_path):
    apps = tmp_path / "apps"
    apps.mkdir()
    shutil.copy(ROOT / "apps" / "image-classification.json", apps)
    logs = tmp_path / "logs"
    out = tmp_path / "up.out"
    with open(out, "wb") as f:
        up = subprocess.Popen([sys.executable, "-m", "esg_cli.main", "up", "--nodes", "1", "--schedulers", "2",
                               "--requests", "0", "--serve", "--apps", str(apps), "--logs", str(logs)],
                              cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                              preexec_fn=die_with_parent())
    try:
        deadline = time.monotonic() + 300
        while "serving;" not in out.read_text():
            assert up.poll() is None and time.monotonic() < deadline, out.read_text()
            time.sleep(0.5)
        api = re.search(r"OpenWhisk REST stand-in\s+pid \d+\s+(\S+)", out.read_text()).group(1)
        auth = tuple(GUEST_KEY.split(":"))
        url = f"{api}/api/v1/namespaces/guest/actions/plain"
        assert requests.put(url + "?overwrite=true", json={"exec": {"kind": "python:3", "code": PLAIN}},
                            auth=auth, timeout=10).status_code == 200
        answers: dict[int, dict] = {}

        def call(i: int) -> None:
            r = requests.post(url + "?blocking=true", json={"i": i}, auth=auth, timeout=120)
            answers[i] = {"status": r.status_code, **r.json()}

        def calls(first: int, n: int, every_s: float) -> list[threading.Thread]:
            threads = []
            for i in range(first, first + n):
                t = threading.Thread(target=call, args=(i,))
                t.start()
                threads.append(t)
                time.sleep(every_s)
            return threads

        for t in calls(0, 3, 0.0):                  # warm: the worker starts
            t.join()
        name, epoch = leader(logs)
        os.kill(started(out, f"esg {name}"), signal.SIGKILL)
        threads = calls(3, 12, 0.4)                  # through the takeover
        os.kill(started(out, "esg agent node0"), signal.SIGKILL)
        threads += calls(15, 8, 0.4)                 # while the agent comes back
        for t in threads:
            t.join()
        text = out.read_text()
        assert re.search(rf"esg up: {name} \(pid \d+\) exited with status -9; restarting it", text), text
        assert re.search(r"esg up: node0 \(pid \d+\) exited with status -9; restarting it", text), text
        assert up.poll() is None                     # still serving
        assert sorted(answers) == list(range(23))    # every call answered
        ok = [i for i, a in answers.items() if a["status"] == 200 and a.get("response", {}).get("success")]
        for i in ok:
            assert answers[i]["response"]["result"] == {"i": i}
        for i in set(answers) - set(ok):             # only what was running on the killed agent: not run again
            assert "is not run again" in json.dumps(answers[i]), json.dumps(answers[i])[:1500]
        runs = sum(int(n) for n in re.findall(r"/guest/plain x(\d+) on vCPUs",
                                              "".join(p.read_text() for p in logs.glob("node0.log"))))
        assert len(ok) <= runs <= len(answers)       # none ran twice
        assert leader(logs)[1] > epoch               # another scheduler took the lead since
    finally:
        up.send_signal(signal.SIGTERM)
        try:
            up.wait(60)
        except subprocess.TimeoutExpired:
            up.kill()
            up.wait(10)
