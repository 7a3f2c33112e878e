"""A stand-in for OpenWhisk's REST API, for the embedded cluster (``esg up``) and the tests: it answers
``wsk``, Apache's ``openwhisk`` npm client and the project's own readers as OpenWhisk's controller does.

* **Routes** (``esg_cli.openwhisk_routes``): ``GET /api/v1/namespaces``; actions (create, get, update,
  delete, invoke, list; in packages and through bindings; ``GET actions/pkg/`` lists a package's);
  packages (bindings, ``publish``, ``force`` delete); triggers (fire: the rules' actions are invoked
  through the same invoke route as any call); rules (``POST {"status": "active"|"inactive"}``);
  activations (list, count, get, ``/result``, ``/logs``). Status codes and error bodies are OpenWhisk's,
  each ``{"error": <message>, "code": <transaction id>}`` (the ``X-Request-ID`` header's, if given).
* **Documents** (``esg_cli.openwhisk_entities``): updates merge as ``Actions.scala`` does; versions and
  revisions grow per write; list options as ``esg_cli.openwhisk_views`` says.
* **Identities**: HTTP Basic ``uuid:key`` looked up in the auth table (default: OpenWhisk's public
  ``guest`` and ``whisk.system`` keys). No credentials is 401 ``The resource requires authentication,
  which was not supplied with the request``, unknown ones 401 ``The supplied authentication is invalid``.
  Every call acts as its caller: ``_`` is the caller's namespace, entitlement is the caller's, and an
  activation is published with the caller's identity (subject, namespace, key), so its record is stored
  under the caller's namespace and the action can be given the caller's key (``provide-api-key``).
* **Activations** (``esg_cli.openwhisk_controller``): an invoke goes to the :data:`Invoker` plugged in
  (the controller driver); sequences run here component by component; triggers fire here. Records are
  read from OpenWhisk's activation store (CouchDB's API) through OpenWhisk's views.
* **HTTP/1.1 with kept-alive connections**: every request's body is read (``Content-Length`` or
  chunked) before anything is answered, so an early answer (401, 403, 404, 405, 503, ...) never leaves
  bytes that a reused connection would read as the next request.

Nothing here is OpenWhisk: it exists because a JVM and CouchDB cannot run on every machine.
"""

from __future__ import annotations

import base64
import json
import logging
import secrets
import string
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from esg_cli import openwhisk_views as views
from esg_cli.openwhisk_controller import Controller, Invocation, Invoker
from esg_cli.openwhisk_entities import (
    ACTIONS,
    PACKAGES,
    RULES,
    TRIGGERS,
    ApiError,
    EntityStore,
    Identity,
    identities,
    make_action,
    make_package,
    valid_name,
)
from esg_cli.openwhisk_routes import BLOCKING_WAIT_S, INTERNAL, Call, Reply, Routes

__all__ = ["BLOCKING_WAIT_S", "GUEST_KEY", "SYSTEM_KEY", "Invocation", "Invoker", "OpenWhiskStandIn"]

log = logging.getLogger("esg.openwhisk")

GUEST_KEY = "23bc46b1-71f6-4ed5-8c54-816aa4f8c502:123zO3xZCLrMN6v2BKK1dXYFpXlPkccOFqm12CdAsMgRU4VrNZ9lyGVCGuMDGIwP"
SYSTEM_KEY = "789c46b1-71f6-4ed5-8c54-816aa4f8c502:abczO3xZCLrMN6v2BKK1dXYFpXlPkccOFqm12CdAsMgRU4VrNZ9lyGVCGuMDGIwP"
#: The largest request body taken (OpenWhisk's largest entity, an action's code, is 48 MiB).
MAX_BODY_BYTES = 64 * 1024 * 1024
NO_AUTH = "The resource requires authentication, which was not supplied with the request"
BAD_AUTH = "The supplied authentication is invalid"
NOT_MATCHED = "The requested resource could not be found."
CORS = {"Access-Control-Allow-Origin": "*",
        "Access-Control-Allow-Headers": "Authorization, Origin, X-Requested-With, Content-Type, Accept, User-Agent",
        "Access-Control-Allow-Methods": "GET, DELETE, POST, PUT, HEAD"}
