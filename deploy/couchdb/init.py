"""Initialise CouchDB for OpenWhisk the way its ansible playbooks do, so a fresh cluster can authenticate.

What it does, in the order of OpenWhisk's ``ansible/initdb.yml`` and ``ansible/tasks/wipeDatabase.yml``
(with ``recreateViews.yml``), from the files in ``design/`` and ``auth/`` (see ``deploy/SOURCES.md``):

1. CouchDB's system databases ``_users`` (``db/createUsers.yml``; every component uses the admin account
   here, so no user is added), ``_replicator`` and ``_global_changes`` (a single-node CouchDB 2.x
   wants all three; openwhisk-deploy-kube's init gets them from ``_cluster_setup``);
2. ``{prefix}subjects`` with the ``subjects.v2.0.0``, ``snapshotFilters`` and ``namespaceThrottlings``
   design documents and one subject document per identity (``guest``, ``whisk.system``);
3. ``{prefix}whisks`` with ``whisks.v2.1.0`` and ``snapshotFilters``;
4. ``{prefix}activations`` with ``whisks.v2.1.0``, ``whisks-filters.v2.1.1``, ``snapshotFilters``,
   ``activations`` and ``logCleanup``.

Each database is readable by server admins only (``_security``), as ``db/grantPermissions.yml`` leaves
it when the components use the admin account. Unlike ``wipe.yml``, nothing is deleted: a database that
exists is kept, a document is written only when it is missing or differs (``db/recreateDoc.yml``), so
running it again on every ``docker compose up`` changes nothing.

Configuration (environment): ``COUCHDB_URL`` (default ``http://db:5984``), ``COUCHDB_USER``,
``COUCHDB_PASSWORD``, ``DB_PREFIX`` (default ``local_``), ``OPENWHISK_GUEST_AUTH`` and
``OPENWHISK_SYSTEM_AUTH`` (``uuid:key``; default: OpenWhisk's public keys in ``auth/``),
``COUCHDB_WAIT_S`` (how long to wait for CouchDB to answer, default 120). A bad setting
is one line naming it, exit 2, before any request; an unreachable or failing CouchDB is one line, exit 1,
and so is a CouchDB that refuses the admin account (HTTP 401 or 403), at once rather than after the wait.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

HERE = Path(__file__).resolve().parent
DESIGN = HERE / "design"
AUTH = HERE / "auth"

#: Design documents per database suffix, in the order OpenWhisk's playbooks write them.
DESIGN_DOCUMENTS: dict[str, tuple[str, ...]] = {
    "subjects": ("auth_design_document_for_subjects_db_v2.0.0.json", "filter_design_document.json",
                 "namespace_throttlings_design_document_for_subjects_db.json"),
    "whisks": ("whisks_design_document_for_entities_db_v2.1.0.json", "filter_design_document.json"),
    "activations": ("whisks_design_document_for_activations_db_v2.1.0.json",
                    "whisks_design_document_for_activations_db_filters_v2.1.1.json",
                    "filter_design_document.json", "activations_design_document_for_activations_db.json",
                    "logCleanup_design_document_for_activations_db.json"),
}

#: The identities OpenWhisk's ``db.authkeys`` lists, with the variable that overrides each default key.
IDENTITIES: dict[str, str] = {"guest": "OPENWHISK_GUEST_AUTH", "whisk.system": "OPENWHISK_SYSTEM_AUTH"}

SYSTEM_DATABASES = ("_users", "_replicator", "_global_changes")

#: Server admins only: ``members`` restricted to the ``_admin`` role (an empty list would make it public).
ADMIN_ONLY = {"admins": {"names": [], "roles": []}, "members": {"names": [], "roles": ["_admin"]}}

# OpenWhisk's own rules for what its readers accept (Subject, Secret, EntityName).
SUBJECT_MIN_LENGTH = 5
SECRET_LENGTH = 64
ENTITY_NAME = re.compile(r"\A([\w]|[\w][\w@ .&-]{0,254}[\w@.&-])\Z")
DB_PREFIX = re.compile(r"\A[a-z][a-z0-9_$()+/-]*\Z|\A\Z")


class InitError(Exception):
    """A setting is wrong (exit 2) or CouchDB refused a step (exit 1); the message names it."""

    def __init__(self, message: str, status: int = 2) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Database:
    name: str
    documents: tuple[dict[str, Any], ...]


def auth_key(variable: str, value: str) -> tuple[str, str]:
    """``uuid:key`` split as OpenWhisk's ``BasicAuthenticationAuthKey`` does, checked as its ``Secret`` is."""
    uuid, sep, key = value.strip().partition(":")
    if not sep or not uuid or ":" in key:
        raise InitError(f"{variable}: expected UUID:KEY, got a value without exactly one ':'")
    if len(key) != SECRET_LENGTH:
        raise InitError(f"{variable}: the key after ':' must be {SECRET_LENGTH} characters, got {len(key)}")
    return uuid, key


def subject_document(name: str, uuid: str, key: str) -> dict[str, Any]:
    """The subjects-database document ``initdb.yml`` writes for one identity (``WhiskAuth``'s format)."""
    if len(name) < SUBJECT_MIN_LENGTH or not ENTITY_NAME.match(name):
        raise InitError(f"identity {name!r}: not a valid OpenWhisk subject and namespace name")
    return {"_id": name, "subject": name, "namespaces": [{"name": name, "uuid": uuid, "key": key}]}


