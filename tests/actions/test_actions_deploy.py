"""esg deploy against a small local HTTP stand-in for OpenWhisk's REST API."""

import base64
import io
import json
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from actions import CPU_ONLY, MODULES
from actions.package import action_zip
from esg_cli.main import main as esg_main

REPO_APPS = Path(__file__).resolve().parents[2] / "apps"

AUTH = "23bc46b1-71f6-4ed5-8c54-816aa4f8c502:123zO3xZCLrMN6v2BKK1dXYFpXlPkccOFqm12CdAsMgRU4VrNZ9lyGVCGuMDGIwP"


@pytest.fixture
def openwhisk():
    seen = []

    class Handler(BaseHTTPRequestHandler):
        def do_PUT(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
            name = self.path.split("?")[0].rsplit("/", 1)[-1]
            reply = {"namespace": "guest", "name": name, "version": "0.0.1", "publish": False,
                     "exec": {"kind": body["exec"]["kind"], "binary": body["exec"].get("binary", False)},
                     "annotations": body["annotations"] + [{"key": "exec", "value": body["exec"]["kind"]}],
                     "limits": {"timeout": 60000, "memory": 256, "logs": 10, "concurrency": 1},
                     "parameters": [], "updated": 1718002990000}
            data = json.dumps(reply).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", seen
    server.shutdown()
    server.server_close()


def deploy(argv):
    return esg_main(["deploy", *argv])


def ann(req):
    return {a["key"]: a["value"] for a in req["body"]["annotations"]}


def test_deploy_creates_functions_and_apps(openwhisk, capsys):
    url, seen = openwhisk
    assert deploy(["--apihost", url, "--auth", AUTH, "--image", "me/esg-actions:1"]) == 0
    by_name = {r["path"].split("?")[0].rsplit("/", 1)[-1]: r for r in seen}
    assert set(by_name) == set(MODULES) | {"image-classification", "depth-recognition",
                                           "background-elimination", "expanded-image-classification"}
    expected = "Basic " + base64.b64encode(AUTH.encode()).decode()
    assert all(r["auth"] == expected for r in seen)
    assert all(r["path"].startswith("/api/v1/namespaces/_/actions/") and r["path"].endswith("?overwrite=true")
               for r in seen)
    for fn in MODULES:
        a, exec_ = ann(by_name[fn]), by_name[fn]["body"]["exec"]
        assert a["esg-profile"] == fn and a["esg-max-batch"] == 8  # a number, not "8"
        assert a.get("esg-gpu", True) is (fn not in CPU_ONLY)  # false is the JSON boolean
        assert exec_["kind"] == "blackbox" and exec_["image"] == "me/esg-actions:1" and exec_["binary"]
        names = zipfile.ZipFile(io.BytesIO(base64.b64decode(exec_["code"]))).namelist()
        assert "__main__.py" in names and f"actions/{MODULES[fn]}.py" in names
    # apps: functions first, so an app never names a missing action
    order = [r["path"].split("?")[0].rsplit("/", 1)[-1] for r in seen]
    assert max(order.index(f) for f in MODULES) < order.index("image-classification")
    a = ann(by_name["expanded-image-classification"])
    slo = json.loads((REPO_APPS / "expanded-image-classification.json").read_text())["slo_ms"]
    assert a["esg-slo-ms"] == slo and not isinstance(a["esg-slo-ms"], str)  # the app file's, as a number
    assert a["esg-dag"]["functions"] == ["preprocess", "resnet50", "densenet121", "inceptionv3", "vote"]
    assert ["resnet50", "vote"] in a["esg-dag"]["edges"]
    assert "ESG app" in by_name["image-classification"]["body"]["exec"]["code"]
    assert "ok" in capsys.readouterr().out


def test_auth_and_apihost_from_environment(openwhisk, monkeypatch):
    url, seen = openwhisk
    monkeypatch.setenv("ESG_OPENWHISK_API", url)
    monkeypatch.setenv("ESG_OPENWHISK_AUTH", "u:k")
    assert deploy(["apps/image-classification.json"]) == 0
    assert [r["path"].split("?")[0].rsplit("/", 1)[-1] for r in seen] == [
        "preprocess", "resnet50", "image-classification"]
    assert seen[0]["auth"] == "Basic " + base64.b64encode(b"u:k").decode()
    assert seen[0]["body"]["exec"]["kind"] == "python:3"  # no --image


def test_dry_run_sends_nothing_and_unreachable_host_is_reported(capsys):
    assert deploy(["--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "PUT " in out and '"esg-max-batch"' in out
    assert deploy(["--apihost", "http://127.0.0.1:9", "--auth", "u:k", "apps/image-classification.json"]) == 1
    assert "cannot reach OpenWhisk" in capsys.readouterr().err


def test_print_wsk_writes_the_zips_and_json_annotations(tmp_path, capsys):
    assert deploy(["--print-wsk", "--zip-dir", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    app = next(line for line in lines if line.startswith("wsk action update image-classification "))
    slo = json.loads((REPO_APPS / "image-classification.json").read_text())["slo_ms"]
    assert f"-a esg-slo-ms {slo}" in app
    assert """-a esg-dag '{"functions":["preprocess","resnet50"],"edges":[["preprocess","resnet50"]]}'""" in app
    pre = next(line for line in lines if line.startswith("wsk action update preprocess "))
    assert "-a esg-gpu false" in pre and "-a esg-profile preprocess" in pre
    assert (tmp_path / "depth-post.zip").exists()


def test_zipped_action_runs_from_its_zip_alone(tmp_path):
    """What the runtime does with a zip: unpack it and import __main__'s main."""
    import subprocess
    import sys

    zipfile.ZipFile(io.BytesIO(action_zip("vote"))).extractall(tmp_path)
    code = ("import json, runpy; m = runpy.run_path('__main__.py'); "
            "print(json.dumps(m['main']({'a': {'probs': {'dtype': 'float16', 'shape': [2], "
            "'data': 'ADoANg=='}}})))")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin"}, check=True)
    assert json.loads(out.stdout)["majority"]["class"] == 0
