"""End to end: Apache's npm ``openwhisk`` client (installed into ``.node/`` by ``scripts/setup``) makes
every call it has on namespaces, actions, activations, packages, triggers and rules against the embedded
OpenWhisk -- the REST stand-in in front of the real broker, Redis, pouchdb-server with OpenWhisk's
databases, ``esg scheduler`` and an ``esg agent`` running the actions -- and each answer is checked
against what OpenWhisk's controller answers (``tests/e2e/openwhisk_client.js``)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

from esg_cli.servers import NODE_MODULES

pytestmark = pytest.mark.integration

CHECK = Path(__file__).with_name("openwhisk_client.js")


@contextmanager
def embedded_openwhisk(logs: Path) -> Iterator[str]:
    """What ``esg up`` starts, with one agent and no apps: yields the API host."""
    from esg_cli import openwhisk_catalog, openwhisk_db
    from esg_cli.controller_driver import ControllerDriver
    from esg_cli.openwhisk_standin import GUEST_KEY, OpenWhiskStandIn
    from esg_cli.servers import start_broker, start_couchdb, start_redis
    from esg_cli.up import ROOT, _spawn, _stop_all

    with ExitStack() as stack:
        broker = stack.enter_context(start_broker())
        rserver = stack.enter_context(start_redis())
        couch = stack.enter_context(start_couchdb())
        records = openwhisk_db.initialise(couch.url)
        standin = stack.enter_context(OpenWhiskStandIn(activation_store=records))
        openwhisk_catalog.install(standin)
        env = dict(os.environ, ESG_KAFKA=broker.address, ESG_REDIS=rserver.url, ESG_OPENWHISK_API=standin.url,
                   ESG_OPENWHISK_AUTH=GUEST_KEY, ESG_ACTIVATION_STORE=records, PYTHONPATH=str(ROOT))
        procs: dict = {}
        stack.callback(_stop_all, procs)
        procs["scheduler"] = _spawn(["scheduler"], env, logs / "scheduler.log")
        procs["node0"] = _spawn(["agent", "--name", "node0", "--fake-gpu", "A100-40GB", "--vcpus", "2",
                                 "--journal", str(logs / "node0.journal")], env, logs / "node0.log")
        driver = stack.enter_context(ControllerDriver(broker.address, catalog=standin.store.lookup,
                                                      activation_store=records))
        standin.invoker = driver.invocation
        driver.wait_healthy(1, timeout=90)
        yield standin.url


def test_apaches_client_gets_openwhisks_answers_to_every_call(tmp_path):
    from esg_cli.openwhisk_standin import GUEST_KEY, SYSTEM_KEY

    node = shutil.which("node")
    assert node is not None and (NODE_MODULES / "openwhisk").is_dir(), "run scripts/setup (node, openwhisk)"
    with embedded_openwhisk(tmp_path) as api:
        env = dict(os.environ, NODE_PATH=str(NODE_MODULES), OW_APIHOST=api, OW_GUEST_KEY=GUEST_KEY,
                   OW_SYSTEM_KEY=SYSTEM_KEY)
        proc = subprocess.run([node, str(CHECK)], env=env, capture_output=True, text=True, timeout=240)
    logs = "".join(f"\n--- {p.name}\n" + p.read_text(errors="replace")[-3000:] for p in tmp_path.glob("*.log"))
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:] + logs
    assert "all calls answered as OpenWhisk answers them" in proc.stdout
