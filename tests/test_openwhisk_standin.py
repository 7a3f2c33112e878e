"""The REST stand-in answers as OpenWhisk's controller does: status codes, bodies, errors, merges, list
options, entitlement, identities, sequences and triggers.

What OpenWhisk does is written in the stand-in's modules' docstrings (from ``Actions.scala``,
``Packages.scala``, ``Triggers.scala``, ``Rules.scala``, ``Activations.scala``, ``SequenceActions.scala``,
``ApiUtils.scala``, ``ErrorResponse.scala``); these tests hold it to that through real HTTP, and for
activation records a real CouchDB-API server with OpenWhisk's databases and views. The whole path with
the real scheduler and agent, through Apache's client, is ``tests/e2e/test_openwhisk_client.py``.
"""

from __future__ import annotations

import base64
import json
import socket
import threading
import time
import uuid

import pytest
import requests

from controller_plugin.activation_store import ActivationStore
from esg_cli import openwhisk_db
from esg_cli.openwhisk_standin import GUEST_KEY, SYSTEM_KEY, Invocation, OpenWhiskStandIn

AUTH = tuple(GUEST_KEY.split(":"))
SYSTEM = tuple(SYSTEM_KEY.split(":"))
CODE = "def main(a):\n    return a\n"
PY = {"kind": "python:3", "code": CODE}
NOT_FOUND = "The requested resource does not exist."


def record(aid: str, code: int, result: dict, start: int, name: str = "hello", ns: str = "guest",
           path: str | None = None, end: int | None = None, **extra) -> dict:
    """An activation record as the scheduler stores it (``statusCode`` in the response)."""
    annotations = [{"key": "path", "value": path or f"{ns}/{name}"}, {"key": "kind", "value": "python:3"}]
    annotations += [{"key": k, "value": v} for k, v in extra.pop("annotations", {}).items()]
    return {"namespace": ns, "name": name, "subject": ns, "activationId": aid, "start": start,
            "end": start + 7 if end is None else end, "duration": 7, "response": {"statusCode": code, "result": result},
            "logs": ["line 1", "line 2"], "version": "0.0.1", "publish": False, "annotations": annotations, **extra}


class Api:
    def __init__(self, standin: OpenWhiskStandIn) -> None:
        self.url = f"{standin.url}/api/v1/namespaces"
        self.standin = standin

    def call(self, method: str, path: str, auth=AUTH, **kw) -> requests.Response:
        return requests.request(method, f"{self.url}/{path}", auth=auth, timeout=10, **kw)


@pytest.fixture
def api():
    with OpenWhiskStandIn() as s:
        yield Api(s)


@pytest.fixture
def records_url(couch_url):
    """A fresh set of OpenWhisk's databases (its own prefix) in the session's CouchDB-API server."""
    return openwhisk_db.initialise(couch_url, prefix=f"t{uuid.uuid4().hex[:8]}_")


def _is_error(r: requests.Response, status: int, message: str) -> None:
    assert r.status_code == status, r.text
    body = r.json()
    assert body["error"] == message and isinstance(body["code"], str) and body["code"]


def fake_invoker(calls: list[Invocation], code: int = 0, result=None, duration: int = 7,
                 answers: list[dict] | None = None):
    """An invoker standing for the controller driver: records each call (in ``calls``) and answers a
    record of it (blocking; kept in ``answers``) or its id."""
    def invoke(inv: Invocation):
        calls.append(inv)
        aid = uuid.uuid4().hex
        if not inv.blocking:
            return aid
        out = result(inv) if callable(result) else result if result is not None else {"echo": inv.params}
        rec = record(aid, code, out, int(time.time() * 1000), inv.fqn.rpartition("/")[2], inv.user.namespace,
                     path=inv.fqn, annotations={"limits": {"memory": 128 + 64 * len(calls)}})
        rec["duration"] = duration
        if inv.cause:
            rec["cause"] = inv.cause
        if answers is not None:
            answers.append(rec)
        return rec
    return invoke


# -- one kept-alive connection ------------------------------------------------------------------------