def identity_keys(env: dict[str, str]) -> dict[str, tuple[str, str]]:
    keys = {}
    for name, variable in IDENTITIES.items():
        default = (AUTH / f"auth.{name}").read_text()
        keys[name] = auth_key(variable, env.get(variable) or default)
    if len({key for _, key in keys.values()}) != len(keys):
        raise InitError("OPENWHISK_GUEST_AUTH and OPENWHISK_SYSTEM_AUTH must not share a key")
    return keys


def plan(prefix: str, keys: dict[str, tuple[str, str]]) -> list[Database]:
    """The databases and documents to ensure, in order."""
    if not DB_PREFIX.match(prefix):
        raise InitError(f"DB_PREFIX: {prefix!r} does not start a valid CouchDB database name")
    out = []
    for suffix, files in DESIGN_DOCUMENTS.items():
        docs = [json.loads((DESIGN / f).read_text()) for f in files]
        if suffix == "subjects":
            docs += [subject_document(name, uuid, key) for name, (uuid, key) in keys.items()]
        out.append(Database(prefix + suffix, tuple(docs)))
    return out


class CouchDB:
    def __init__(self, url: str, user: str, password: str, timeout_s: float = 10.0) -> None:
        self.url = url.rstrip("/")
        self.session = requests.Session()
        self.session.auth = (user, password)
        self.timeout_s = timeout_s

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        try:
            r = self.session.request(method, f"{self.url}/{path}", json=body, timeout=self.timeout_s)
        except requests.RequestException as exc:
            raise InitError(f"CouchDB at {self.url}: {type(exc).__name__}", status=1) from None
        try:
            return r.status_code, r.json() if r.content else None
        except ValueError:
            return r.status_code, None

    def expect(self, method: str, path: str, ok: tuple[int, ...], body: Any = None) -> tuple[int, Any]:
        status, got = self.request(method, path, body)
        if status not in ok:
            reason = got.get("reason", got.get("error")) if isinstance(got, dict) else got
            raise InitError(f"CouchDB refused {method} /{path}: HTTP {status} {reason}", status=1)
        return status, got


def wait_until_up(db: CouchDB, timeout_s: float) -> None:
    """Wait for CouchDB to answer; a refused admin account ends the wait at once (the server is up)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            status, _ = db.request("GET", "")
        except InitError as exc:
            status, last = None, str(exc)
        if status == 200:
            return
        if status in (401, 403):
            raise InitError(f"CouchDB at {db.url} refused the admin account: HTTP {status}", status=1)
        if status is not None:
            last = f"HTTP {status}"
        if time.monotonic() > deadline:
            raise InitError(f"CouchDB at {db.url} not up within {timeout_s:.0f} s ({last})", status=1)
        time.sleep(1)


def ensure_database(db: CouchDB, name: str) -> str:
    status, _ = db.expect("PUT", name, ok=(201, 202, 412))
    return f"database {name}: {'exists' if status == 412 else 'created'}"


def ensure_document(db: CouchDB, database: str, doc: dict[str, Any]) -> str:
    """``recreateDoc.yml``: write ``doc`` if it is missing or differs from the stored one (``_rev`` aside)."""
    path = f"{database}/{requests.utils.quote(doc['_id'], safe='')}"
    status, stored = db.expect("GET", path, ok=(200, 404))
    if status == 200:
        if {k: v for k, v in stored.items() if k != "_rev"} == doc:
            return f"{database}/{doc['_id']}: unchanged"
        doc = dict(doc, _rev=stored["_rev"])
    db.expect("PUT", path, ok=(201, 202), body=doc)
    return f"{database}/{doc['_id']}: {'updated' if status == 200 else 'created'}"


def apply(db: CouchDB, databases: list[Database]) -> list[str]:
    done = [ensure_database(db, name) for name in SYSTEM_DATABASES]
    for database in databases:
        done.append(ensure_database(db, database.name))
        db.expect("PUT", f"{database.name}/_security", ok=(200,), body=ADMIN_ONLY)
        done += [ensure_document(db, database.name, doc) for doc in database.documents]
    return done


def main(env: dict[str, str] | None = None) -> int:
    env = dict(os.environ if env is None else env)
    try:
        user, password = env.get("COUCHDB_USER", ""), env.get("COUCHDB_PASSWORD", "")
        if not user or not password:
            raise InitError("COUCHDB_USER and COUCHDB_PASSWORD must be set (CouchDB's admin account)")
        databases = plan(env.get("DB_PREFIX", "local_"), identity_keys(env))
        db = CouchDB(env.get("COUCHDB_URL", "http://db:5984"), user, password)
        wait_until_up(db, float(env.get("COUCHDB_WAIT_S", "120")))
        for line in apply(db, databases):
            print(f"couchdb-init: {line}", flush=True)
    except InitError as exc:
        print(f"couchdb-init: error: {exc}", file=sys.stderr)
        return exc.status
    except ValueError as exc:
        print(f"couchdb-init: error: COUCHDB_WAIT_S: {exc}", file=sys.stderr)
        return 2
    print("couchdb-init: OpenWhisk's databases are ready", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