_TRANSID = string.ascii_letters + string.digits
COLLECTIONS = (ACTIONS, PACKAGES, TRIGGERS, RULES, "activations")


class _Server(ThreadingHTTPServer):
    request_queue_size = 1024
    """The listen backlog: ``esg replay`` opens up to 128 connections at once, and Python's default of 5
    overflowed, the kernel resetting the connections it could not queue (tests/test_standin_concurrency.py)."""


class OpenWhiskStandIn:
    """The HTTP server in a daemon thread; ``url`` is its API host. Use as a context manager.

    ``keys``: the auth table, ``{"uuid:key": namespace}``; ``activation_store``: the activations
    database's URL (``http://user:password@host:port/db``); ``invoker``: where activations go.
    """

    def __init__(self, keys: dict[str, str] | None = None, activation_store: str | None = None,
                 host: str = "127.0.0.1", port: int = 0, invoker: Invoker | None = None) -> None:
        self.keys = dict(keys or {GUEST_KEY: "guest", SYSTEM_KEY: "whisk.system"})
        self.store = EntityStore()
        self.activation_store = activation_store
        self.invoker = invoker
        self.requests: list[tuple[str, str, int]] = []
        self.controller = Controller(lambda user, fqn: self.routes.resolve_component(user, fqn),
                                     lambda: self.invoker, lambda: self.activation_store)
        self.routes = Routes(self.store, self.controller, lambda: self.activation_store)
        handler = type("Handler", (_Handler,), {"standin": self})
        self.server = _Server((host, port), handler)
        self.server.daemon_threads = True
        self.url = f"http://{host}:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.1},
                                        name="openwhisk-standin", daemon=True)
        self._thread.start()

    def identity(self, header: str | None) -> Identity | None:
        """The caller a Basic ``Authorization`` header names, or None."""
        if not header or not header.startswith("Basic "):
            return None
        try:
            decoded = base64.b64decode(header[6:], validate=True).decode()
        except (ValueError, UnicodeDecodeError):
            return None
        return identities({decoded: self.keys[decoded]})[decoded] if decoded in self.keys else None

    def put_action(self, fqn: str, body: dict[str, Any], overwrite: bool = True) -> dict[str, Any]:
        """Create or update an action as its namespace's owner (what ``wsk action update`` does)."""
        ns_path, _, name = fqn.strip("/").rpartition("/")
        try:
            doc = self.store.write(ACTIONS, f"{ns_path}/{name}", overwrite,
                                   lambda old: make_action(ns_path, name, body, old, ns_path.split("/")[0]))
        except ApiError as exc:
            raise ValueError(f"cannot put {fqn}: {exc.message}") from None
        return views.public(doc)

    def put_package(self, fqn: str, publish: bool = False, binding: str | None = None) -> None:
        """Create package ``ns/name``: shared when ``publish``; a binding to package ``binding`` (``ns/name``)."""
        ns, _, name = fqn.strip("/").partition("/")
        body: dict[str, Any] = {"publish": publish}
        if binding:
            bns, _, bname = binding.strip("/").partition("/")
            body["binding"] = {"namespace": bns, "name": bname}
        self.store.write(PACKAGES, f"{ns}/{name}", True,
                         lambda old: make_package(ns, name, body, old, ns, self.store.find))

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> OpenWhiskStandIn:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _BadBody(Exception):
    """The request body could not be read whole: answered, and the connection closed."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class _Handler(BaseHTTPRequestHandler):
    standin: OpenWhiskStandIn
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
        return  # no access log: it would carry nothing useful, and never an Authorization header

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The standard library's own answers (a malformed request line, ...): the connection's state is
        unknown after them, so it is closed."""
        self.close_connection = True
        super().send_error(code, message, explain)

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's names
        self._handle()

    do_PUT = do_POST = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = do_GET  # noqa: N815

    # -- the request ---------------------------------------------------------------------------------
    def _read_body(self) -> bytes:
        """The whole body (``Content-Length`` or chunked); a request with neither has none."""
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            return self._read_chunked()
        raw = self.headers.get("Content-Length")
        if raw is None:
            return b""
        try:
            n = int(raw)
        except ValueError:
            raise _BadBody(400, "The request's Content-Length is not a number.") from None
        if n < 0:
            raise _BadBody(400, "The request's Content-Length is negative.")
        if n > MAX_BODY_BYTES:
            raise _BadBody(413, f"The request content was too large: {n} > {MAX_BODY_BYTES} bytes.")
        data = self.rfile.read(n)
        if len(data) != n:
            raise _BadBody(400, "The request body ended early.")
        return data

    def _read_chunked(self) -> bytes:
        parts, total = [], 0
        while True:
            line = self.rfile.readline(1024)
            try:
                size = int(line.split(b";")[0].strip(), 16)
            except ValueError:
                raise _BadBody(400, "The request's chunked body is malformed.") from None
            if size == 0:
                while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                    pass                                  # trailers
                return b"".join(parts)
            total += size
            if total > MAX_BODY_BYTES:
                raise _BadBody(413, f"The request content was too large: more than {MAX_BODY_BYTES} bytes.")
            parts.append(self.rfile.read(size))
            self.rfile.readline(1024)

    def _handle(self) -> None:
        received_ms = int(time.time() * 1000)
        transid = self.headers.get("X-Request-ID") or "".join(secrets.choice(_TRANSID) for _ in range(32))
        try:
            body = self._read_body()
        except _BadBody as exc:
            self.close_connection = True
            return self._send(Reply(exc.status, {"error": str(exc), "code": transid}))
        try:
            reply = self._answer(body, received_ms)
        except ApiError as exc:
            reply = Reply(exc.status, {"error": exc.message, "code": transid})
        except Exception:  # noqa: BLE001 - a bug answers 500, as the controller's catch-all does
            log.exception("openwhisk stand-in: %s %s failed", self.command, urlsplit(self.path).path)
            reply = Reply(500, {"error": INTERNAL, "code": transid})
        self._send(reply)

    def _answer(self, body: bytes, received_ms: int) -> Reply:
        parts = urlsplit(self.path)
        segs = parts.path.split("/")[1:]
        if segs[:2] != ["api", "v1"]:
            raise ApiError(404, NOT_MATCHED)
        rest = [unquote(s) for s in segs[2:]]
        if not rest or rest == [""]:
            if self.command in ("GET", "HEAD"):
                return Reply(200, {"api_paths": ["/api/v1"], "description": "OpenWhisk API",
                                   "swagger_paths": {"ui": "/docs", "api-docs": "/api/v1/api-docs"}})
            raise ApiError(405, "HTTP method not allowed, supported methods: GET")
        if self.command == "OPTIONS":
            return Reply(200, "OK", text=True)
        header = self.headers.get("Authorization")
        caller = self.standin.identity(header)
        if caller is None:
            raise ApiError(401, BAD_AUTH if header else NO_AUTH)
        if rest[0] != "namespaces":
            raise ApiError(404, NOT_MATCHED)
        if len(rest) == 1 or rest[1:] == [""]:
            if self.command not in ("GET", "HEAD"):
                raise ApiError(405, "HTTP method not allowed, supported methods: GET")
            return Reply(200, [caller.namespace])
        if len(rest) < 3 or rest[2] not in COLLECTIONS:
            raise ApiError(404, NOT_MATCHED)
        ns = caller.namespace if rest[1] == "_" else rest[1]
        if not valid_name(ns):
            raise ApiError(400, "The namespace contains illegal characters.")
        headers = {k.lower(): v for k, v in self.headers.items()}
        call = Call(caller, "GET" if self.command == "HEAD" else self.command, ns, rest[2], tuple(rest[3:]),
                    parse_qs(parts.query, keep_blank_values=True), body, headers, received_ms)
        return self.standin.routes.dispatch(call)

    # -- the answer ----------------------------------------------------------------------------------
    def _send(self, reply: Reply) -> None:
        if reply.body is None:
            data, ctype = b"", None
        elif reply.text:
            data, ctype = str(reply.body).encode(), "text/plain; charset=UTF-8"
        else:
            data, ctype = json.dumps(reply.body).encode(), "application/json"
        self.send_response(reply.status)
        if ctype is not None:
            self.send_header("Content-Type", ctype)
        if reply.status != 204:
            self.send_header("Content-Length", str(len(data)))
        for k, v in {**CORS, **reply.headers}.items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD" and reply.status != 204:
            self.wfile.write(data)
        self.standin.requests.append((self.command, urlsplit(self.path).path, reply.status))
