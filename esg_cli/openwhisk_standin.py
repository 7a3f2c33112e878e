"""A stand-in for OpenWhisk's REST API (actions and activation records), for the embedded cluster and tests.

It answers the calls ``wsk`` makes -- ``action list/get/create/update/delete/invoke`` and
``activation list/get/result/logs`` -- with OpenWhisk's status codes and bodies (``Actions.scala``,
``Activations.scala``, ``ApiUtils.scala``, ``Messages.scala``), and the reads the scheduler, the agents
and ``actions/deploy.py`` make:

* ``GET /api/v1/namespaces/{ns}/actions[?limit=&skip=]`` -- summaries (``exec`` holds only ``binary``),
  newest first; ``limit`` 0-200 (default 30), ``skip`` >= 0, otherwise 400 naming the value.
* ``PUT .../actions/[{pkg}/]{name}[?overwrite=true]`` -- create or update; a second create without
  ``overwrite=true`` is 409 ``resource already exists``. The version starts at ``0.0.1`` and its patch
  number grows on each update; each write gets a new CouchDB-style revision (``n-<md5>``). On create the
  annotations ``provide-api-key: false`` (if absent) and ``exec: <kind>`` are added.
* ``GET`` the same path (``?code=false`` leaves ``exec.code`` out); ``DELETE`` answers the deleted action.
* ``POST .../actions/{name}[?blocking=true[&result=true]]`` -- invoke through the controller (when one is
  plugged in). Not blocking, or blocking past the wait: 202 ``{"activationId"}``. Blocking: the
  activation (``result=true``: only its result) with 200 on success, 502 for an application or action
  developer error, 500 for a whisk internal error -- as OpenWhisk answers, the result body included.
  Every answer carries the ``x-openwhisk-activation-id`` header.
* ``GET /api/v1/namespaces/{ns}/activations[?limit=&skip=&name=&docs=true]`` -- summaries (or whole
  records), newest first; ``GET .../activations/{id}`` the record, ``.../{id}/result`` its response,
  ``.../{id}/logs`` ``{"logs": [...]}``; records come from OpenWhisk's activation store (CouchDB's API,
  documents ``{namespace}/{activationId}``, as the scheduler writes them). An id that is not 32 hex
  digits is 400.
* Records and results are shown as OpenWhisk shows them to users: the ``response`` has ``status``
  (``success``, ``application error``, ``action developer error``, ``whisk internal error``) and
  ``success`` instead of ``statusCode``.
* Entitlement as OpenWhisk's (``Entitlement.scala``, ``PackageCollection``): a key acts in its own
  namespace; in another one it may only read (``GET``) and invoke (``POST``) an action in a package that
  namespace shares (``publish: true``); anything else there is 403 ``The supplied authentication is not
  authorized to access '<ns>/<entity>'.``. An action read or invoked through a package binding
  (``ns/binding/name``) is the bound package's action, under the same rule. Packages are made with
  :meth:`OpenWhiskStandIn.put_package` (no REST route for them).
* Basic auth with ``uuid:key``: none is 401 ``The resource requires authentication, which was not
  supplied with the request``, a wrong key 401 ``The supplied authentication is invalid.``; a missing
  entity is 404 ``The requested resource does not exist.``. Every error body is
  ``{"error": <message>, "code": <transaction id>}``.

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

from controller_plugin.activation_store import ActivationStore, StoreError, record_of
from esg_cli import openwhisk_views as views
from openwhisk_status import DEFAULT_LIMITS

BLOCKING_WAIT_S = 60.0
"""OpenWhisk's ``max-wait-for-blocking-activation``."""
GUEST_KEY = "23bc46b1-71f6-4ed5-8c54-816aa4f8c502:123zO3xZCLrMN6v2BKK1dXYFpXlPkccOFqm12CdAsMgRU4VrNZ9lyGVCGuMDGIwP"
SYSTEM_KEY = "789c46b1-71f6-4ed5-8c54-816aa4f8c502:abczO3xZCLrMN6v2BKK1dXYFpXlPkccOFqm12CdAsMgRU4VrNZ9lyGVCGuMDGIwP"


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

    def delete(self, ns: str, entity: str) -> dict[str, Any] | None:
        with self.lock:
            return self.docs.pop((ns, entity), None)

    def list(self, ns: str) -> list[dict[str, Any]]:
        """The actions of namespace ``ns`` (packages included), newest first."""
        with self.lock:
            docs = [dict(d) for (n, _), d in self.docs.items() if n == ns]
        return sorted(docs, key=lambda d: d["updated"], reverse=True)

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


class _Server(ThreadingHTTPServer):
    request_queue_size = 1024
    """The listen backlog: ``esg replay`` opens up to 128 connections at once, and Python's default of 5
    overflowed, the kernel resetting the connections it could not queue (tests/test_standin_concurrency.py)."""


