"""The REST stand-in answers the calls ``wsk`` makes as OpenWhisk's API does: status codes, bodies, errors.

What OpenWhisk does is written in the stand-in's docstring (from ``Actions.scala``, ``Activations.scala``,
``ApiUtils.scala``, ``Messages.scala``); these tests hold it to that, through real HTTP and, for
activation records, a real Redis.
"""

from __future__ import annotations

import uuid

import pytest
import requests

from controller_plugin.activation_store import ActivationStore
from esg_cli.openwhisk_standin import GUEST_KEY, OpenWhiskStandIn

AUTH = tuple(GUEST_KEY.split(":"))
CODE = "def main(a):\n    return a\n"


def record(aid: str, code: int, result: dict, start: int, name: str = "hello", ns: str = "guest") -> dict:
    """An activation record as the scheduler stores it (``statusCode`` in the response)."""
    return {"namespace": ns, "name": name, "subject": ns, "activationId": aid, "start": start, "end": start + 7,
            "duration": 7, "response": {"statusCode": code, "result": result}, "logs": ["line 1", "line 2"],
            "version": "0.0.1", "publish": False,
            "annotations": [{"key": "path", "value": f"{ns}/{name}"}, {"key": "kind", "value": "python:3"}]}


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


def _is_error(r: requests.Response, status: int, message: str) -> None:
    assert r.status_code == status, r.text
    body = r.json()
    assert body["error"] == message and isinstance(body["code"], str) and body["code"]


def test_action_create_get_list_update_delete(api):
    r = api.call("PUT", "_/actions/hello", json={"exec": {"kind": "python:3", "code": CODE},
                                                 "annotations": [{"key": "esg-max-batch", "value": 8}]})
    assert r.status_code == 200 and r.json()["version"] == "0.0.1"
    _is_error(api.call("PUT", "_/actions/hello", json={"exec": {"kind": "python:3", "code": CODE}}),
              409, "resource already exists")
    r = api.call("PUT", "_/actions/hello?overwrite=true", json={"exec": {"kind": "python:3", "code": CODE}})
    assert r.status_code == 200 and r.json()["version"] == "0.0.2"
    api.call("PUT", "guest/actions/other", json={"exec": {"kind": "python:3", "code": CODE}})
    got = api.call("GET", "guest/actions/hello?code=false").json()
    assert got["exec"] == {"kind": "python:3", "binary": False} and got["namespace"] == "guest"
    assert api.call("GET", "_/actions/hello").json()["exec"]["code"] == CODE
    listed = api.call("GET", "_/actions?limit=30&skip=0").json()
    assert [a["name"] for a in listed] == ["other", "hello"]            # newest first
    assert all(a["exec"] == {"binary": False} and "limits" in a for a in listed)
    assert [a["name"] for a in api.call("GET", "_/actions?limit=1&skip=1").json()] == ["hello"]
    deleted = api.call("DELETE", "_/actions/hello")
    assert deleted.status_code == 200 and deleted.json()["name"] == "hello"
    _is_error(api.call("GET", "_/actions/hello"), 404, "The requested resource does not exist.")
    _is_error(api.call("DELETE", "_/actions/hello"), 404, "The requested resource does not exist.")


@pytest.mark.parametrize("query, message", [
    ("limit=x", "The value 'x' is not an integer for actions."),
    ("limit=201", "The value '201' is not in the range of 0 to 200 for actions."),
    ("skip=-1", "The value '-1' is not greater than or equal to 0 for actions."),
])
def test_bad_list_parameters_are_400(api, query, message):
    _is_error(api.call("GET", f"_/actions?{query}"), 400, message)


def test_authentication(api):
    _is_error(api.call("GET", "_/actions", auth=None), 401,
              "The resource requires authentication, which was not supplied with the request")
    _is_error(api.call("GET", "_/actions", auth=("u", "wrong")), 401, "The supplied authentication is invalid.")
    _is_error(api.call("GET", "_/triggers"), 404, "The requested resource does not exist.")
    _is_error(api.call("PUT", "_/actions/x", data=b"{not json"), 400, "The request content was malformed.")


