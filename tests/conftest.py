"""Shared fixtures: real local servers (Tansu for Kafka, redis-server) on free loopback ports.

The servers start once per test session and stop at its end. A missing binary or a server that never
answers fails the test with a message naming it; nothing waits longer than the start timeout.
Tests that use these fixtures are marked ``integration`` automatically (``pytest -m "not integration"``
runs the rest).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from esg_cli.servers import ServerError, start_broker, start_redis

SERVER_FIXTURES = {"kafka_bootstrap", "redis_url", "redis_auth"}

REDIS_TEST_PASSWORD = "esg-test-pass"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if SERVER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """``127.0.0.1:PORT`` of a Tansu broker (in-memory storage) shared by the session."""
    try:
        server = start_broker()
    except ServerError as exc:
        pytest.fail(f"cannot start the Kafka-protocol broker: {exc}", pytrace=False)
    with server:
        yield server.address


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """``redis://127.0.0.1:PORT/0`` of a redis-server without persistence, shared by the session."""
    try:
        server = start_redis()
    except ServerError as exc:
        pytest.fail(f"cannot start redis-server: {exc}", pytrace=False)
    with server:
        yield server.url


@pytest.fixture(scope="session")
def redis_auth() -> Iterator[tuple[str, str]]:
    """``(url, password)`` of a redis-server that requires a password; the URL carries it."""
    try:
        server = start_redis(password=REDIS_TEST_PASSWORD)
    except ServerError as exc:
        pytest.fail(f"cannot start redis-server: {exc}", pytrace=False)
    with server:
        yield server.url, REDIS_TEST_PASSWORD