class OpenWhiskStandIn:
    """The HTTP server in a daemon thread; ``url`` is its API host. Use as a context manager."""

    def __init__(self, keys: dict[str, str] | None = None, activation_store: str | None = None,
                 host: str = "127.0.0.1", port: int = 0, invoker: Invoker | None = None) -> None:
        self.keys = dict(keys or {GUEST_KEY: "guest", SYSTEM_KEY: "whisk.system"})
        self.store = ActionStore()
        self.packages: dict[tuple[str, str], dict[str, Any]] = {}
        self.activation_store = activation_store
        self.invoker = invoker
        self.requests: list[tuple[str, str, int]] = []
        handler = type("Handler", (_Handler,), {"standin": self})
        self.server = _Server((host, port), handler)
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

    def put_package(self, fqn: str, publish: bool = False, binding: str | None = None) -> None:
        """Create package ``ns/name``: shared when ``publish``; a binding to package ``binding`` (``ns/name``)."""
        ns, _, name = fqn.strip("/").partition("/")
        self.packages[(ns, name)] = {"publish": publish, "binding": binding.strip("/") if binding else None}

    def resolve(self, ns: str, entity: str) -> tuple[str, str]:
        """``(ns, entity)`` of the action ``ns/entity`` names, through a package binding if it is one."""
        pkg, _, name = entity.rpartition("/")
        bound = self.packages.get((ns, pkg), {}).get("binding") if pkg else None
        if bound:
            bns, _, bpkg = bound.partition("/")
            return bns, f"{bpkg}/{name}"
        return ns, entity

    def entitled(self, caller: str, ns: str, entity: str, method: str) -> bool:
        """OpenWhisk's rule: all rights in one's own namespace; elsewhere READ and ACTIVATE of an action in
        a shared package."""
        if caller == ns:
            return True
        pkg = entity.rpartition("/")[0]
        return method in ("GET", "POST") and bool(pkg) and self.packages.get((ns, pkg), {}).get("publish", False)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> OpenWhiskStandIn:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


NOT_FOUND = "The requested resource does not exist."
NO_AUTH = "The resource requires authentication, which was not supplied with the request"
BAD_AUTH = "The supplied authentication is invalid."
MALFORMED = "The request content was malformed."
BAD_ACTIVATION_ID = "The activation id is not valid."


