"""OpenWhisk's activation views, installed in the embedded CouchDB by the same initialisation as the
compose deployment's (``deploy/couchdb/init.py``), index what OpenWhisk's CouchDB would index.

The reference is the design documents' own map functions, run by Node's JavaScript engine outside
strict mode -- as CouchDB's ``couchjs`` runs them -- over the stored documents. PouchDB wraps every map
function in ``"use strict"``; OpenWhisk's ``whisks-filters`` and ``logCleanup`` views assign an undeclared
loop variable, so under strict mode they would throw inside their own ``try`` and index nothing (shown
below); the embedded server (``esg_cli/pouchdb_server.js``) runs them as CouchDB does.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid

import pytest

from controller_plugin.activation_store import ActivationStore
from esg_cli import openwhisk_db
from esg_cli.servers import COUCH_ADMIN, COUCH_PASSWORD

pytestmark = pytest.mark.integration

#: The views of the activations database; the first two are what ``wsk activation list [NAME]`` reads.
VIEWS = [("whisks.v2.1.0", "activations"), ("whisks-filters.v2.1.1", "activations"), ("activations", "byDate"),
         ("logCleanup", "byDateWithLogs")]

REFERENCE = r"""
const vm = require('vm');
const {docs, functions, strict} = JSON.parse(require('fs').readFileSync(0, 'utf8'));
const out = {};
for (const [name, source] of Object.entries(functions)) {
  const rows = [];
  for (const doc of docs) {
    const emitted = [];
    const code = '(function () {' + (strict ? '"use strict";' : '') +
      'var emit = function (k, v) { emitted.push([k, v]); };' +
      'return (' + source + ')(' + JSON.stringify(doc) + '); })()';
    vm.runInNewContext(code, {emitted});
    for (const [key, value] of emitted) rows.push({key, id: doc._id, value});
  }
  out[name] = JSON.parse(JSON.stringify(rows));       // what JSON keeps: undefined fields go
}
console.log(JSON.stringify(out));
"""


def _record(ns: str, name: str, start: int, end: int, **fields) -> dict:
    annotations = fields.pop("annotations", [{"key": "path", "value": f"{ns}/{name}"},
                                             {"key": "kind", "value": "python:3"}])
    return {"namespace": ns, "name": name, "subject": ns, "activationId": uuid.uuid4().hex, "start": start,
            "end": end, "response": {"statusCode": fields.pop("code", 0), "result": {}},
            "logs": fields.pop("logs", ["2024-06-10T08:23:41.502123456Z stdout: hi"]), "version": "0.0.1",
            "publish": False, "annotations": annotations, **fields}


RECORDS = [
    _record("guest", "hello", 1000, 1010, duration=10),
    _record("guest", "hello", 2000, 2030, code=1, duration=30, logs=[]),
    _record("guest", "tool", 3000, 3005, annotations=[{"key": "path", "value": "guest/lib/tool"},
                                                      {"key": "kind", "value": "python:3"}]),
    _record("guest", "tool", 4000, 4005, annotations=[{"key": "path", "value": "whisk.system/utils/tool"},
                                                      {"key": "binding", "value": "guest/mine"},
                                                      {"key": "kind", "value": "python:3"}]),
    _record("guest", "ring", 5000, 0, annotations=[], logs=['{"rule":"guest/r"}']),          # a trigger
    _record("guest", "seq", 6000, 6040, duration=40, logs=["a" * 32, "b" * 32],
            annotations=[{"key": "topmost", "value": True}, {"key": "path", "value": "guest/seq"},
                         {"key": "kind", "value": "sequence"}]),
    _record("whisk.system", "hello", 1500, 1501),
]


def _couch_order(rows: list[dict]) -> list[dict]:
    """CouchDB's view order: by key (numbers before strings before arrays, arrays element by element),
    then by document id."""
    def collate(value):
        if isinstance(value, list):
            return (3, [collate(v) for v in value])
        if isinstance(value, str):
            return (2, value)
        return (1, value)
    return sorted(rows, key=lambda r: (collate(r["key"]), r["id"]))


def _reference(docs: list[dict], functions: dict[str, str], strict: bool) -> dict[str, list[dict]]:
    proc = subprocess.run([shutil.which("node") or "node", "-e", REFERENCE], capture_output=True, text=True,
                          input=json.dumps({"docs": docs, "functions": functions, "strict": strict}), timeout=60)
    assert proc.returncode == 0, proc.stderr
    return {name: _couch_order(rows) for name, rows in json.loads(proc.stdout).items()}


def test_each_activation_view_indexes_what_openwhisks_couchdb_would(couch_url):
    url = openwhisk_db.initialise(couch_url, prefix=f"v{uuid.uuid4().hex[:8]}_")
    store = ActivationStore(url)
    try:
        assert store.put_many(RECORDS) == []
        docs = [store.get(r["namespace"], r["activationId"]) for r in RECORDS]
        functions = {}
        for design, view in VIEWS:
            ddoc = store._call("GET", f"/_design/{design}").json()       # as the initialisation installed it
            functions[f"{design}/{view}"] = ddoc["views"][view]["map"]
        expected = _reference(docs, functions, strict=False)
        for design, view in VIEWS:
            got = store.view(design, view, reduce=False) if design.startswith("whisks") else store.view(design, view)
            rows = [{k: row[k] for k in ("key", "id", "value")} for row in got["rows"]]
            assert rows == expected[f"{design}/{view}"], f"{design}/{view}"
            assert rows, f"{design}/{view} indexes every record it should"
        filters = [r["key"][0] for r in expected["whisks-filters.v2.1.1/activations"]]
        assert filters == ["guest/hello", "guest/hello", "guest/lib/tool", "guest/mine/tool", "guest/ring",
                           "guest/seq", "whisk.system/hello"]
        assert len(expected["logCleanup/byDateWithLogs"]) == 5                 # no logs, or a sequence: kept
        strict = _reference(docs, functions, strict=True)                     # how PouchDB would run them
        assert strict["whisks-filters.v2.1.1/activations"] == [] and strict["logCleanup/byDateWithLogs"] == []
        assert strict["whisks.v2.1.0/activations"] == expected["whisks.v2.1.0/activations"]
    finally:
        store.close()


def test_the_store_refuses_a_client_without_the_admins_credentials(couch_url):
    import requests

    base = couch_url.replace(f"{COUCH_ADMIN}:{COUCH_PASSWORD}@", "")
    for method, path in [("PUT", "/newdb"), ("DELETE", "/_users"), ("GET", "/_all_dbs"), ("PUT", "/x/doc")]:
        r = requests.request(method, base + path, json={"a": 1}, timeout=5)
        assert r.status_code == 401 and r.json() == {"error": "unauthorized", "reason": "Authentication required."}
    r = requests.put(base + "/newdb", auth=("whisk_admin", "wrong"), timeout=5)
    assert r.status_code == 401
    assert requests.get(couch_url + "/", timeout=5).status_code == 200       # still up, still serving the admin
    assert requests.get(couch_url + "/newdb", timeout=5).status_code == 404   # and nothing was created
