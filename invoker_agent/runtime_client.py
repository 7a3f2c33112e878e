"""The parent side of OpenWhisk's action runtime protocol (/init + /run), shared by both runners.

Result codes follow OpenWhisk's ``ActivationResponse`` (``docs/openwhisk-wire.md`` §6): 200 with a JSON
object → 0 success; 200 with ``{"error": ...}`` → 1 application error; non-200 → 2 developer error;
time limit exceeded → 2 with the timeout flag; abnormal failure (the worker died, no valid reply) →
3 whisk error. An init failure is a developer error carrying the runtime's message.
"""

from __future__ import annotations

import http.client
import json
import socket
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import urlsplit

from openwhisk_status import STATUS_APPLICATION_ERROR, STATUS_DEVELOPER_ERROR, STATUS_SUCCESS

BATCH_KEY = "__esg_batch__"
SENTINEL = "XXX_THE_END_OF_A_WHISK_ACTIVATION_XXX"     # printed by runtimes after each activation


class RuntimeTimeout(Exception):
    """The runtime did not answer within the time limit."""


class RuntimeCrashed(Exception):
    """The runtime's connection failed or its reply was not JSON: the worker is gone or broken."""


class WorkerStartError(RuntimeError):
    """A worker could not be started (bad vCPU ids, missing engine, runtime never became ready)."""


class UnsupportedKind(WorkerStartError):
    """The action's kind is one this runner has no runtime for: the developer's error (status 2) naming
    the kind, never the invoker's fault, so no tenant can make an invoker look unhealthy with it."""


@dataclass
class RuntimeResult:
    """What the runtime answered for one activation, as the agent measured it; the agent's data plane
    turns it into the :class:`agent_channel.protocol.RunResult` the scheduler gets (result inline or stored)."""

    activation_id: str
    status_code: int                        # 0 success, 1 application, 2 developer, 3 whisk error
    result: dict[str, Any]
    duration_ms: float
    init_ms: float | None = None            # cold start paid by this activation (OpenWhisk's initTime)
    timeout: bool = False
    batch_size: int = 1
    annotations: dict[str, Any] = field(default_factory=dict)
    started_ms: float | None = None         # epoch ms when its /run (or its batch's /run) was sent
    logs: list[str] = field(default_factory=list)   # what the action printed while it ran
    raw: bytes | None = None                # the reply's bytes, when they are exactly ``result`` (one /run)

    @property
    def ok(self) -> bool:
        return self.status_code == STATUS_SUCCESS


def classify(status: int, body: Any) -> tuple[int, dict[str, Any]]:
    """(result code, result object) of a /run reply, by OpenWhisk's rules."""
    if status == 200 and isinstance(body, dict):
        return (STATUS_APPLICATION_ERROR if "error" in body else STATUS_SUCCESS), body
    if status == 200 and isinstance(body, list):
        return STATUS_SUCCESS, {"result": body}
    if status == 200:
        return STATUS_DEVELOPER_ERROR, {"error": "The action did not produce a valid JSON response."}
    if isinstance(body, dict) and "error" in body:
        return STATUS_DEVELOPER_ERROR, {"error": body["error"]}
    return STATUS_DEVELOPER_ERROR, {"error": f"The action did not produce a valid response (HTTP {status})."}


def timeout_result(limit_ms: int) -> dict[str, Any]:
    return {"error": f"The action exceeded its time limits of {limit_ms} milliseconds."}


def crash_result(detail: str = "") -> dict[str, Any]:
    msg = "The action did not produce a valid response and exited unexpectedly."
    return {"error": msg + (f" ({detail})" if detail else "")}


class _Connection(http.client.HTTPConnection):
    """The standard library's connection, writing each request in one ``send``: ``http.client`` writes a
    request's head and its body with a system call each, two segments on the loopback that can wake the
    worker twice (it reads the head, then waits for the body)."""

    _held: list[bytes] | None = None

    def post(self, path: str, body: bytes) -> None:
        """Send ``POST path`` with a JSON ``body``: head and body in one write. No ``Accept-Encoding``
        header (identity is the default): the worker's server parses each header with the email
        package, about 13 us a header."""
        self._held = []
        try:
            self.putrequest("POST", path, skip_accept_encoding=True)
            self.putheader("Content-Type", "application/json")
            self.putheader("Content-Length", str(len(body)))
            self.endheaders(body)
            data = b"".join(self._held)
        finally:
            self._held = None
        self.send(data)

    def send(self, data) -> None:
        if self._held is not None:
            self._held.append(bytes(data))
        else:
            super().send(data)


class _UnixConnection(_Connection):
    """The same, to a runtime's Unix socket (a sandboxed worker's: it has no network of the host's)."""

    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            sock.connect(self.path)
        except BaseException:
            sock.close()
            raise
        self.sock = sock


class RuntimeClient:
    """HTTP client of one runtime endpoint (``http://127.0.0.1:PORT``, or ``unix:PATH`` for a socket),
    one kept-alive connection.

    The standard library's client: a /run is on every batch's path, and a general-purpose HTTP library
    costs a millisecond of CPU per call where this costs a tenth of that. A failed call drops the
    connection; the next one connects again. Nothing is retried (a /run must not run twice).
    """

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url.rstrip("/")
        self.unix_path = base_url[len("unix:"):] if base_url.startswith("unix:") else None
        self.host, self.port = "localhost", 0
        if self.unix_path is None:
            parts = urlsplit(self.base_url)
            self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self._conn: _Connection | None = None
        self.last_body = b""
        """The bytes of the last reply (its JSON as the runtime wrote it)."""

    def post(self, path: str, payload: dict[str, Any], timeout_s: float) -> tuple[int, Any]:
        body = json.dumps(payload).encode()
        conn = self._connect(min(5.0, timeout_s))
        try:
            if conn.sock.gettimeout() != timeout_s:     # a system call: only when the limit changes
                conn.sock.settimeout(timeout_s)
            conn.post(path, body)
            resp = conn.getresponse()
            status, data = resp.status, resp.read()
        except TimeoutError:
            self.close()
            raise RuntimeTimeout() from None
        except (OSError, http.client.HTTPException) as e:
            self.close()
            raise RuntimeCrashed(type(e).__name__) from None
        if resp.will_close:
            self.close()
        self.last_body = data
        try:
            return status, json.loads(data)
        except ValueError:
            if status == 200:
                return 200, None
            return status, {"error": data.decode(errors="replace")[:500]}

    def _connect(self, timeout_s: float) -> _Connection:
        if self._conn is not None:
            return self._conn
        conn = (_Connection(self.host, self.port, timeout=timeout_s) if self.unix_path is None
                else _UnixConnection(self.unix_path, timeout_s))
        try:
            conn.connect()
        except TimeoutError:
            raise RuntimeCrashed(f"connect to {self.base_url} timed out") from None
        except OSError as e:
            raise RuntimeCrashed(type(e).__name__) from None
        if self.unix_path is None:
            conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._conn = conn
        return conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class Worker(Protocol):
    """A runtime the pool can start, /init once, /run many times and kill."""

    init_ms: float | None
    batch_capable: bool

    def start(self) -> None: ...

    def init(self, payload: dict[str, Any], timeout_s: float) -> tuple[int, Any]: ...

    def run(self, payload: dict[str, Any], timeout_s: float) -> tuple[int, Any]: ...

    @property
    def last_body(self) -> bytes:
        """The bytes of the last reply."""
        ...

    def alive(self) -> bool: ...

    def exit_detail(self) -> str: ...

    def pin(self, vcpus: tuple[int, ...]) -> None: ...

    def kill(self) -> None: ...
