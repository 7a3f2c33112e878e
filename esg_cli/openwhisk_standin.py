"""A stand-in for OpenWhisk's REST API (actions and activation records), for the embedded cluster and tests.

It serves the shapes the scheduler, the agents and ``actions/deploy.py`` use, as OpenWhisk does:

* ``PUT /api/v1/namespaces/{ns}/actions/[{pkg}/]{name}[?overwrite=true]`` -- create or update; a
  second create without ``overwrite=true`` is 409. The version starts at ``0.0.1`` and its patch number
  grows on each update; each write gets a new CouchDB-style revision (``n-<md5>``). On create the
  annotations ``provide-api-key: false`` (if absent) and ``exec: <kind>`` are added (``Actions.scala``).
* ``GET`` the same path (``?code=false`` leaves ``exec.code`` out); ``_`` is the caller's namespace.
* ``GET /api/v1/namespaces/{ns}/activations/{id}`` -- the record from the Redis activation store.
* ``POST .../actions/{name}?blocking=true&result=true`` -- invoke through the controller (when one is
  plugged in): 200 with the activation (or only its result), 202 with the id when not blocking.
* Basic auth with ``uuid:key``; a wrong key is 401; a missing entity is 404 with OpenWhisk's body
  ``{"error": "The requested resource does not exist.", "code": <id>}``.

Nothing here is OpenWhisk: it exists because a JVM and CouchDB cannot run on every machine.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from controller_plugin.ledger import activation_record_key

BLOCKING_WAIT_S = 60.0
"""OpenWhisk's ``max-wait-for-blocking-activation``."""
GUEST_KEY = "23bc46b1-71f6-4ed5-8c54-816aa4f8c502:123zO3xZCLrMN6v2BKK1dXYFpXlPkccOFqm12CdAsMgRU4VrNZ9lyGVCGuMDGIwP"
SYSTEM_KEY = "789c46b1-71f6-4ed5-8c54-816aa4f8c502:abczO3xZCLrMN6v2BKK1dXYFpXlPkccOFqm12CdAsMgRU4VrNZ9lyGVCGuMDGIwP"
DEFAULT_LIMITS = {"timeout": 60000, "memory": 256, "logs": 10, "concurrency": 1}


@dataclass
class ActionStore:
    """Action documents by ``(namespace, "[pkg/]name")``; thread-safe."""

    docs: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def put(self, ns: str, entity: str, body: dict[str, Any], overwrite: bool) -> tuple[int, dict[str, Any]]:
        with self.lock:
            old = self.docs.get((ns, entity))
            if old is not None and not overwrite:
                return 409, {"error": "resource already exists", "code": _code()}
            exec_ = body.get("exec")
            if not isinstance(exec_, dict) or not isinstance(exec_.get("kind"), str):
                return 400, {"error": "The request content was malformed:\nexec: missing kind", "code": _code()}
            annotations = [a for a in body.get("annotations") or [] if isinstance(a, dict) and "key" in a]
            keys = {a["key"] for a in annotations}
            if "provide-api-key" not in keys and old is None:
                annotations.append({"key": "provide-api-key", "value": False})
            annotations = [a for a in annotations if a["key"] != "exec"] + [{"key": "exec", "value": exec_["kind"]}]
            exec_ = dict(exec_)
            exec_.setdefault("binary", False)
            if exec_["kind"] == "sequence":
                exec_.pop("binary", None)
            pkg, _, name = entity.rpartition("/")
            version = _bump(old["version"]) if old else "0.0.1"
            n = int(old["_rev"].split("-")[0]) + 1 if old else 1
            doc = {"namespace": f"{ns}/{pkg}" if pkg else ns, "name": name, "version": version,
                   "publish": bool(body.get("publish", False)), "exec": exec_,
                   "annotations": annotations, "parameters": body.get("parameters") or [],
                   "limits": {**DEFAULT_LIMITS, **(body.get("limits") or {})},
                   "updated": int(time.time() * 1000)}
            doc["_rev"] = f"{n}-{hashlib.md5(json.dumps(doc, sort_keys=True).encode()).hexdigest()}"
            self.docs[(ns, entity)] = doc
            return 200, _public(doc, code=True)

    def get(self, ns: str, entity: str) -> dict[str, Any] | None:
        with self.lock:
            doc = self.docs.get((ns, entity))
            return None if doc is None else dict(doc)

    def lookup(self, fqn: str) -> dict[str, Any] | None:
        """The stored document (with ``_rev``) of ``ns/[pkg/]name``, for the controller driver."""
        ns, _, entity = fqn.strip("/").partition("/")
        return self.get(ns, entity)


def _bump(version: str) -> str:
    parts = version.split(".")
    try:
        parts[-1] = str(int(parts[-1]) + 1)
    except ValueError:
        return "0.0.1"
    return ".".join(parts)


def _code() -> str:
    return uuid.uuid4().hex


def _public(doc: dict[str, Any], code: bool) -> dict[str, Any]:
    out = {k: v for k, v in doc.items() if not k.startswith("_")}
    if not code:
        out["exec"] = {k: v for k, v in doc["exec"].items() if k != "code"}
    return out


Invoker = Callable[[str, Any, bool, float], "dict[str, Any] | str"]
"""``(fqn, params, blocking, timeout_s) -> WhiskActivation | activation id``: how POST invokes reach the
controller (the embedded cluster plugs its controller driver in here)."""


