"""A real CouchDB-API server for the deployment tests: pouchdb-server (``esg_cli.servers.start_couchdb``).

It runs with in-memory storage on a free loopback port, in a throw-away directory, with one server
admin created the way CouchDB's ``/_config`` API does it, and is stopped, directory removed, at the end
of the module.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from esg_cli.servers import COUCH_ADMIN, COUCH_PASSWORD, ServerError, start_couchdb


@dataclass(frozen=True)
class CouchServer:
    url: str
    user: str
    password: str


@pytest.fixture(scope="module")
def couchdb() -> Iterator[CouchServer]:
    try:
        server = start_couchdb()
    except ServerError as exc:
        pytest.fail(str(exc), pytrace=False)
    with server:
        yield CouchServer(f"http://{server.address}", COUCH_ADMIN, COUCH_PASSWORD)
