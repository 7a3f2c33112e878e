"""deploy/couchdb/init.py run as the compose file runs it, against a real CouchDB-API server.

The server is pouchdb-server (see conftest.py): it speaks CouchDB's HTTP API for what the init uses
(databases, ``_security``, documents with revisions). Each test uses its own ``DB_PREFIX``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import pytest
import requests

from tests.deploy.deploy_files import ROOT, couchdb_init

pytestmark = pytest.mark.integration

INIT = ROOT / "deploy" / "couchdb" / "init.py"
DESIGN = ROOT / "deploy" / "couchdb" / "design"
ADMIN_ONLY = {"admins": {"names": [], "roles": []}, "members": {"names": [], "roles": ["_admin"]}}


def run_init(couchdb, prefix: str, **env: str) -> subprocess.CompletedProcess:
    base = {"COUCHDB_URL": couchdb.url, "COUCHDB_USER": couchdb.user, "COUCHDB_PASSWORD": couchdb.password,
            "DB_PREFIX": prefix, "COUCHDB_WAIT_S": "10"}
    return subprocess.run([sys.executable, str(INIT)], env={**base, **env}, capture_output=True, text=True,
                          timeout=120)


def get(couchdb, path: str) -> requests.Response:
    return requests.get(f"{couchdb.url}/{path}", auth=(couchdb.user, couchdb.password), timeout=5)


def stored(couchdb, db: str, doc_id: str) -> dict:
    r = get(couchdb, f"{db}/{requests.utils.quote(doc_id, safe='')}")
    assert r.status_code == 200, (db, doc_id, r.text)
    return r.json()


def design_files() -> dict[str, tuple[str, ...]]:
    return couchdb_init().DESIGN_DOCUMENTS


@pytest.fixture
def prefix() -> str:
    return f"t{uuid.uuid4().hex[:8]}_"


def test_a_fresh_server_gets_openwhisks_databases_documents_and_identities(couchdb, prefix):
    r = run_init(couchdb, prefix)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().endswith("OpenWhisk's databases are ready")
    for system in ("_users", "_replicator", "_global_changes"):
        assert get(couchdb, system).status_code == 200, system
    for suffix, files in design_files().items():
        db = prefix + suffix
        assert get(couchdb, db).status_code == 200
        assert get(couchdb, f"{db}/_security").json() == ADMIN_ONLY
        for f in files:
            want = json.loads((DESIGN / f).read_text())
            got = stored(couchdb, db, want["_id"])
            assert {k: v for k, v in got.items() if k != "_rev"} == want, f
    guest_uuid, guest_key = (ROOT / "deploy/couchdb/auth/auth.guest").read_text().strip().split(":")
    guest = stored(couchdb, prefix + "subjects", "guest")
    assert guest["namespaces"] == [{"name": "guest", "uuid": guest_uuid, "key": guest_key}]
    assert stored(couchdb, prefix + "subjects", "whisk.system")["subject"] == "whisk.system"


def test_running_it_again_changes_nothing(couchdb, prefix):
    assert run_init(couchdb, prefix).returncode == 0
    revs = {d: stored(couchdb, prefix + "subjects", d)["_rev"] for d in ("guest", "_design/subjects.v2.0.0")}
    again = run_init(couchdb, prefix)
    assert again.returncode == 0, again.stderr
    steps = [line for line in again.stdout.splitlines() if ": " in line and "ready" not in line]
    assert steps and all(line.endswith(("unchanged", "exists")) for line in steps), again.stdout
    assert revs == {d: stored(couchdb, prefix + "subjects", d)["_rev"] for d in revs}


def test_a_changed_document_is_restored_and_a_new_key_replaces_the_old(couchdb, prefix):
    assert run_init(couchdb, prefix).returncode == 0
    db = prefix + "subjects"
    ddoc = stored(couchdb, db, "_design/subjects.v2.0.0")
    ddoc["views"]["identities"]["map"] = "function (doc) {}"
    r = requests.put(f"{couchdb.url}/{db}/_design%2Fsubjects.v2.0.0", json=ddoc,
                     auth=(couchdb.user, couchdb.password), timeout=5)
    assert r.status_code == 201, r.text
    new_key = f"{uuid.uuid4()}:{'K' * 64}"
    r = run_init(couchdb, prefix, OPENWHISK_GUEST_AUTH=new_key)
    assert r.returncode == 0, r.stderr
    assert f"{db}/_design/subjects.v2.0.0: updated" in r.stdout and f"{db}/guest: updated" in r.stdout
    want = json.loads((DESIGN / "auth_design_document_for_subjects_db_v2.0.0.json").read_text())
    assert stored(couchdb, db, "_design/subjects.v2.0.0")["views"] == want["views"]
    ns = stored(couchdb, db, "guest")["namespaces"]
    assert [f"{n['uuid']}:{n['key']}" for n in ns] == [new_key]


def test_a_wrong_password_is_one_line_and_exit_1_without_waiting_for_the_server(couchdb, prefix):
    # The server answered: a wait longer than run_init's 120 s timeout would only delay the same error.
    r = run_init(couchdb, prefix, COUCHDB_PASSWORD="not-the-password", COUCHDB_WAIT_S="600")
    assert r.returncode == 1
    assert r.stderr.count("\n") == 1 and "HTTP 401" in r.stderr and "Traceback" not in r.stderr
    assert "refused the admin account" in r.stderr
