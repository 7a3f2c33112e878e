"""``esg scheduler`` and ``esg agent`` started with exactly what the deployment files give them.

For the compose file (GPU agent), its CPU variant and the Kubernetes manifests: each process gets the
file's command and environment -- the only changes are host names and the metrics port mapped to the
servers this test starts (a Kafka-protocol broker and redis-server on loopback, OpenWhisk's controller
played on Kafka by ``esg_cli.controller_driver`` with its ``GET /invokers`` status endpoint), paths under
``/opt/esg`` mapped to this checkout, and, where the file expects real NVML, ``ESG_FAKE_GPU``. Then the
files' own readiness checks (``deploy/healthcheck.py`` with the files' arguments) must pass: the
scheduler serves its metrics, and the controller lists the agent's node as an invoker that is up, which
takes the agent's heartbeat, the scheduler's health pings under that node name, and the health test
action answered. A renamed flag or environment variable, a wrong port or prefix, fails here.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from kafka import KafkaConsumer, TopicPartition

from agent_channel import acl
from controller_plugin import wire
from esg_cli import redis_users
from esg_cli.controller_driver import ControllerDriver
from esg_cli.servers import free_port, start_broker, start_couchdb, start_redis
from tests.deploy.deploy_files import (
    COMPOSE,
    COMPOSE_CPU,
    IMAGE_ROOT,
    ROOT,
    active_services,
    compose_model,
    container_env,
    k8s_documents,
    k8s_object,
    pod_container,
    redis_secret,
    service_env,
)

pytestmark = pytest.mark.integration

#: OpenWhisk's ``InvokerState.asString`` for the states the controller driver tracks.
STATE_NAMES = {"healthy": "up", "unhealthy": "unhealthy", "unresponsive": "unresponsive", "offline": "down"}
READY_TIMEOUT_S = 60.0


def env_names_read_by(*modules: str) -> set[str]:
    """The ``ESG_*`` names a subcommand's module reads (its argparse defaults and env fallbacks), each with
    its ``_FILE`` form (``checks.from_env`` reads that too)."""
    names = {name for m in modules for name in re.findall(r'"(ESG_[A-Z_]+)"', (ROOT / m).read_text())}
    return names | {f"{name}_FILE" for name in names}


SCHEDULER_READS = env_names_read_by("esg_cli/scheduler.py")
AGENT_READS = env_names_read_by("esg_cli/agent.py")


# -- what the files give each process ---------------------------------------------------------------------
@dataclass
class Launch:
    """A scheduler and an agent as one deployment file starts them."""

    source: str
    scheduler_cmd: list[str]
    scheduler_env: dict[str, str]
    scheduler_check: list[str]
    agent_cmd: list[str]
    agent_env: dict[str, str]
    agent_check: list[str]
    real_nvml: bool
    scheduler_secret: str = "scheduler"
    """The ``esg redis-users`` role directory whose ``redis.url`` the scheduler's file mounts hold."""
    agent_secret: str = ""
    agent_alive: list[str] | None = None
    """The agent's liveness probe, where the file has one."""


def healthcheck_argv(service: dict) -> list[str]:
    test = service["healthcheck"]["test"]
    assert test[0] == "CMD", "the ESG healthchecks run without a shell"
    return test[1:]


def from_compose(cpu: bool) -> Launch:
    files = (COMPOSE, COMPOSE_CPU) if cpu else (COMPOSE,)
    services = active_services(compose_model(*files))
    sched = services["scheduler"]
    agent = services["agent-cpu0" if cpu else "agent-gpu0"]
    return Launch("compose-cpu" if cpu else "compose", sched["command"], service_env(sched),
                  healthcheck_argv(sched), agent["command"], service_env(agent), healthcheck_argv(agent),
                  real_nvml=not cpu, scheduler_secret=redis_secret(sched), agent_secret=redis_secret(agent))


def from_kubernetes() -> Launch:
    sched = pod_container(k8s_object("Deployment", "esg-scheduler"), "scheduler")
    agent = pod_container(k8s_object("DaemonSet", "esg-agent"), "agent")
    # the schedulers' Secret holds the scheduler role's file, each node's host path its own agent role's
    return Launch("kubernetes", sched["args"], container_env(sched, "node-a"),
                  sched["readinessProbe"]["exec"]["command"], agent["args"], container_env(agent, "node-a"),
                  agent["readinessProbe"]["exec"]["command"], real_nvml=True, scheduler_secret="scheduler",
                  agent_secret="agent-node-a", agent_alive=agent["livenessProbe"]["exec"]["command"])


LAUNCHES = {"compose": lambda: from_compose(False), "compose-cpu": lambda: from_compose(True),
            "kubernetes": from_kubernetes}