class Connection:
    """A raw HTTP/1.1 connection that reads answers by their Content-Length, as a reusing client does."""

    def __init__(self, url: str) -> None:
        host, port = url.removeprefix("http://").split(":")
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.file = self.sock.makefile("rb")

    def request(self, method: str, path: str, body: bytes = b"", auth: tuple | None = AUTH,
                headers: dict | None = None, chunked: bool = False) -> tuple[int, bytes]:
        head = [f"{method} {path} HTTP/1.1", "Host: localhost", "Content-Type: application/json"]
        if auth is not None:
            head.append("Authorization: Basic " + base64.b64encode(":".join(auth).encode()).decode())
        head += [f"{k}: {v}" for k, v in (headers or {}).items()]
        if chunked:
            head.append("Transfer-Encoding: chunked")
            half = len(body) // 2
            payload = b"".join(f"{len(p):x}\r\n".encode() + p + b"\r\n" for p in (body[:half], body[half:]) if p)
            payload += b"0\r\n\r\n"
        else:
            head.append(f"Content-Length: {len(body)}")
            payload = body
        self.sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + payload)
        status = int(self.file.readline().split()[1])
        length = 0
        while (line := self.file.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode().partition(":")
            if name.lower() == "content-length":
                length = int(value)
        return status, self.file.read(length)

    def close(self) -> None:
        self.file.close()
        self.sock.close()


EARLY = [  # (what, method, path, body, auth): each is answered before any route reads the body
    ("401 without credentials", "POST", "/api/v1/namespaces/_/actions/hello", b'{"x": 1}', None),
    ("401 with a wrong key", "POST", "/api/v1/namespaces/_/actions/hello", b'{"x": 1}', ("u", "wrong")),
    ("403 in another namespace", "PUT", "/api/v1/namespaces/whisk.system/actions/x", json.dumps({"exec": PY}).encode(), AUTH),
    ("404 missing action", "POST", "/api/v1/namespaces/_/actions/nosuch?blocking=true", b'{"x": 1}', AUTH),
    ("404 no such route", "POST", "/api/v1/namespaces/_/limits2", b'{"x": 1}', AUTH),
    ("404 outside the API", "PUT", "/nothing/here", b'{"x": 1}', AUTH),
    ("405 on a collection", "POST", "/api/v1/namespaces/_/actions", b'{"x": 1}', AUTH),
    ("405 on an entity", "PATCH", "/api/v1/namespaces/_/actions/hello", b'{"x": 1}', AUTH),
    ("400 malformed JSON", "PUT", "/api/v1/namespaces/_/actions/bad", b"{not json", AUTH),
    ("400 bad list option", "GET", "/api/v1/namespaces/_/actions?limit=x", b'{"x": 1}', AUTH),
    ("409 already exists", "PUT", "/api/v1/namespaces/_/actions/hello", json.dumps({"exec": PY}).encode(), AUTH),
    ("503 no invoker", "POST", "/api/v1/namespaces/_/actions/hello", json.dumps({"x": "y" * 9000}).encode(), AUTH),
]


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
@pytest.mark.parametrize("what, method, path, body, auth", EARLY, ids=[e[0] for e in EARLY])
def test_an_early_answer_leaves_a_kept_alive_connection_usable(api, what, method, path, body, auth, chunked):
    api.standin.put_action("guest/hello", {"exec": PY})
    conn = Connection(api.standin.url)
    try:
        status, _ = conn.request(method, path, body, auth, chunked=chunked)
        assert status == int(what[:3])
        status, answer = conn.request("GET", "/api/v1/namespaces/_/actions/hello")   # the same socket
        assert status == 200 and json.loads(answer)["name"] == "hello"
    finally:
        conn.close()


def test_a_request_the_server_cannot_frame_closes_the_connection(api):
    conn = Connection(api.standin.url)
    try:
        conn.sock.sendall(b"FROB /api/v1 HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")
        assert int(conn.file.readline().split()[1]) == 501
        while conn.file.readline() not in (b"\r\n", b""):
            pass
        conn.file.read()                                     # the server closed it: the read ends
        status, _ = Connection(api.standin.url).request("GET", "/api/v1/namespaces")
        assert status == 200
    finally:
        conn.close()


# -- actions ------------------------------------------------------------------------------------------


def test_action_create_get_list_delete(api):
    r = api.call("PUT", "_/actions/hello", json={"exec": PY, "annotations": [{"key": "esg-max-batch", "value": 8}]})
    assert r.status_code == 200 and r.json()["version"] == "0.0.1"
    ann = {a["key"]: a["value"] for a in r.json()["annotations"]}
    assert ann == {"esg-max-batch": 8, "provide-api-key": False, "exec": "python:3"}
    _is_error(api.call("PUT", "_/actions/hello", json={"exec": PY}), 409, "resource already exists")
    api.call("PUT", "guest/actions/other", json={"exec": PY})
    got = api.call("GET", "guest/actions/hello?code=false").json()
    assert got["exec"] == {"kind": "python:3", "binary": False} and got["namespace"] == "guest"
    assert api.call("GET", "_/actions/hello").json()["exec"]["code"] == CODE
    listed = api.call("GET", "_/actions?limit=30&skip=0").json()
    assert [a["name"] for a in listed] == ["other", "hello"]            # newest first
    assert all(a["exec"] == {"binary": False} and "limits" in a for a in listed)
    assert [a["name"] for a in api.call("GET", "_/actions?limit=1&skip=1").json()] == ["hello"]
    deleted = api.call("DELETE", "_/actions/hello")
    assert deleted.status_code == 200 and deleted.json()["name"] == "hello"
    _is_error(api.call("GET", "_/actions/hello"), 404, NOT_FOUND)
    _is_error(api.call("DELETE", "_/actions/hello"), 404, NOT_FOUND)
    _is_error(api.call("PUT", "_/actions/nothing", json={}), 400, "exec undefined")
    _is_error(api.call("PUT", "_/actions/x", json={"exec": {"kind": "cobol:default", "code": ""}}), 400,
              "The request content was malformed:\nThe specified runtime 'cobol:default' is not supported by this "
              "platform. Valid values are: dotnet:3.1, go:1.20, java:8, nodejs:20, php:8.1, python:3.10, "
              "ruby:2.5, rust:1.34, swift:5.3.")
    assert api.call("PUT", "_/actions/js", json={"exec": {"kind": "nodejs:default", "code": "x=>x"}}
                    ).json()["exec"] == {"kind": "nodejs:20", "code": "x=>x", "binary": False}
    zipped = base64.b64encode(b"PK\x03\x04 a zip").decode()
    assert api.call("PUT", "_/actions/zip", json={"exec": {"kind": "python:3", "code": zipped}}
                    ).json()["exec"]["binary"] is True


def test_an_update_merges_as_openwhisk_does(api):
    api.call("PUT", "_/actions/a", json={
        "exec": PY, "parameters": [{"key": "p", "value": 1}], "limits": {"timeout": 5000, "memory": 512},
        "annotations": [{"key": "esg-gpu", "value": True}, {"key": "web-export", "value": True}]})
    code_only = api.call("PUT", "_/actions/a?overwrite=true",
                         json={"exec": {"kind": "python:3", "code": "def main(a): return {}"}}).json()
    assert code_only["version"] == "0.0.2" and code_only["parameters"] == [{"key": "p", "value": 1}]
    assert code_only["limits"] == {"timeout": 5000, "memory": 512, "logs": 10, "concurrency": 1}
    assert {a["key"] for a in code_only["annotations"]} == {"esg-gpu", "web-export", "provide-api-key", "exec"}
    ann_only = api.call("PUT", "_/actions/a?overwrite=true", json={
        "annotations": [{"key": "tier", "value": "fast"}], "limits": {"timeout": 9000},
        "delAnnotations": ["web-export"]}).json()
    assert ann_only["exec"]["code"] == "def main(a): return {}" and ann_only["version"] == "0.0.3"
    assert ann_only["limits"] == {"timeout": 9000, "memory": 512, "logs": 10, "concurrency": 1}
    assert {a["key"] for a in ann_only["annotations"]} == {"esg-gpu", "tier", "provide-api-key", "exec"}
    params = api.call("PUT", "_/actions/a?overwrite=true", json={"parameters": [{"key": "q", "value": 2}],
                                                                 "version": "1.0.0", "publish": True}).json()
    assert params["parameters"] == [{"key": "q", "value": 2}] and params["version"] == "1.0.0" and params["publish"]
    seq = api.call("PUT", "_/actions/s", json={"exec": {"kind": "sequence", "components": ["_/a"]}}).json()
    assert seq["parameters"] == [{"key": "_actions", "value": ["/guest/a"]}]
    assert seq["exec"] == {"kind": "sequence", "components": ["/guest/a"]}
    kept = api.call("PUT", "_/actions/s?overwrite=true", json={"parameters": [{"key": "x", "value": 1}]}).json()
    assert kept["parameters"] == [{"key": "_actions", "value": ["/guest/a"]}]   # a sequence keeps _actions
    _is_error(api.call("PUT", "_/actions/a?overwrite=true", json={"limits": {"memory": 4096}}), 400,
              "memory 4096 MB exceeds allowed threshold of 512 MB")
    _is_error(api.call("PUT", "_/actions/a?overwrite=true", json={"parameters": "x"}), 400,
              "The request content was malformed:\n'parameters' must be an array of key/value pairs")


def test_one_name_belongs_to_one_collection(api):
    api.call("PUT", "_/actions/thing", json={"exec": PY})
    conformance = "Resource by this name exists but is not in this collection."
    _is_error(api.call("PUT", "_/triggers/thing", json={}), 409, conformance)
    _is_error(api.call("GET", "_/packages/thing"), 409, conformance)
    _is_error(api.call("GET", "_/rules/thing"), 409, conformance)


@pytest.mark.parametrize("query, message", [
    ("limit=x", "The query parameter 'limit' was malformed:\nThe value 'x' is not an integer for actions."),
    ("limit=201", "The query parameter 'limit' was malformed:\nThe value '201' is not in the range of 0 to 200 "
                  "for actions."),
    ("skip=-1", "The query parameter 'skip' was malformed:\nThe value '-1' is not greater than or equal to 0 for "
                "actions."),
    ("count=yes", "The query parameter 'count' was malformed:\n'yes' is not a valid Boolean value"),
])
def test_bad_list_options_are_400(api, query, message):
    _is_error(api.call("GET", f"_/actions?{query}"), 400, message)


def test_list_options_on_every_collection(api):
    for i in range(3):
        api.call("PUT", f"_/actions/a{i}", json={"exec": PY})
        api.call("PUT", f"_/packages/p{i}", json={})
        api.call("PUT", f"_/triggers/t{i}", json={})
        api.call("PUT", f"_/rules/r{i}", json={"trigger": f"/_/t{i}", "action": f"/_/a{i}"})
    for collection in ("actions", "packages", "triggers", "rules"):
        names = [e["name"] for e in api.call("GET", f"_/{collection}").json()]
        assert names == [f"{collection[0]}{i}" for i in (2, 1, 0)]                        # newest first
        assert api.call("GET", f"_/{collection}?count=true").json() == {collection: 3}
        assert api.call("GET", f"_/{collection}?count=true&skip=2").json() == {collection: 1}
        assert [e["name"] for e in api.call("GET", f"_/{collection}?skip=1&limit=1").json()] == [names[1]]
        assert len(api.call("GET", f"_/{collection}?limit=0").json()) == 3                # 0: the maximum
    rule = api.call("GET", "_/rules").json()[0]
    assert rule["trigger"] == {"path": "guest", "name": "t2"} and "status" not in rule   # whole, no status
    assert api.call("GET", "_/packages").json()[0]["binding"] is False


# -- packages -----------------------------------------------------------------------------------------


def test_packages_bindings_and_their_actions(api):
    api.call("PUT", "_/packages/lib", json={"publish": True, "parameters": [{"key": "p", "value": 1},
                                                                            {"key": "q", "value": 1}]})
    api.call("PUT", "_/actions/lib/tool", json={"exec": PY, "parameters": [{"key": "a", "value": 1}]})
    api.call("PUT", "_/actions/lib/feed", json={"exec": PY, "annotations": [{"key": "feed", "value": True}]})
    bound = api.call("PUT", "_/packages/mine", json={"binding": {"namespace": "_", "name": "lib"},
                                                     "parameters": [{"key": "q", "value": 2}]})
    assert bound.json()["annotations"] == [{"key": "binding", "value": {"namespace": "guest", "name": "lib"}}]
    shown = api.call("GET", "_/packages/mine").json()
    assert shown["binding"] == {"namespace": "guest", "name": "lib"}
    assert shown["parameters"] == [{"key": "p", "value": 1}, {"key": "q", "value": 2}]
    assert [a["name"] for a in shown["actions"]] == ["tool"] and [f["name"] for f in shown["feeds"]] == ["feed"]
    tool = api.call("GET", "_/actions/mine/tool").json()
    assert tool["namespace"] == "guest/lib"
    assert tool["parameters"] == [{"key": "p", "value": 1}, {"key": "q", "value": 2}, {"key": "a", "value": 1}]
    assert [a["name"] for a in api.call("GET", "_/actions/mine/").json()] == ["feed", "tool"]
    _is_error(api.call("PUT", "_/actions/mine/x", json={"exec": PY}), 400, "Operation not permitted on package binding.")
    _is_error(api.call("PUT", "_/actions/nopkg/x", json={"exec": PY}), 404, NOT_FOUND)
    _is_error(api.call("PUT", "_/packages/other", json={"binding": {"namespace": "_", "name": "nosuch"}}), 400,
              "Binding references a package that does not exist.")
    _is_error(api.call("PUT", "_/packages/mine2", json={"binding": {"namespace": "_", "name": "mine"}}), 400,
              "Cannot bind to another package binding.")
    _is_error(api.call("PUT", "_/packages/lib?overwrite=true", json={"binding": {"namespace": "_", "name": "x"}}),
              400, "Binding references a package that does not exist.")
    _is_error(api.call("DELETE", "_/packages/lib"), 409,
              "Package not empty (contains 2 entities). Set force param or delete package contents.")
    assert api.call("DELETE", "_/packages/lib?force=true").status_code == 200
    _is_error(api.call("GET", "_/actions/lib/tool"), 404, NOT_FOUND)


def test_entitlement_in_another_namespace(api):
    api.standin.put_package("whisk.system/shared", publish=True)
    api.standin.put_package("whisk.system/private")
    api.standin.put_action("whisk.system/shared/tool", {"exec": PY})
    api.standin.put_action("whisk.system/private/secret", {"exec": PY})
    api.standin.put_action("whisk.system/own", {"exec": PY})
    assert [p["name"] for p in api.call("GET", "whisk.system/packages").json()] == ["shared"]
    assert {p["name"] for p in api.call("GET", "whisk.system/packages", auth=SYSTEM).json()} == {"shared", "private"}
    assert api.call("GET", "whisk.system/actions/shared/tool").status_code == 200
    for method, path, what in [("GET", "whisk.system/actions/private/secret", "whisk.system/private"),
                               ("GET", "whisk.system/actions/own", "whisk.system/own"),
                               ("GET", "whisk.system/actions", "whisk.system"),
                               ("GET", "whisk.system/triggers", "whisk.system"),
                               ("GET", "whisk.system/activations", "whisk.system"),
                               ("GET", "whisk.system/packages/private", "whisk.system/private"),
                               ("DELETE", "whisk.system/actions/shared/tool", "whisk.system/shared/tool"),
                               ("PUT", "whisk.system/rules/r", "whisk.system/r")]:
        _is_error(api.call(method, path, json={}), 403,
                  f"The supplied authentication is not authorized to access '{what}'.")
    _is_error(api.call("GET", "_/packages/nosuch"), 404, "The requested resource 'guest/nosuch' does not exist.")


# -- identities and invokes ---------------------------------------------------------------------------


@pytest.mark.parametrize("code, http, status", [(0, 200, "success"), (1, 502, "application error"),
                                                (2, 502, "action developer error"), (3, 500, "whisk internal error")])
def test_blocking_invoke_answers_as_openwhisk(api, code, http, status):
    result = {"ok": 1} if code == 0 else {"error": "it failed"}
    api.standin.invoker = fake_invoker([], code, result)
    api.standin.put_action("guest/hello", {"exec": PY})
    r = api.call("POST", "_/actions/hello?blocking=true&result=true", json={"x": 1})
    assert r.status_code == http and r.json() == result                  # the result, even for errors
    assert len(r.headers["x-openwhisk-activation-id"]) == 32
    r = api.call("POST", "_/actions/hello?blocking=true", json={"x": 1})
    assert r.status_code == http
    assert r.json()["response"] == {"result": result, "status": status, "success": code == 0}   # no statusCode
    assert r.json()["duration"] == 7


def test_invokes_act_as_their_caller(api):
    calls: list[Invocation] = []
    api.standin.invoker = fake_invoker(calls)
    alice = "a11ce000-71f6-4ed5-8c54-816aa4f8c502:AliceSecretKey0123456789abcdefAliceSecretKey0123456789abcdef"
    api.standin.keys[alice] = "alice"
    api.standin.put_action("whisk.system/own", {"exec": PY, "parameters": [{"key": "fixed", "value": 1}]})
    api.standin.put_action("alice/mine", {"exec": PY})
    assert api.call("POST", "_/actions/own?blocking=true", auth=SYSTEM, json={"x": 1}).status_code == 200
    assert api.call("POST", "_/actions/mine", auth=tuple(alice.split(":")), json={}).status_code == 202
    system, alices = calls
    assert system.user.to_json() == {"subject": "whisk.system", "namespace": {"name": "whisk.system",
                                     "uuid": SYSTEM_KEY.split(":")[0]}, "authkey": {"api_key": SYSTEM_KEY},
                                     "rights": ["READ", "PUT", "DELETE", "ACTIVATE"], "limits": {}}
    assert system.fqn == "whisk.system/own" and system.doc["parameters"] == [{"key": "fixed", "value": 1}]
    assert alices.user.namespace == "alice" and alices.user.api_key == alice and not alices.blocking
    api.standin.put_action("whisk.system/final", {"exec": PY, "parameters": [{"key": "fixed", "value": 1}],
                                                  "annotations": [{"key": "final", "value": True}]})
    _is_error(api.call("POST", "_/actions/final", auth=SYSTEM, json={"fixed": 2}), 400,
              "Request defines parameters that are not allowed (e.g., reserved properties).")


def test_non_blocking_late_and_unavailable_invokes(api):
    api.standin.put_action("guest/hello", {"exec": PY})
    _is_error(api.call("POST", "_/actions/hello", json={}), 503,
              "The server is currently unavailable (because it is overloaded or down for maintenance).")
    api.standin.invoker = lambda inv: "e" * 32
    for query in ("", "?blocking=true"):              # a blocking call past its wait also gets the id
        r = api.call("POST", f"_/actions/hello{query}", json={})
        assert r.status_code == 202 and r.json() == {"activationId": "e" * 32}
    _is_error(api.call("POST", "_/actions/hello", json=[1, 2]), 400, "The request content was malformed:\n"
                                                                     "JSON object expected")
    _is_error(api.call("POST", "_/actions/hello?blocking=true&timeout=90000", json={}), 400,
              "The query parameter 'timeout' was malformed:\nTimeout must be number of milliseconds up to 60000.")


def test_authentication_and_routes(api):
    _is_error(api.call("GET", "_/actions", auth=None), 401,
              "The resource requires authentication, which was not supplied with the request")
    _is_error(api.call("GET", "_/actions", auth=("u", "wrong")), 401, "The supplied authentication is invalid")
    _is_error(api.call("GET", "_/nothing"), 404, "The requested resource could not be found.")
    assert api.call("GET", "").json() == ["guest"]
    assert requests.get(api.url, auth=SYSTEM, timeout=5).json() == ["whisk.system"]
    _is_error(api.call("DELETE", "_/packages"), 405, "HTTP method not allowed, supported methods: GET")
    _is_error(api.call("POST", "_/packages/p"), 405, "HTTP method not allowed, supported methods: PUT, GET, DELETE")
    _is_error(api.call("GET", "_/actions/bad%2Aname"), 400, "The name of the entity contains illegal characters.")
    assert requests.get(f"{api.standin.url}/api/v1", timeout=5).json()["api_paths"] == ["/api/v1"]


# -- sequences ----------------------------------------------------------------------------------------


def _store_reader(url: str):
    store = ActivationStore(url)

    def get(ns: str, aid: str, timeout: float = 10.0) -> dict:
        deadline = time.monotonic() + timeout
        while (doc := store.get(ns, aid)) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert doc is not None, f"{ns}/{aid} never stored"
        return doc
    return store, get


def test_a_sequence_runs_component_by_component(records_url):
    calls: list[Invocation] = []
    answers: list[dict] = []
    with OpenWhiskStandIn(activation_store=records_url, invoker=fake_invoker(calls, duration=5, answers=answers)) as s:
        api = Api(s)
        s.put_package("guest/lib")
        s.put_action("guest/first", {"exec": PY})
        s.put_action("guest/lib/second", {"exec": PY, "limits": {"timeout": 1000}})
        s.put_action("guest/inner", {"exec": {"kind": "sequence", "components": ["/guest/lib/second"]}})
        api.call("PUT", "_/actions/seq", json={"exec": {"kind": "sequence",
                                                        "components": ["/_/first", "/_/inner"]}})
        r = api.call("POST", "_/actions/seq?blocking=true", json={"n": 1})
        assert r.status_code == 200, r.text
        seq = r.json()
        assert [c.fqn for c in calls] == ["guest/first", "guest/lib/second"]
        assert calls[0].params == {"n": 1} and calls[1].params == {"echo": {"n": 1}}     # the previous result
        assert all(c.blocking and c.user.namespace == "guest" for c in calls)
        inner_id = seq["logs"][1]
        assert seq["logs"] == [answers[0]["activationId"], inner_id]
        assert calls[0].cause == seq["activationId"] and calls[1].cause == inner_id
        assert calls[1].timeout_s == 61.0                                # its time limit + 1 minute
        assert seq["response"]["result"] == {"echo": {"echo": {"n": 1}}} and seq["duration"] == 10
        ann = {a["key"]: a["value"] for a in seq["annotations"]}
        assert ann["topmost"] is True and ann["kind"] == "sequence" and ann["path"] == "guest/seq"
        assert ann["limits"]["memory"] == 256 and ann["waitTime"] >= 0
        store, get = _store_reader(records_url)
        try:
            inner = get("guest", inner_id)                        # an inner sequence: caused by the outer
            assert inner["cause"] == seq["activationId"] and inner["logs"] == [answers[1]["activationId"]]
            inner_ann = {a["key"]: a["value"] for a in inner["annotations"]}
            assert inner_ann["causedBy"] == "sequence" and inner_ann["topmost"] is False
            assert get("guest", seq["activationId"])["logs"] == seq["logs"]     # the controller stored it
        finally:
            store.close()


def test_a_sequence_stops_at_an_error_and_at_a_missing_component(api):
    calls: list[Invocation] = []
    api.standin.invoker = fake_invoker(calls, code=1, result={"error": "no"})
    for name in ("a", "b"):
        api.standin.put_action(f"guest/{name}", {"exec": PY})
    api.call("PUT", "_/actions/s", json={"exec": {"kind": "sequence", "components": ["/_/a", "/_/b"]}})
    r = api.call("POST", "_/actions/s?blocking=true", json={})
    assert r.status_code == 502 and r.json()["response"]["result"] == {"error": "no"} and len(calls) == 1
    api.call("DELETE", "_/actions/a")
    r = api.call("POST", "_/actions/s?blocking=true", json={})
    assert r.json()["response"] == {"result": {"error": "Sequence component does not exist."},
                                    "status": "application error", "success": False}
    _is_error(api.call("PUT", "_/actions/loop?overwrite=true", json={"exec": {"kind": "sequence",
                                                                             "components": ["/_/loop"]}}),
              400, "Sequence may not refer to itself.")
    _is_error(api.call("PUT", "_/actions/s2", json={"exec": {"kind": "sequence", "components": ["/_/nosuch"]}}),
              400, "Sequence component does not exist.")
    api.call("PUT", "_/actions/a", json={"exec": PY})
    _is_error(api.call("PUT", "_/actions/s?overwrite=true", json={"exec": {"kind": "sequence",
                                                                          "components": ["/_/s"]}}),
              400, "Sequence may not refer to itself.")
    _is_error(api.call("PUT", "_/actions/none", json={"exec": {"kind": "sequence", "components": []}}),
              400, "No component specified for the sequence.")


def test_a_blocking_sequence_past_its_wait_answers_its_id(api):
    release = threading.Event()

    def slow(inv: Invocation):
        release.wait(10)
        return fake_invoker([])(inv)

    api.standin.invoker = slow
    api.standin.put_action("guest/a", {"exec": PY})
    api.call("PUT", "_/actions/s", json={"exec": {"kind": "sequence", "components": ["/_/a"]}})
    r = api.call("POST", "_/actions/s?blocking=true&timeout=200", json={})
    release.set()
    assert r.status_code == 202 and len(r.json()["activationId"]) == 32


# -- triggers and rules -------------------------------------------------------------------------------


def test_firing_a_trigger_invokes_its_active_rules_actions_as_the_caller(records_url):
    calls: list[Invocation] = []
    with OpenWhiskStandIn(activation_store=records_url, invoker=fake_invoker(calls)) as s:
        api = Api(s)
        s.put_action("guest/hello", {"exec": PY, "parameters": [{"key": "p", "value": 0}]})
        api.call("PUT", "_/triggers/t", json={"parameters": [{"key": "tp", "value": 1}]})
        made = api.call("PUT", "_/rules/r", json={"trigger": "/_/t", "action": "/_/hello"}).json()
        assert made["status"] == "active" and made["action"] == {"path": "guest", "name": "hello"}
        api.call("PUT", "_/rules/gone", json={"trigger": "/_/t", "action": "/_/hello"})
        api.call("DELETE", "_/actions/hello")
        s.put_action("guest/hello", {"exec": PY, "parameters": [{"key": "p", "value": 0}]})
        trigger = api.call("GET", "_/triggers/t").json()
        assert trigger["rules"] == {"guest/r": {"action": {"path": "guest", "name": "hello"}, "status": "active"},
                                    "guest/gone": {"action": {"path": "guest", "name": "hello"}, "status": "active"}}
        api.call("DELETE", "_/rules/gone")
        r = api.call("POST", "_/triggers/t", json={"x": 2}, headers={"X-Custom": "yes"})
        assert r.status_code == 202
        aid = r.json()["activationId"]
        store, get = _store_reader(records_url)
        try:
            rec = get("guest", aid)
            assert rec["end"] == 0 and rec["response"] == {"statusCode": 0, "result": {"x": 2}}
            (entry,) = [json.loads(line) for line in rec["logs"]]
            assert entry["rule"] == "guest/r" and entry["action"] == "guest/hello" and entry["success"] is True
            (call,) = calls
            assert entry["activationId"] and not call.blocking and call.user.namespace == "guest"
            assert call.params["tp"] == 1 and call.params["x"] == 2 and call.params["__ow_headers"]["x-custom"] == "yes"
            shown = api.call("GET", f"_/activations/{aid}").json()
            assert "end" not in shown and "duration" not in shown
        finally:
            store.close()
        assert api.call("POST", "_/rules/r", json={"status": "inactive"}).text == "OK"
        assert api.call("GET", "_/rules/r").json()["status"] == "inactive"
        assert api.call("POST", "_/triggers/t", json={}).status_code == 204 and len(calls) == 1
        assert api.call("POST", "_/rules/r", json={"status": "inactive"}).status_code == 200   # no change: OK
        _is_error(api.call("POST", "_/rules/r", json={"status": "paused"}), 400, "The request content was malformed:\n"
                  "'paused' is not a recognized rule state, must be one of ['active', 'inactive']")
        _is_error(api.call("PUT", "_/rules/x", json={"trigger": "/_/t", "action": "/_/nosuch"}), 400,
                  "action /guest/nosuch does not exist")
        updated = api.call("PUT", "_/rules/r?overwrite=true", json={"trigger": "/_/t", "action": "/_/hello"}).json()
        assert updated["status"] == "inactive" and updated["version"] == "0.0.2"
        api.call("DELETE", "_/triggers/t")
        assert api.call("GET", "_/rules/r").json()["status"] == "inactive"
        _is_error(api.call("POST", "_/rules/r", json={"status": "active"}), 404,
                  "Only rules with existing triggers can be activated")


# -- activation records through OpenWhisk's views -----------------------------------------------------


def test_activations_are_listed_through_openwhisks_views(records_url):
    ids = [uuid.uuid4().hex for _ in range(5)]
    store = ActivationStore(records_url)
    try:
        assert store.put_many([
            record(ids[0], 0, {"ok": 1}, 1000),
            record(ids[1], 1, {"error": "no"}, 2000, "other"),
            record(ids[2], 0, {}, 3000, "tool", path="guest/lib/tool"),
            record(ids[3], 0, {}, 4000, "tool", path="whisk.system/shared/tool",
                   annotations={"binding": "guest/mine"}),
            record(ids[4], 0, {}, 5000, ns="someone-else")]) == []
        with OpenWhiskStandIn(activation_store=records_url) as s:
            api = Api(s)
            got = api.call("GET", f"_/activations/{ids[1]}").json()
            assert got["response"] == {"result": {"error": "no"}, "status": "application error", "success": False}
            assert api.call("GET", f"_/activations/{ids[1]}/result").json() == got["response"]
            assert api.call("GET", f"_/activations/{ids[0]}/logs").json() == {"logs": ["line 1", "line 2"]}

            def listed(query: str) -> list[str]:
                r = api.call("GET", f"_/activations?{query}")
                assert r.status_code == 200, r.text
                return [a["activationId"] for a in r.json()]

            assert listed("") == [ids[3], ids[2], ids[1], ids[0]]           # newest first, own namespace
            summary = api.call("GET", "_/activations?limit=1").json()[0]
            assert summary == {"namespace": "guest", "name": "tool", "version": "0.0.1", "publish": False,
                               "annotations": record(ids[3], 0, {}, 4000, "tool", path="whisk.system/shared/tool",
                                                     annotations={"binding": "guest/mine"})["annotations"],
                               "activationId": ids[3], "start": 4000, "end": 4007, "duration": 7, "statusCode": 0}
            assert listed("skip=1&limit=2") == [ids[2], ids[1]]
            assert listed("since=2000&upto=3000") == [ids[2], ids[1]]
            assert listed("name=hello") == [ids[0]]
            assert listed("name=lib/tool") == [ids[2]]
            assert listed("name=mine/tool") == [ids[3]]                    # by its binding
            assert api.call("GET", "_/activations?count=true").json() == {"activations": 4}
            assert api.call("GET", "_/activations?count=true&skip=1&since=2000").json() == {"activations": 2}
            docs = api.call("GET", "_/activations?docs=true&name=other").json()
            assert [d["response"]["status"] for d in docs] == ["application error"] and docs[0]["logs"]
            _is_error(api.call("GET", "_/activations?count=true&docs=true"), 400,
                      "The parameter 'docs' is not permitted with 'count'.")
            _is_error(api.call("GET", "_/activations?since=yesterday"), 400,
                      "The query parameter 'since' was malformed:\nParameter is not a valid value for epoch "
                      "seconds: yesterday")
            _is_error(api.call("GET", "_/activations?name=a/b/c"), 400, "The query parameter 'name' was malformed:\n"
                      "Parameter may be a 'simple' name or 'package-name/simple' name: a/b/c")
            _is_error(api.call("GET", f"_/activations/{ids[4]}"), 404, NOT_FOUND)
            _is_error(api.call("GET", "_/activations/not-an-id"), 400, "The activation id is not valid.")
            _is_error(api.call("DELETE", f"_/activations/{ids[0]}"), 405, "HTTP method not allowed, supported methods: GET")
    finally:
        store.close()


def test_a_store_that_fails_is_a_500_never_an_empty_list():
    with OpenWhiskStandIn(activation_store="http://u:p@127.0.0.1:9/whisk_local_activations") as s:
        api = Api(s)
        _is_error(api.call("GET", "_/activations"), 500, "There was an internal server error.")
        _is_error(api.call("GET", f"_/activations/{'a' * 32}"), 500, "There was an internal server error.")