@pytest.mark.parametrize("code, http, status", [(0, 200, "success"), (1, 502, "application error"),
                                                (2, 502, "action developer error"), (3, 500, "whisk internal error")])
def test_blocking_invoke_answers_as_openwhisk(api, code, http, status):
    aid = "f" * 32
    result = {"ok": 1} if code == 0 else {"error": "it failed"}
    api.standin.invoker = lambda fqn, params, blocking, timeout: record(aid, code, result, 1000)
    api.standin.put_action("guest/hello", {"exec": {"kind": "python:3", "code": CODE}})
    r = api.call("POST", "_/actions/hello?blocking=true&result=true", json={"x": 1})
    assert r.status_code == http and r.json() == result                  # the result, even for errors
    assert r.headers["x-openwhisk-activation-id"] == aid
    r = api.call("POST", "_/actions/hello?blocking=true", json={"x": 1})
    assert r.status_code == http
    response = r.json()["response"]
    assert response == {"result": result, "status": status, "success": code == 0}   # no statusCode
    assert r.json()["activationId"] == aid and r.json()["duration"] == 7


def test_non_blocking_and_late_invokes_answer_202_with_the_id(api):
    api.standin.invoker = lambda fqn, params, blocking, timeout: "e" * 32
    api.standin.put_action("guest/hello", {"exec": {"kind": "python:3", "code": CODE}})
    for query in ("", "?blocking=true"):              # a blocking call past its wait also gets the id
        r = api.call("POST", f"_/actions/hello{query}", json={})
        assert r.status_code == 202 and r.json() == {"activationId": "e" * 32}
    _is_error(api.call("POST", "_/actions/nosuch", json={}), 404, "The requested resource does not exist.")
    _is_error(api.call("POST", "_/actions/hello", json=[1, 2]), 400, "The request content was malformed.")


def test_activation_get_list_result_logs(couch_url):
    ns = f"ns-{uuid.uuid4().hex[:8]}"
    url = f"{couch_url}/{ns}activations"                # a database of its own in the session's server
    ids = [uuid.uuid4().hex for _ in range(3)]
    store = ActivationStore(url)
    try:
        store.ensure()
        assert store.put_many([record(ids[0], 0, {"ok": 1}, 1000, ns=ns),
                               record(ids[1], 1, {"error": "no"}, 2000, "other", ns),
                               record(ids[2], 0, {}, 3000, ns="someone-else")]) == []
        with OpenWhiskStandIn(keys={GUEST_KEY: ns}, activation_store=url) as s:
            api = Api(s)
            got = api.call("GET", f"_/activations/{ids[1]}").json()
            assert got["response"] == {"result": {"error": "no"}, "status": "application error", "success": False}
            assert api.call("GET", f"_/activations/{ids[1]}/result").json() == got["response"]
            assert api.call("GET", f"_/activations/{ids[0]}/logs").json() == {"logs": ["line 1", "line 2"]}
            listed = api.call("GET", "_/activations?limit=30&skip=0").json()
            assert [a["activationId"] for a in listed] == [ids[1], ids[0]]   # newest first, own namespace
            assert [a["statusCode"] for a in listed] == [1, 0] and all("response" not in a for a in listed)
            docs = api.call("GET", "_/activations?docs=true&name=hello").json()
            assert [a["activationId"] for a in docs] == [ids[0]] and docs[0]["response"]["success"] is True
            _is_error(api.call("GET", f"_/activations/{ids[2]}"), 404, "The requested resource does not exist.")
            _is_error(api.call("GET", "_/activations/not-an-id"), 400, "The activation id is not valid.")
            _is_error(api.call("DELETE", f"_/activations/{ids[0]}"), 405,
                      "HTTP method not allowed, supported methods: GET")
    finally:
        store.close()