def all_esg_processes() -> list[tuple[str, str, dict[str, str]]]:
    """(where, role, environment) of every scheduler and agent the files define."""
    out = []
    for cpu in (False, True):
        model = compose_model(*((COMPOSE, COMPOSE_CPU) if cpu else (COMPOSE,)))
        for name, s in model["services"].items():
            command = s.get("command") or []
            if command[:1] in (["scheduler"], ["agent"]):
                out.append((f"compose {name}", command[0], service_env(s)))
    for doc in k8s_documents():
        for c in doc.get("spec", {}).get("template", {}).get("spec", {}).get("containers", []):
            if c.get("args", [])[:1] in (["scheduler"], ["agent"]):
                out.append((f"kubernetes {doc['metadata']['name']}", c["args"][0], container_env(c, "node-a")))
    return out


def test_every_esg_variable_the_files_set_is_read_by_the_process_it_is_given_to():
    processes = all_esg_processes()
    assert {role for _, role, _ in processes} == {"scheduler", "agent"} and len(processes) >= 5
    for where, role, env in processes:
        reads = SCHEDULER_READS if role == "scheduler" else AGENT_READS
        unread = {k for k in env if k.startswith("ESG_")} - reads
        assert not unread, f"{where} sets {sorted(unread)}, which esg {role} does not read"


def test_agents_are_given_both_kafka_and_redis():
    for where, role, env in all_esg_processes():
        if role == "agent":
            assert env.get("ESG_KAFKA") and env.get("ESG_REDIS_FILE"), where


# -- the controller's side: Kafka (driver) and GET /invokers ---------------------------------------------
class InvokerStatus:
    """OpenWhisk's ``GET /invokers`` for the controller driver: ``{"invoker0/<unique>/<displayed>": state}``."""

    def __init__(self, kafka: str, prefix: str, driver: ControllerDriver) -> None:
        self.driver = driver
        self.names: dict[int, tuple[str | None, str | None]] = {}
        self._stop = threading.Event()
        self._consumer = KafkaConsumer(bootstrap_servers=kafka, group_id=None, enable_auto_commit=False)
        tp = TopicPartition(wire.health_topic(prefix), 0)
        self._consumer.assign([tp])
        self._consumer.seek_to_beginning(tp)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        status = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                if self.path.rstrip("/") != "/invokers":
                    self.send_error(404)
                    return
                body = json.dumps(status.invokers()).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._http = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._http.start()
        self.address = f"127.0.0.1:{self.server.server_address[1]}"

    def _read(self) -> None:
        while not self._stop.is_set():
            for records in self._consumer.poll(timeout_ms=100).values():
                for rec in records:
                    try:
                        instance, _ = wire.parse_ping(rec.value)
                    except wire.WireError:
                        continue
                    self.names[instance.instance] = (instance.unique_name, instance.displayed_name)

    def invokers(self) -> dict[str, str]:
        out = {}
        for i, state in self.driver.states().items():
            parts = [f"invoker{i}", *(n for n in self.names.get(i, (None, None)) if n)]
            out["/".join(parts)] = STATE_NAMES[state]
        return out

    def close(self) -> None:
        self._stop.set()
        self._reader.join(timeout=5)
        self._consumer.close()
        self.server.shutdown()
        self.server.server_close()


# -- running a launch -------------------------------------------------------------------------------------
class Localizer:
    """Maps the files' host names, ports and paths to this machine; every mapping must be used."""

    def __init__(self, mapping: dict[str, str]) -> None:
        self.mapping = mapping
        self.used: set[str] = set()

    def __call__(self, value: str) -> str:
        for old, new in self.mapping.items():
            if old in value:
                self.used.add(old)
                value = value.replace(old, new)
        return value

    def command(self, argv: list[str]) -> list[str]:
        argv = [self(a) for a in argv]
        return [sys.executable, *argv[1:]] if argv[0] == "python" else argv

    def env(self, env: dict[str, str]) -> dict[str, str]:
        return {k: self(v) for k, v in env.items()}


@dataclass
class Cluster:
    kafka: str
    redis: str
    prefix: str
    controller_id: str
    status: InvokerStatus


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen]]:
    procs: list[subprocess.Popen] = []
    yield procs
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait(timeout=10)


