"""A tenant's action on ``esg up`` (the process runner), probing what it can see, read, write and reach.

One cluster (``esg up --serve``, one agent), a tenant's probing action deployed through the OpenWhisk REST
API as any user would, and the checks of what it found: a uid of its own (not root, not the agent's), no
platform credential in any process it can read, only its own processes, no platform path writable, no
route to Redis, Kafka, CouchDB or the REST API, its memory limit held, what it leaves running killed with
its worker; a Node.js action runs; and no process of the cluster shows a secret in its command line.
The secrets looked for are read from the cluster's own processes (their environment), so whatever a
deployment adds is looked for too.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
import requests

from esg_cli.openwhisk_standin import GUEST_KEY
from esg_cli.openwhisk_views import STATUS_TEXT
from tests.leaks import alive, descendants
from tests.tenant_probe import PROBE

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.integration, pytest.mark.timeout(300),
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux namespaces")]
AUTH = tuple(GUEST_KEY.split(":", 1))
CODES = {text: code for code, text in STATUS_TEXT.items()}
NODE = "async function main(p) { return { hello: p.who, node: process.version }; }"
#: The environment variables of the cluster's services that hold secrets.
SECRET_VARS = ("ESG_OPENWHISK_AUTH", "ESG_REDIS", "ESG_ACTIVATION_STORE", "ESG_PARAMETER_STORAGE_AES128",
               "ESG_PARAMETER_STORAGE_AES256")


def _read_until(proc: subprocess.Popen, pattern: str, timeout: float) -> str:
    out, deadline = "", time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line and proc.poll() is not None:
            break
        out += line
        if re.search(pattern, out):
            return out
    raise AssertionError(f"never saw {pattern!r}:\n{out}")


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)


def _secrets(env: dict[str, str]) -> set[str]:
    """The secret parts of the services' settings: keys, and the passwords in URLs."""
    found = set()
    for var in SECRET_VARS:
        value = env.get(var)
        if not value:
            continue
        if var == "ESG_OPENWHISK_AUTH":
            found.add(value.split(":", 1)[1])
        elif "://" in value:
            password = urlsplit(value).password
            if password:
                found.add(unquote(password))
        else:
            found.add(value)
    return found


def _uid(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    raise AssertionError(f"no uid for {pid}")


def _cmdline(pid: int) -> list[str]:
    try:
        return [a.decode() for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]
    except OSError:
        return []


def test_a_tenants_action_finds_nothing_of_the_platform_on_esg_up(tmp_path):
    proc = subprocess.Popen([sys.executable, "-u", "-m", "esg_cli.main", "up", "--nodes", "1", "--requests", "0",
                             "--serve", "--logs", str(tmp_path / "logs")], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    try:
        out = _read_until(proc, r"Ctrl-C stops everything", timeout=180)
        api = re.search(r"'(http://127\.0\.0\.1:\d+)/api/v1/", out).group(1)
        agent = int(re.search(r"esg agent node0\s+pid (\d+)", out).group(1))
        scheduler = int(re.search(r"esg scheduler\s+pid (\d+)", out).group(1))
        ports = sorted({int(p) for p in re.findall(r"127\.0\.0\.1:(\d+)", out)})   # broker, Redis, CouchDB, API
        assert len(ports) >= 4, out
        env = _environ(scheduler)
        secrets = _secrets(env) | _secrets(_environ(agent))
        assert secrets, "the cluster's services hold no secret to look for"

        def deploy(name: str, kind: str, code: str, memory: int = 128) -> None:
            r = requests.put(f"{api}/api/v1/namespaces/guest/actions/{name}?overwrite=true", auth=AUTH, timeout=10,
                             json={"exec": {"kind": kind, "code": code}, "limits": {"memory": memory,
                                                                                     "timeout": 30000}})
            assert r.status_code == 200, r.text

        def call(name: str, params: dict) -> dict:
            r = requests.post(f"{api}/api/v1/namespaces/guest/actions/{name}?blocking=true", auth=AUTH,
                              json=params, timeout=120)
            assert "response" in r.json(), (r.status_code, r.text)
            response = r.json()["response"]        # as users see it: "status" names the status code
            return {"statusCode": CODES[response["status"]], **response}

        deploy("probe", "python:3", PROBE)
        platform = [str(ROOT), str(tmp_path), str(tmp_path / "logs"), sys.prefix, os.path.expanduser("~"), "/",
                    "/usr", "/etc", "/var"]
        journal = str(tmp_path / "logs" / "node0.journal")
        marker = str(4000 + os.getpid() % 1000)
        seen = call("probe", {"paths": platform, "files": [journal, str(tmp_path / "logs" / "node0.log")],
                              "ports": ports, "allocate_mb": 256, "spawn": marker})
        assert seen["statusCode"] == 0, seen
        found = seen["result"]

        # its own uid: not root, not the agent's (seen from the host, and from inside)
        workers = [p for p in descendants(agent) if _uid(p) != _uid(agent)]
        assert workers, "no worker process under a uid of its own"
        assert all(_uid(p) not in (0, _uid(agent)) for p in workers)
        assert found["uid"] not in (0, _uid(agent)) and found["caps"] == "0000000000000000"
        # only its own processes: the sandbox's init, its runtime, the child it started
        assert len(found["pids"]) <= 3 and all(p <= 3 for p in found["pids"]), found["cmdlines"]
        readable = "\n".join(found["environs"] + found["cmdlines"])
        assert not [s for s in secrets if s in readable], "a platform secret was readable from the action"
        assert not any(var in readable for var in SECRET_VARS)
        # nothing of the platform writable or readable, no service reachable, the memory limit held
        assert found["writable"] == dict.fromkeys(platform, False)
        assert found["readable"] == dict.fromkeys([journal, str(tmp_path / "logs" / "node0.log")], False)
        assert found["reached"] == {str(p): False for p in ports}
        assert found["interfaces"] == ["lo"] and found["allocated"] == 0

        # what it left running dies with its worker (here: the worker dies, as on a crash)
        deadline = time.monotonic() + 10      # (its exec may still be finishing when the action answers)
        while not (sleeper := [p for p in descendants(agent) if _cmdline(p) == ["sleep", marker]]):
            assert time.monotonic() < deadline, "the probe's child is not running"
            time.sleep(0.05)
        crashed = call("probe", {"exit": True})
        assert crashed["statusCode"] == 2, crashed                 # the action's fault, not the invoker's
        deadline = time.monotonic() + 10
        while alive(sleeper[0]) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive(sleeper[0])

        # a Node.js action runs; a kind no node runs is the developer's error naming it
        deploy("hello-node", "nodejs:20", NODE)
        hello = call("hello-node", {"who": "tenant"})
        assert hello["statusCode"] == 0 and hello["result"]["hello"] == "tenant", hello
        deploy("swift", "swift:5.7", "func main(args: Any) -> Any { return args }")
        refused = call("swift", {})
        assert refused["statusCode"] == 2 and "swift:5.7" in refused["result"]["error"], refused

        # no process of the machine shows a secret in its command line
        listing = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True).stdout
        assert not [s for s in secrets if s in listing], "a secret is visible in ps"
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        proc.stdout.close()
