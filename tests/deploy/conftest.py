"""A real CouchDB-API server for the deployment tests: pouchdb-server (npm, installed by scripts/setup).

It runs with in-memory storage on a free loopback port, in a throw-away directory (it writes its
``config.json`` and log there), with one server admin created the way CouchDB's ``/_config`` API does it,
and is stopped, directory removed, at the end of the module.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from esg_cli.servers import free_port
from tests.deploy.deploy_files import ROOT

POUCHDB_SERVER = ROOT / ".node" / "node_modules" / ".bin" / "pouchdb-server"
START_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class CouchServer:
    url: str
    user: str
    password: str


@pytest.fixture(scope="module")
def couchdb() -> Iterator[CouchServer]:
    if not POUCHDB_SERVER.exists():
        pytest.fail(f"{POUCHDB_SERVER} is missing: run scripts/setup", pytrace=False)
    workdir = Path(tempfile.mkdtemp(prefix="esg-pouchdb-"))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with open(workdir / "server.log", "wb") as log:
        proc = subprocess.Popen([str(POUCHDB_SERVER), "--in-memory", "--host", "127.0.0.1", "--port", str(port),
                                 "--no-stdout-logs"], cwd=workdir, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"pouchdb-server exited with {proc.returncode}: {(workdir / 'server.log').read_text()}",
                            pytrace=False)
            try:
                if requests.get(url, timeout=1).status_code == 200:
                    break
            except requests.RequestException:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"pouchdb-server did not answer on {url} within {START_TIMEOUT_S:.0f} s", pytrace=False)
            time.sleep(0.1)
        server = CouchServer(url, "whisk_admin", "some_passw0rd")
        r = requests.put(f"{url}/_config/admins/{server.user}", json=server.password, timeout=5)
        assert r.status_code == 200, r.text
        yield server
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
        shutil.rmtree(workdir, ignore_errors=True)