def spawn(procs: list, argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    out = open(log, "wb")  # noqa: SIM115 - closed with the process
    p = subprocess.Popen([sys.executable, "-m", "esg_cli.main", *argv], env=env, stdout=out,
                         stderr=subprocess.STDOUT, cwd=ROOT)
    out.close()
    procs.append(p)
    return p


def tails(logs: list[Path]) -> str:
    return "\n".join(f"{f.name}: {f.read_text()[-2000:]}" for f in logs if f.exists())


def wait_ready(check: list[str], env: dict[str, str], procs: list[subprocess.Popen], logs: list[Path]) -> str:
    deadline = time.monotonic() + READY_TIMEOUT_S
    last = ""
    while time.monotonic() < deadline:
        dead = [p for p in procs if p.poll() is not None]
        assert not dead, f"exited with {dead[0].returncode}:\n{tails(logs)}"
        r = subprocess.run(check, env=env, capture_output=True, text=True, timeout=30)
        last = r.stdout.strip() or r.stderr.strip()
        if r.returncode == 0:
            return last
        time.sleep(0.5)
    raise AssertionError(f"not ready within {READY_TIMEOUT_S:.0f} s: {last}\n{tails(logs)}")


@pytest.mark.parametrize("source", list(LAUNCHES))
def test_processes_start_and_report_ready_with_the_files_environment(source, tmp_path, processes):
    launch = LAUNCHES[source]()
    prefix = launch.scheduler_env.get("ESG_TOPIC_PREFIX", "")
    controller_id = launch.scheduler_env.get("ESG_CONTROLLER_ID", "0")
    node = launch.agent_env["ESG_AGENT_NAME"]
    secrets = tmp_path / "secrets"
    redis_port = free_port()
    users = redis_users.write(secrets, prefix, [node], f"127.0.0.1:{redis_port}", controllers=(controller_id,))
    admin = next(u for u in users if u.name == acl.ADMIN)
    with start_broker() as broker, start_couchdb() as couch, start_redis(
            port=redis_port, acl=(secrets / redis_users.ACL_FILE).read_text(),
            admin=(admin.name, admin.password)) as redis_server:
        driver = ControllerDriver(broker.address, prefix=prefix, controller_id=controller_id)
        status = InvokerStatus(broker.address, prefix, driver)
        try:
            port, free = launch.scheduler_cmd[launch.scheduler_cmd.index("--metrics-port") + 1], str(free_port())
            local = Localizer(mapping_for(launch, broker.address, status.address, port, free, tmp_path,
                                          couch.address))
            base = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PYTHONPATH": str(ROOT)}
            sched_env = {**base, **local.env(launch.scheduler_env)}
            agent_env = {**base, **local.env(launch.agent_env)}
            # each process's own Redis user, from the file its deployment mounts at ESG_REDIS_FILE
            for env, role in ((sched_env, launch.scheduler_secret), (agent_env, launch.agent_secret)):
                assert env["ESG_REDIS_FILE"] == "/run/esg-redis/redis.url" and "ESG_REDIS" not in env
                env["ESG_REDIS_FILE"] = str(secrets / role / redis_users.URL_FILE)
            assert redis_server.running()
            if launch.real_nvml:
                agent_env["ESG_FAKE_GPU"] = "A100-40GB"  # no NVIDIA driver here
            logs = [tmp_path / "scheduler.log", tmp_path / "agent.log"]
            (tmp_path / "state").mkdir()
            sched_cmd = [free if a == port else a for a in local.command(launch.scheduler_cmd)]
            scheduler = spawn(processes, sched_cmd, sched_env, logs[0])
            wait_ready(local.command(launch.scheduler_check), sched_env, processes, logs)
            agent = spawn(processes, local.command(launch.agent_cmd), agent_env, logs[1])
            said = wait_ready(local.command(launch.agent_check), agent_env, processes, logs)
            assert said.startswith("ready: invoker") and f"/{node}/" in said, said
            if launch.agent_alive:
                alive = subprocess.run(local.command(launch.agent_alive), env=agent_env, capture_output=True,
                                       text=True, timeout=30)
                assert alive.returncode == 0 and alive.stdout.startswith("ready: heartbeat"), alive.stdout
            assert set(local.mapping) == local.used, f"unused mappings: {set(local.mapping) - local.used}"
            assert "esg scheduler: ready" in logs[0].read_text()
            for p in (agent, scheduler):
                p.send_signal(signal.SIGTERM)
                assert p.wait(timeout=30) == 0, tails(logs)
        finally:
            status.close()
            driver.close()


def mapping_for(launch: Launch, kafka: str, controller: str, metrics_port: str, free: str,
                tmp: Path, couch: str) -> dict[str, str]:
    """The files' addresses (as the ESG processes see them) to the servers of this test; the activation
    store's credentials are the files' defaults, which the test's pouchdb-server's admin has."""
    kafka_host = launch.scheduler_env["ESG_KAFKA"]
    store_host = launch.scheduler_env["ESG_ACTIVATION_STORE"].removeprefix("http://").split("@")[-1].split("/")[0]
    api_host = launch.scheduler_env["ESG_OPENWHISK_API"].removeprefix("http://").rstrip("/")
    assert launch.agent_env["ESG_KAFKA"] == kafka_host
    mapping = {kafka_host: kafka, api_host: controller, store_host: couch,
               f"127.0.0.1:{metrics_port}": f"127.0.0.1:{free}", f"{IMAGE_ROOT}/": f"{ROOT}/",
               "/var/lib/esg": str(tmp / "state")}
    if "--alive-file" in launch.agent_cmd:
        path = launch.agent_cmd[launch.agent_cmd.index("--alive-file") + 1]
        mapping[path] = str(tmp / "alive")
    return mapping
