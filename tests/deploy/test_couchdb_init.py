"""What deploy/couchdb/init.py writes is what OpenWhisk's controller reads.

The controller authenticates a call by querying the subjects database's ``subjects.v2.0.0/identities``
view with ``[uuid, key]`` (``Identity.get``, ``include_docs``, limit 2, exactly one row expected) and
turns the row into an ``Identity`` (``Identity.rowToIdentity``): fields ``id``, ``value`` (``uuid``,
``key``, ``namespace`` strings) and ``doc`` (the ``{namespace}/limits`` document or null), with
``Subject`` at least 5 characters, ``Secret`` exactly 64, ``EntityName`` OpenWhisk's name pattern
(``common/scala/.../core/entity/Identity.scala``, ``WhiskAuth.scala``, ``Subject.scala``,
``Secret.scala``, ``EntityPath.scala`` at ef725a6). Here the view's own JavaScript map function (from the
shipped design document) runs under Node.js over the subject documents the init writes, and the rows go
through those rules restated; so does the ``namespaceThrottlings/blockedNamespaces`` view the controller
reads to refuse blocked namespaces.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

import pytest

from tests.deploy.deploy_files import ROOT, couchdb_init

init = couchdb_init()

GUEST = (ROOT / "deploy/couchdb/auth/auth.guest").read_text().strip()
SYSTEM = (ROOT / "deploy/couchdb/auth/auth.whisk.system").read_text().strip()

#: ``whisk.db.*-ddoc`` in ``common/scala/src/main/resources/application.conf`` at ef725a6, and the views
#: the controller queries in each (WhiskQueries, Identity, NamespaceBlacklist, ActivationStore).
CONTROLLER_VIEWS = {
    "subjects": {"_design/subjects.v2.0.0": {"identities"},
                 "_design/namespaceThrottlings": {"blockedNamespaces"}},
    "whisks": {"_design/whisks.v2.1.0": {"actions", "rules", "triggers", "packages", "packages-public"}},
    "activations": {"_design/whisks.v2.1.0": {"activations"}, "_design/whisks-filters.v2.1.1": {"activations"}},
}

NODE_MAP = """
const input = JSON.parse(require('fs').readFileSync(0, 'utf8'));
const rows = [];
for (const doc of input.docs) {
  const emit = (key, value) => rows.push({id: doc._id, key: key, value: value === undefined ? null : value});
  const map = eval('(' + input.map + ')');
  map(doc);
}
process.stdout.write(JSON.stringify(rows));
"""

ENTITY_NAME = re.compile(r"\A([\w]|[\w][\w@ .&-]{0,254}[\w@.&-])\Z")


def run_map(map_source: str, docs: list[dict]) -> list[dict]:
    node = shutil.which("node")
    assert node, "Node.js is needed to run OpenWhisk's view functions (scripts/setup installs it)"
    r = subprocess.run([node, "-e", NODE_MAP], input=json.dumps({"map": map_source, "docs": docs}),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def query(rows: list[dict], key: list, docs: dict[str, dict], limit: int) -> list[dict]:
    """CouchDB's answer to ``startkey=endkey=key&include_docs=true&limit=N``: a row's ``doc`` is the
    document whose ``_id`` the emitted value names, or null when there is none."""
    out = []
    for row in rows:
        if row["key"] == key:
            linked = row["value"].get("_id", row["id"]) if isinstance(row["value"], dict) else row["id"]
            out.append(dict(row, doc=docs.get(linked)))
    return out[:limit]


def row_to_identity(row: dict) -> dict:
    """``Identity.rowToIdentity``: what the controller accepts, or an AssertionError naming the field."""
    assert set(row) >= {"id", "value", "doc"}, "identities view malformed"
    value = row["value"]
    assert isinstance(row["id"], str) and len(row["id"]) >= 5, "subject must be at least 5 characters"
    assert isinstance(value, dict)
    for field in ("uuid", "key", "namespace"):
        assert isinstance(value.get(field), str), f"value.{field}"
    assert ENTITY_NAME.match(value["namespace"]), "namespace is not an EntityName"
    assert len(value["key"]) == 64, "secret must be 64 characters"
    return {"subject": row["id"], "namespace": value["namespace"], "api_key": f"{value['uuid']}:{value['key']}",
            "limits": row["doc"] or {}}


def read_whisk_auth(doc: dict) -> list[tuple[str, str, str]]:
    """``WhiskAuth``/``WhiskNamespace`` readers: subject >= 5 characters, namespaces of string name/uuid/key."""
    assert isinstance(doc["subject"], str) and len(doc["subject"]) >= 5
    out = []
    for ns in doc["namespaces"]:
        name, uuid, key = ns["name"], ns["uuid"], ns["key"]
        assert all(isinstance(x, str) for x in (name, uuid, key)), "namespace record malformed"
        assert ENTITY_NAME.match(name) and len(key) == 64
        out.append((name, uuid, key))
    return out


@pytest.fixture(scope="module")
def databases() -> dict[str, init.Database]:
    keys = init.identity_keys({})
    return {db.name: db for db in init.plan("local_", keys)}


def design(databases, db: str, ddoc: str) -> dict:
    return next(d for d in databases[db].documents if d["_id"] == ddoc)


def subjects(databases) -> list[dict]:
    return [d for d in databases["local_subjects"].documents if not d["_id"].startswith("_design/")]


def test_databases_and_design_documents_are_the_ones_the_controller_reads(databases):
    assert list(databases) == ["local_subjects", "local_whisks", "local_activations"]
    for suffix, ddocs in CONTROLLER_VIEWS.items():
        for ddoc, views in ddocs.items():
            assert views <= set(design(databases, "local_" + suffix, ddoc)["views"]), ddoc
    for db in databases.values():
        assert "_design/snapshotFilters" in {d["_id"] for d in db.documents}


def test_subject_documents_are_read_by_whisk_auth(databases):
    docs = {d["_id"]: d for d in subjects(databases)}
    assert set(docs) == {"guest", "whisk.system"}
    assert read_whisk_auth(docs["guest"]) == [("guest", *GUEST.split(":"))]
    assert read_whisk_auth(docs["whisk.system"]) == [("whisk.system", *SYSTEM.split(":"))]


@pytest.mark.parametrize("name,key", [("guest", GUEST), ("whisk.system", SYSTEM)])
def test_the_controller_finds_each_identity_by_its_key(databases, name, key):
    docs = subjects(databases)
    rows = run_map(design(databases, "local_subjects", "_design/subjects.v2.0.0")["views"]["identities"]["map"], docs)
    by_id = {d["_id"]: d for d in docs}
    uuid, secret = key.split(":")
    found = query(rows, [uuid, secret], by_id, limit=2)  # Identity.get(authkey): list(..., limit = 2)
    assert len(found) == 1, "uuid is not unique" if found else "namespace does not exist"
    identity = row_to_identity(found[0])
    assert identity == {"subject": name, "namespace": name, "api_key": key, "limits": {}}
    by_name = query(rows, [name], by_id, limit=1)  # Identity.get(namespace)
    assert [row_to_identity(r)["api_key"] for r in by_name] == [key]


def test_a_wrong_key_finds_no_identity(databases):
    docs = subjects(databases)
    rows = run_map(design(databases, "local_subjects", "_design/subjects.v2.0.0")["views"]["identities"]["map"], docs)
    uuid = GUEST.split(":")[0]
    assert query(rows, [uuid, "x" * 64], {d["_id"]: d for d in docs}, limit=2) == []


def test_no_identity_is_blocked(databases):
    view = design(databases, "local_subjects", "_design/namespaceThrottlings")["views"]["blockedNamespaces"]
    assert run_map(view["map"], subjects(databases)) == []
    blocked = dict(subjects(databases)[0], blocked=True)
    assert [r["key"] for r in run_map(view["map"], [blocked])] == ["guest"]


def test_configured_keys_replace_the_defaults():
    key = "0123abcd-71f6-4ed5-8c54-816aa4f8c502:" + "A" * 64
    keys = init.identity_keys({"OPENWHISK_GUEST_AUTH": key})
    assert keys["guest"] == tuple(key.split(":")) and keys["whisk.system"] == tuple(SYSTEM.split(":"))


@pytest.mark.parametrize("env,named", [
    ({"OPENWHISK_GUEST_AUTH": "no-colon"}, "OPENWHISK_GUEST_AUTH"),
    ({"OPENWHISK_GUEST_AUTH": "u:short"}, "64 characters"),
    ({"OPENWHISK_SYSTEM_AUTH": GUEST}, "must not share a key"),
    ({"COUCHDB_PASSWORD": ""}, "COUCHDB_PASSWORD"),
    ({"DB_PREFIX": "Bad!"}, "DB_PREFIX"),
    ({"COUCHDB_WAIT_S": "soon"}, "COUCHDB_WAIT_S"),
])
def test_bad_settings_are_one_line_and_exit_2_before_any_request(env, named):
    base = {"COUCHDB_URL": "http://127.0.0.1:9", "COUCHDB_USER": "admin", "COUCHDB_PASSWORD": "pw",
            "COUCHDB_WAIT_S": "0"}
    r = subprocess.run([sys.executable, str(ROOT / "deploy/couchdb/init.py")], env={**base, **env},
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and named in r.stderr and "Traceback" not in r.stderr


def test_an_unreachable_couchdb_is_named_and_exits_1():
    env = {"COUCHDB_URL": "http://127.0.0.1:9", "COUCHDB_USER": "admin", "COUCHDB_PASSWORD": "pw",
           "COUCHDB_WAIT_S": "0"}
    r = subprocess.run([sys.executable, str(ROOT / "deploy/couchdb/init.py")], env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "http://127.0.0.1:9" in r.stderr and "Traceback" not in r.stderr