class _Handler(BaseHTTPRequestHandler):
    standin: OpenWhiskStandIn
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
        return  # no access log: it would carry nothing useful, and never an Authorization header

    def _send(self, status: int, body: Any, activation_id: str | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if activation_id is not None:
            self.send_header("x-openwhisk-activation-id", activation_id)
        self.end_headers()
        self.wfile.write(data)
        self.standin.requests.append((self.command, self.path.split("?")[0], status))

    def _error(self, status: int, message: str) -> None:
        self._send(status, {"error": message, "code": _code()})

    def _route(self) -> tuple[str, str, str, dict[str, list[str]]] | None:
        """(namespace, collection, entity path, query) of an authenticated API call; otherwise the 404 or
        401 is sent and None returned."""
        parts = urlsplit(self.path)
        segs = [unquote(s) for s in parts.path.strip("/").split("/")]
        if len(segs) < 5 or segs[:3] != ["api", "v1", "namespaces"] or segs[4] not in ("actions", "activations"):
            self._error(404, NOT_FOUND)
            return None
        header = self.headers.get("Authorization")
        caller = self.standin.namespace_of(header)
        if caller is None:
            self._error(401, BAD_AUTH if header else NO_AUTH)
            return None
        ns = caller if segs[3] == "_" else segs[3]
        entity = "/".join(segs[5:])
        if segs[4] == "actions" and entity:
            ns, entity = self.standin.resolve(ns, entity)
        if not self.standin.entitled(caller, ns, entity if segs[4] == "actions" else "", self.command):
            self._error(403, f"The supplied authentication is not authorized to access '{ns}/{entity or segs[4]}'.")
            return None
        return ns, segs[4], entity, parse_qs(parts.query)

    def _body(self) -> Any:
        """The request's JSON; ValueError when it is not JSON (or nested beyond what a parser takes)."""
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        try:
            return json.loads(raw) if raw else {}
        except RecursionError:
            raise ValueError("nested too deeply") from None

    def _dispatch(self, handlers: dict[str, Callable[..., None]]) -> None:
        route = self._route()
        if route is None:
            return
        ns, collection, entity, query = route
        handler = handlers.get(f"{collection}{'/' if entity else ''}")
        if handler is None:
            allowed = {"actions": "GET", "actions/": "GET, PUT, DELETE, POST", "activations": "GET",
                       "activations/": "GET"}[f"{collection}{'/' if entity else ''}"]
            return self._error(405, f"HTTP method not allowed, supported methods: {allowed}")
        if collection == "actions" and entity.count("/") > 1:
            return self._error(404, NOT_FOUND)
        handler(ns, entity, query)

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        self._dispatch({"actions": self._list_actions, "actions/": self._get_action,
                        "activations": self._list_activations, "activations/": self._get_activation})

    def do_PUT(self) -> None:  # noqa: N802 - the stdlib's name
        self._dispatch({"actions/": self._put_action})

    def do_DELETE(self) -> None:  # noqa: N802 - the stdlib's name
        self._dispatch({"actions/": self._delete_action})

    def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
        self._dispatch({"actions/": self._invoke})

    # -- actions -------------------------------------------------------------------------------------
    def _list_actions(self, ns: str, _entity: str, query: dict[str, list[str]]) -> None:
        paging = views.page(query, "actions")
        if isinstance(paging, str):
            return self._error(400, paging)
        skip, limit = paging
        docs = self.standin.store.list(ns)[skip:]
        self._send(200, [views.action_summary(d) for d in docs[:limit]])

    def _get_action(self, ns: str, entity: str, query: dict[str, list[str]]) -> None:
        doc = self.standin.store.get(ns, entity)
        if doc is None:
            return self._error(404, NOT_FOUND)
        self._send(200, _public(doc, query.get("code", ["true"])[0] != "false"))

    def _put_action(self, ns: str, entity: str, query: dict[str, list[str]]) -> None:
        try:
            body = self._body()
        except ValueError:
            return self._error(400, MALFORMED)
        if not isinstance(body, dict):
            return self._error(400, MALFORMED)
        status, doc = self.standin.store.put(ns, entity, body, query.get("overwrite", ["false"])[0] == "true")
        self._send(status, doc)

    def _delete_action(self, ns: str, entity: str, _query: dict[str, list[str]]) -> None:
        doc = self.standin.store.delete(ns, entity)
        if doc is None:
            return self._error(404, NOT_FOUND)
        self._send(200, _public(doc, code=True))

    def _invoke(self, ns: str, entity: str, query: dict[str, list[str]]) -> None:
        """Invoke through the controller, answered as ``Actions.doInvoke`` answers."""
        if self.standin.store.get(ns, entity) is None:
            return self._error(404, NOT_FOUND)
        if self.standin.invoker is None:
            return self._error(503, "No invokers available.")
        try:
            params = self._body()
        except ValueError:
            return self._error(400, MALFORMED)
        if not isinstance(params, dict):
            return self._error(400, MALFORMED)
        blocking = query.get("blocking", ["false"])[0] == "true"
        try:
            answer = self.standin.invoker(f"{ns}/{entity}", params, blocking, BLOCKING_WAIT_S)
        except Exception as exc:  # the controller's 503: no healthy invoker
            return self._error(503, f"The action could not be invoked: {exc}")
        if isinstance(answer, str):   # not blocking, or no answer within the wait: the id
            return self._send(202, {"activationId": answer}, activation_id=answer)
        code = views.status_code(answer)
        body = (answer.get("response") or {}).get("result", {}) if query.get("result", ["false"])[0] == "true" \
            else views.extended(answer)
        self._send(views.HTTP_STATUS[code], body, activation_id=answer.get("activationId"))

    # -- activations ---------------------------------------------------------------------------------
    def _store(self) -> ActivationStore | None:
        url = self.standin.activation_store
        return None if url is None else ActivationStore(url)

    def _records(self, ns: str) -> list[dict[str, Any]]:
        """The activation records of namespace ``ns`` in the store, newest first."""
        store = self._store()
        if store is None:
            return []
        try:
            docs = store.in_namespace(ns)
        except StoreError:
            docs = []
        finally:
            store.close()
        return sorted((record_of(d) for d in docs), key=lambda rec: rec.get("start", 0), reverse=True)

    def _list_activations(self, ns: str, _entity: str, query: dict[str, list[str]]) -> None:
        paging = views.page(query, "activations")
        if isinstance(paging, str):
            return self._error(400, paging)
        skip, limit = paging
        docs = query.get("docs", ["false"])[0] == "true"
        name = query.get("name", [None])[0]
        records = [rec for rec in self._records(ns) if name is None or rec.get("name") == name.split("/")[-1]]
        records = records[skip:][:limit]
        self._send(200, [views.extended(rec) if docs else views.activation_summary(rec) for rec in records])

    def _get_activation(self, ns: str, entity: str, _query: dict[str, list[str]]) -> None:
        aid, _, part = entity.partition("/")
        if not views.valid_activation_id(aid):
            return self._error(400, BAD_ACTIVATION_ID)
        if part not in ("", "result", "logs"):
            return self._error(404, NOT_FOUND)
        store = self._store()
        record = None
        if store is not None:
            try:
                doc = store.get(ns, aid)
            except StoreError:
                doc = None
            finally:
                store.close()
            record = None if doc is None else record_of(doc)
        if not isinstance(record, dict) or str(record.get("namespace", "")).split("/")[0] != ns:
            return self._error(404, NOT_FOUND)
        if part == "result":
            return self._send(200, views.extended_response(record.get("response") or {}))
        if part == "logs":
            return self._send(200, {"logs": list(record.get("logs") or [])})
        self._send(200, views.extended(record))
