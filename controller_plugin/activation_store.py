"""OpenWhisk's activation store: the CouchDB database the controller reads activation records from.

A real invoker stores every completed activation there (``ContainerProxy.storeActivation``); the
controller reads it for non-blocking calls, ``wsk activation get/result/logs``, blocking calls that
outlast its wait and acks shrunk past Kafka's message limit (``PrimitiveActions.pollActivation``).

The document is what OpenWhisk's ``CouchDbRestStore`` writes for a ``WhiskActivation``
(``WhiskEntity.toDocumentRecord``): the record's JSON plus ``entityType: "activation"`` and
``updated`` (epoch ms), under the id ``{namespace}/{activationId}`` (``WhiskEntity.qualifiedName``).

The store is named by one URL, ``http://user:password@host:5984/DATABASE``; without a database path the
database is :data:`DEFAULT_DATABASE` (OpenWhisk's ``{db_prefix}activations`` with its default prefix).
The credentials never reach a log or an error message (:func:`redact`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, unquote, urlsplit

import requests

DEFAULT_DATABASE = "whisk_local_activations"
TIMEOUT_S = 10.0
#: CouchDB's rule for database names.
_DB_CHARS = set("abcdefghijklmnopqrstuvwxyz0123456789_$()+-/")


class StoreError(Exception):
    """The store is unreachable or refused a request; the message names it without credentials."""


@dataclass(frozen=True)
class StoreUrl:
    """A parsed ``--activation-store`` URL."""

    base: str
    """``scheme://host:port``, no credentials."""
    database: str
    user: str | None = field(default=None, repr=False)
    password: str | None = field(default=None, repr=False)

    @property
    def shown(self) -> str:
        """The URL as logs show it: credentials replaced by ``***``."""
        who = "***@" if self.user is not None else ""
        scheme, _, rest = self.base.partition("://")
        return f"{scheme}://{who}{rest}/{self.database}"


def parse_url(url: str) -> StoreUrl:
    """Parse and check a store URL; ValueError naming the problem (never the password)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise ValueError("not a URL (expected http://[user:password@]host:port[/database])") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("expected http://[user:password@]host:port[/database]")
    if parts.query or parts.fragment:
        raise ValueError("a query or fragment has no meaning here")
    database = unquote(parts.path.strip("/")) or DEFAULT_DATABASE
    if not database[0].isalpha() or not database[0].islower() or not set(database) <= _DB_CHARS:
        raise ValueError(f"{database!r} is not a CouchDB database name (lowercase letter first, then "
                         "a-z 0-9 _$()+-/)")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    base = f"{parts.scheme}://{host}" + (f":{port}" if port is not None else "")
    user = unquote(parts.username) if parts.username is not None else None
    password = unquote(parts.password) if parts.password is not None else None
    return StoreUrl(base, database, user, password)


def redact(url: str) -> str:
    """``url`` with any credentials hidden (for a bad URL: a fixed placeholder)."""
    try:
        return parse_url(url).shown
    except ValueError:
        return "<activation store URL>"


def document_id(record: Mapping[str, Any]) -> str:
    """``{namespace}/{activationId}``: the id OpenWhisk stores an activation under."""
    return f"{record['namespace']}/{record['activationId']}"


def record_of(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The WhiskActivation record a stored document holds (:func:`document`'s added fields removed)."""
    return {k: v for k, v in doc.items() if k not in ("_id", "_rev", "entityType", "updated")}


def document(record: Mapping[str, Any], updated_ms: int | None = None) -> dict[str, Any]:
    """The CouchDB document of a WhiskActivation record, as ``CouchDbRestStore.put`` writes it."""
    updated = int(time.time() * 1000) if updated_ms is None else updated_ms
    return {"_id": document_id(record), "entityType": "activation", "updated": updated, **record}


class ActivationStore:
    """A CouchDB database of activation documents (thread-confined: one per thread that uses it)."""

    def __init__(self, url: str | StoreUrl, timeout_s: float = TIMEOUT_S) -> None:
        self.url = url if isinstance(url, StoreUrl) else parse_url(url)
        self.timeout_s = timeout_s
        self._session = requests.Session()
        if self.url.user is not None:
            self._session.auth = (self.url.user, self.url.password or "")
        self._db = f"{self.url.base}/{quote(self.url.database, safe='')}"

    def _call(self, method: str, path: str, **kw: Any) -> requests.Response:
        try:
            return self._session.request(method, f"{self._db}{path}", timeout=self.timeout_s, **kw)
        except requests.RequestException as exc:
            raise StoreError(f"activation store {self.url.shown}: {type(exc).__name__}") from None

    def ensure(self) -> None:
        """Check the database answers; create it if it does not exist (OpenWhisk's initdb creates it
        in a real deployment)."""
        r = self._call("GET", "")
        if r.status_code == 404:
            r = self._call("PUT", "")
            if r.status_code in (201, 202, 412):  # 412: created meanwhile
                return
        if r.status_code in (401, 403):
            raise StoreError(f"activation store {self.url.shown}: the credentials were refused "
                             f"(HTTP {r.status_code})")
        if not r.ok:
            raise StoreError(f"activation store {self.url.shown}: HTTP {r.status_code}")

    def put_many(self, records: Iterable[Mapping[str, Any]]) -> list[tuple[str, str]]:
        """Store the records (one ``_bulk_docs``); return ``(activationId, reason)`` of those the store
        refused. A conflict is no refusal: the record was stored before (e.g. by an earlier incarnation)."""
        docs = [document(r) for r in records]
        if not docs:
            return []
        r = self._call("POST", "/_bulk_docs", json={"docs": docs})
        if r.status_code not in (201, 202):
            raise StoreError(f"activation store {self.url.shown}: bulk write answered HTTP {r.status_code}")
        try:
            rows = r.json()
        except ValueError:
            raise StoreError(f"activation store {self.url.shown}: bulk write answered non-JSON") from None
        if not isinstance(rows, list) or len(rows) != len(docs):
            raise StoreError(f"activation store {self.url.shown}: bulk write answered {len(docs)} documents "
                             "with something else than one row each")
        return [(doc["activationId"], str(row.get("reason") or row.get("error")))
                for doc, row in zip(docs, rows)
                if isinstance(row, dict) and not row.get("ok") and row.get("error") != "conflict"]

    def get(self, namespace: str, activation_id: str) -> dict[str, Any] | None:
        """The stored document of ``namespace/activation_id``, or None."""
        r = self._call("GET", "/" + quote(f"{namespace}/{activation_id}", safe=""))
        if r.status_code == 404:
            return None
        if not r.ok:
            raise StoreError(f"activation store {self.url.shown}: HTTP {r.status_code}")
        return r.json()

    def view(self, design: str, view: str, **params: Any) -> dict[str, Any]:
        """A view's answer (``_design/{design}/_view/{view}``) with CouchDB's query parameters (keys as
        JSON, as CouchDB reads them); a view or design document that is missing is a StoreError."""
        query = {k: json.dumps(v) if k in ("key", "startkey", "endkey") else str(v).lower() if isinstance(v, bool)
                 else str(v) for k, v in params.items()}
        r = self._call("GET", f"/_design/{quote(design, safe='')}/_view/{quote(view, safe='')}", params=query)
        if not r.ok:
            raise StoreError(f"activation store {self.url.shown}: view {design}/{view} answered HTTP {r.status_code}")
        return r.json()

    def close(self) -> None:
        self._session.close()