class OpenWhiskStandIn:
    """The HTTP server in a daemon thread; ``url`` is its API host. Use as a context manager."""

    def __init__(self, keys: dict[str, str] | None = None, redis_client=None, host: str = "127.0.0.1",
                 port: int = 0, invoker: Invoker | None = None) -> None:
        self.keys = dict(keys or {GUEST_KEY: "guest", SYSTEM_KEY: "whisk.system"})
        self.store = ActionStore()
        self.redis = redis_client
        self.invoker = invoker
        self.requests: list[tuple[str, str, int]] = []
        handler = type("Handler", (_Handler,), {"standin": self})
        self.server = ThreadingHTTPServer((host, port), handler)
        self.server.daemon_threads = True
        self.url = f"http://{host}:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.1},
                                        name="openwhisk-standin", daemon=True)
        self._thread.start()

    def namespace_of(self, header: str | None) -> str | None:
        if not header or not header.startswith("Basic "):
            return None
        try:
            decoded = base64.b64decode(header[6:]).decode()
        except (ValueError, UnicodeDecodeError):
            return None
        return self.keys.get(decoded)

    def put_action(self, fqn: str, body: dict[str, Any], overwrite: bool = True) -> dict[str, Any]:
        """Create or update an action directly (what ``wsk action update`` does through the API)."""
        ns, _, entity = fqn.strip("/").partition("/")
        status, doc = self.store.put(ns, entity, body, overwrite)
        if status != 200:
            raise ValueError(f"cannot put {fqn}: {doc['error']}")
        return doc

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> OpenWhiskStandIn:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Handler(BaseHTTPRequestHandler):
    standin: OpenWhiskStandIn
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
        return  # no access log: it would carry nothing useful, and never an Authorization header

    def _send(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        self.standin.requests.append((self.command, self.path.split("?")[0], status))

    def _route(self) -> tuple[str, str, str, dict[str, list[str]]] | None:
        parts = urlsplit(self.path)
        segs = [unquote(s) for s in parts.path.strip("/").split("/")]
        if len(segs) < 5 or segs[:3] != ["api", "v1", "namespaces"]:
            return None
        return segs[3], segs[4], "/".join(segs[5:]), parse_qs(parts.query)

    def _auth(self) -> str | None:
        ns = self.standin.namespace_of(self.headers.get("Authorization"))
        if ns is None:
            self._send(401, {"error": "The supplied authentication is invalid.", "code": _code()})
        return ns

    def _body(self) -> Any:
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        return json.loads(raw) if raw else {}

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        route = self._route()
        if route is None:
            return self._send(404, {"error": "The requested resource does not exist.", "code": _code()})
        caller = self._auth()
        if caller is None:
            return
        ns, collection, entity, query = route
        ns = caller if ns == "_" else ns
        if collection == "actions" and entity:
            doc = self.standin.store.get(ns, entity)
            if doc is None:
                return self._send(404, {"error": "The requested resource does not exist.", "code": _code()})
            code = query.get("code", ["true"])[0] != "false"
            return self._send(200, _public(doc, code))
        if collection == "activations" and entity and self.standin.redis is not None:
            raw = self.standin.redis.get(activation_record_key(entity))
            if raw is not None:
                return self._send(200, json.loads(raw))
        return self._send(404, {"error": "The requested resource does not exist.", "code": _code()})

    def _action_route(self) -> tuple[str, str, dict[str, list[str]]] | None:
        """(namespace, action, query) of an authenticated ``.../actions/{name}`` request; otherwise
        the 404 or 401 is sent and None returned."""
        route = self._route()
        caller = self._auth() if route is not None else None
        if route is None:
            self._send(404, {"error": "The requested resource does not exist.", "code": _code()})
            return None
        if caller is None:
            return None
        ns, collection, entity, query = route
        if collection != "actions" or not entity or entity.count("/") > 1:
            self._send(404, {"error": "The requested resource does not exist.", "code": _code()})
            return None
        return (caller if ns == "_" else ns), entity, query

    def do_PUT(self) -> None:  # noqa: N802 - the stdlib's name
        route = self._action_route()
        if route is None:
            return
        ns, entity, query = route
        try:
            body = self._body()
        except ValueError:
            return self._send(400, {"error": "The request content was malformed.", "code": _code()})
        if not isinstance(body, dict):
            return self._send(400, {"error": "The request content was malformed.", "code": _code()})
        status, doc = self.standin.store.put(ns, entity, body, query.get("overwrite", ["false"])[0] == "true")
        return self._send(status, doc)

    def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
        """``POST .../actions/{name}?blocking=&result=``: invoke through the controller, as OpenWhisk does."""
        route = self._action_route()
        if route is None:
            return
        ns, entity, query = route
        if self.standin.store.get(ns, entity) is None:
            return self._send(404, {"error": "The requested resource does not exist.", "code": _code()})
        if self.standin.invoker is None:
            return self._send(503, {"error": "No invokers available.", "code": _code()})
        try:
            params = self._body()
        except ValueError:
            return self._send(400, {"error": "The request content was malformed.", "code": _code()})
        blocking = query.get("blocking", ["false"])[0] == "true"
        try:
            answer = self.standin.invoker(f"{ns}/{entity}", params, blocking, BLOCKING_WAIT_S)
        except Exception as exc:  # the controller's 503 / 202 cases
            return self._send(503, {"error": f"The action could not be invoked: {exc}", "code": _code()})
        if isinstance(answer, str):
            return self._send(202, {"activationId": answer})
        if query.get("result", ["false"])[0] == "true":
            return self._send(200, answer.get("response", {}).get("result", {}))
        status = 200 if answer.get("response", {}).get("statusCode") == 0 else 502
        return self._send(status, answer)
