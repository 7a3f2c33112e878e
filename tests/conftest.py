"""Shared fixtures: real local servers (Tansu for Kafka, redis-server, pouchdb-server for CouchDB's API)
on free loopback ports.

The servers start once per test session and stop at its end. A missing binary or a server that never
answers fails the test with a message naming it; nothing waits longer than the start timeout.
Tests that use these fixtures are marked ``integration`` automatically (``pytest -m "not integration"``
runs the rest).

The run owns what it starts: it gets a private temporary directory, and at its end the run fails if a
test left a child process, a listening port or a temporary file behind (``tests/leaks.py``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from esg_cli.servers import ServerError, start_broker, start_couchdb, start_redis
from tests.leaks import Span, Watch, now_s

SERVER_FIXTURES = {"kafka_bootstrap", "redis_url", "redis_auth", "couch_url"}

REDIS_TEST_PASSWORD = "esg-test-pass"


_watch: Watch | None = None


def pytest_configure(config: pytest.Config) -> None:
    """A private temporary directory for the whole run (children inherit it through TMPDIR), and the
    watch over what the run starts."""
    global _watch
    root = Path(tempfile.mkdtemp(prefix="esg-tests-"))
    os.environ["TMPDIR"] = str(root)
    tempfile.tempdir = str(root)
    _watch = Watch.start(root)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Keep the test's time span, so a process left behind is reported with the test that started it."""
    start = now_s()
    yield
    if _watch is not None:
        _watch.spans.append(Span(item.nodeid, start, now_s()))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """After every fixture is torn down: fail the run if anything a test started is still there."""
    if _watch is None:
        return
    leaks = _watch.check()
    if leaks:
        lines = ["the run left things behind (a test must stop and remove what it starts):", *leaks.report()]
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        for line in lines:
            if reporter is not None:
                reporter.write_line(line, red=True)
            else:
                print(line)
        _watch.clean_up()
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    _watch.failed = session.exitstatus != 0


def pytest_unconfigure(config: pytest.Config) -> None:
    """The run's temporary directory goes; after a failure pytest's own ``pytest-of-*`` directories stay
    for inspection (and their place is printed)."""
    if _watch is None:
        return
    if not _watch.failed:
        shutil.rmtree(_watch.tmp_root, ignore_errors=True)
        return
    for p in _watch.tmp_root.iterdir():
        if not p.name.startswith("pytest-of-"):
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
    print(f"the failed run's temporary directories (pytest's tmp_path) are in {_watch.tmp_root}")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if SERVER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.integration)


def _started(start, what: str):
    """A server the session owns, started by ``start``; a server that cannot start fails the test by name."""
    try:
        return start()
    except ServerError as exc:
        pytest.fail(f"cannot start {what}: {exc}", pytrace=False)


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """``127.0.0.1:PORT`` of a Tansu broker (in-memory storage) shared by the session."""
    with _started(start_broker, "the Kafka-protocol broker") as server:
        yield server.address


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """``redis://127.0.0.1:PORT/0`` of a redis-server without persistence, shared by the session."""
    with _started(start_redis, "redis-server") as server:
        yield server.url


@pytest.fixture(scope="session")
def redis_auth() -> Iterator[tuple[str, str]]:
    """``(url, password)`` of a redis-server that requires a password; the URL carries it."""
    with _started(lambda: start_redis(password=REDIS_TEST_PASSWORD), "redis-server") as server:
        yield server.url, REDIS_TEST_PASSWORD


@pytest.fixture(scope="session")
def couch_url() -> Iterator[str]:
    """``http://admin:password@127.0.0.1:PORT`` of a pouchdb-server (CouchDB's API, in memory), shared by
    the session: OpenWhisk's activation store."""
    with _started(start_couchdb, "pouchdb-server") as server:
        yield server.url
