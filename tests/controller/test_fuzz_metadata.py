"""Fuzzed wire: the REST metadata parser. Mutated real action documents, served over HTTP as OpenWhisk's
API would, read by the scheduler's :class:`MetadataClient` and turned into a plan by :func:`plan_for`:
a plan, or an :class:`ActivationError` naming the problem (answered to the caller as an error) --
never another exception."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller_plugin.metadata import ActivationError, AppPlan, MetadataClient, ProfileStore, plan_for
from tests.fuzz import FUZZ, mutated


def document(name: str, annotations: dict, kind: str = "python:3") -> dict:
    """An action as OpenWhisk's ``GET .../actions/{name}?code=false`` answers it."""
    return {"namespace": "guest", "name": name, "version": "0.0.3", "publish": False, "updated": 1718002990000,
            "exec": {"kind": kind, "binary": False},
            "limits": {"timeout": 60000, "memory": 256, "logs": 10, "concurrency": 1},
            "parameters": [{"key": "quality", "value": 85}],
            "annotations": [{"key": k, "value": v} for k, v in annotations.items()]
                           + [{"key": "provide-api-key", "value": False}, {"key": "exec", "value": kind}]}


APP = document("imgclass", {"esg-slo-ms": 300, "esg-dag": {"functions": ["pre", "cls"], "edges": [["pre", "cls"]]}})
FUNCTIONS = {"pre": document("pre", {"esg-gpu": False, "esg-max-batch": 8}),
             "cls": document("cls", {"esg-profile": "cls", "esg-max-batch": "4"})}
PROFILE = {"function": "{name}", "gpu_model": "A100-40GB",
           "configs": [{"batch": 1, "vcpus": 1, "gpu": None, "latency_ms": 5.0},
                       {"batch": 4, "vcpus": 2, "gpu": "1g.5gb", "latency_ms": 3.0}]}


class _Api(BaseHTTPRequestHandler):
    docs: dict[str, bytes] = {}

    def log_message(self, *args) -> None:
        return

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        name = self.path.split("?")[0].rsplit("/", 1)[-1]
        body = self.docs.get(name)
        status = 200 if body is not None else 404
        body = body if body is not None else b'{"error":"The requested resource does not exist.","code":"x"}'
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def api():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Api)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join(5)


@pytest.fixture(scope="module")
def profiles(tmp_path_factory):
    d = tmp_path_factory.mktemp("profiles")
    for name in FUNCTIONS:
        (d / f"{name}.json").write_text(json.dumps({**PROFILE, "function": name}))
    return ProfileStore(d)


@FUZZ
@given(which=st.sampled_from(["imgclass", "pre", "cls"]), data=st.data())
def test_mutated_action_documents_give_a_plan_or_a_named_error(api, profiles, which, data):
    docs = {"imgclass": APP, **FUNCTIONS}
    raw = data.draw(mutated(docs[which]))
    _Api.docs = {name: json.dumps(doc).encode() for name, doc in docs.items()} | {which: raw}
    client = MetadataClient(api, "u:k")
    try:
        meta = client.action("guest/imgclass", None, cache=False)
        plan = plan_for(meta, None, lambda fqn: client.action(fqn, None, cache=False), profiles)
    except ActivationError as exc:
        assert str(exc).strip() and exc.status_code in (1, 2, 3)
        return
    assert isinstance(plan, AppPlan) and plan.app.functions


def test_a_document_holding_nan_is_no_json(api):
    _Api.docs = {"odd": json.dumps({**FUNCTIONS["pre"], "name": "odd",
                                    "limits": {"timeout": 60000, "logs": float("nan")}}).encode()}
    with pytest.raises(ActivationError, match="non-JSON"):
        MetadataClient(api, "u:k").action("guest/odd", None, cache=False)
