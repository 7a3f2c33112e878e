"""Action code fetched from a real (local, stdlib) HTTP server speaking OpenWhisk's REST shape."""

from __future__ import annotations

import base64
import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from invoker_agent.actions import ActionFetcher, ActionFetchError, ActionNotFound, parse_fqn

AUTH = "23bc46b1-71f6-4ed5-8c54-816aa4f8c502:123zO3xZCLrMN6v2BKK1dXYFpXlPkccOFqm12CdAsMgRU4VrNZ9lyGVCGuMDGIwP"
KEY = AUTH.split(":", 1)[1]


class OpenWhiskApi(BaseHTTPRequestHandler):
    hits: list[str] = []

    def log_message(self, *a):
        pass

    def do_GET(self):  # noqa: N802
        OpenWhiskApi.hits.append(self.path)
        expected = "Basic " + base64.b64encode(AUTH.encode()).decode()
        if self.headers.get("Authorization") != expected:
            return self._send(401, {"error": "The supplied authentication is invalid"})
        if self.path.startswith("/api/v1/namespaces/guest/actions/resize?code=true"):
            return self._send(200, {
                "namespace": "guest", "name": "resize", "version": "0.0.2", "publish": False,
                "exec": {"kind": "python:3", "binary": False, "code": "def main(a):\n    return a\n"},
                "limits": {"timeout": 30000, "memory": 512, "logs": 10, "concurrency": 1},
                "parameters": [{"key": "quality", "value": 85}],
                "annotations": [{"key": "esg-max-batch", "value": 8}, {"key": "exec", "value": "python:3"}]})
        if self.path.startswith("/api/v1/namespaces/guest/actions/pkg/seq?"):
            return self._send(200, {"namespace": "guest/pkg", "name": "seq", "version": "0.0.1",
                                    "exec": {"kind": "sequence", "components": ["/guest/a"]}})
        return self._send(404, {"error": "The requested resource does not exist."})

    def _send(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def api():
    server = HTTPServer(("127.0.0.1", 0), OpenWhiskApi)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    OpenWhiskApi.hits = []
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_fetch_parses_and_caches_by_revision(api):
    f = ActionFetcher(api, AUTH)
    a = f.get("/guest/resize")
    assert (a.fqn, a.revision, a.kind, a.main, a.timeout_ms, a.memory_mb) == \
        ("/guest/resize", "0.0.2", "python:3", "main", 30000, 512)
    assert a.code.startswith("def main") and a.parameters == {"quality": 85}
    assert a.annotations["esg-max-batch"] == 8
    assert f.get("/guest/resize", "0.0.2") is a and len(OpenWhiskApi.hits) == 1
    f.get("/guest/resize", "0.0.3")                         # another revision: fetched again
    assert len(OpenWhiskApi.hits) == 2


def test_404_names_the_action_and_the_key_never_leaks(api, caplog):
    caplog.set_level(logging.DEBUG)
    f = ActionFetcher(api, AUTH)
    with pytest.raises(ActionNotFound, match="/guest/nope") as e:
        f.get("/guest/nope")
    assert KEY not in str(e.value) and KEY not in repr(f) and KEY not in caplog.text
    with pytest.raises(ActionFetchError, match="refused the agent's credentials") as e:
        ActionFetcher(api, "u:wrong-key").get("/guest/resize")
    assert "wrong-key" not in str(e.value)
    with pytest.raises(ActionFetchError, match="sequence"):
        f.get("/guest/pkg/seq")
    with pytest.raises(ActionFetchError, match="cannot reach") as e:
        ActionFetcher("http://127.0.0.1:9", AUTH, timeout_s=2).get("/guest/resize")
    assert KEY not in str(e.value)


def test_parse_fqn():
    assert parse_fqn("/guest/resize") == ("guest", "resize")
    assert parse_fqn("/guest/pkg/resize") == ("guest", "pkg/resize")
    assert parse_fqn("resize") == ("_", "resize")
