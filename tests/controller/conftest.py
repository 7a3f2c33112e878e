"""Fixtures for the scheduler service: the REST stand-in, the controller driver, agents, the service.

Every test gets its own topic prefix, so tests share one broker and one Redis without seeing each
other's messages. ``agent_factory`` builds the in-process agent double; swapping in the real
``esg agent`` means replacing that one fixture.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from controller_plugin.service import SchedulerService
from controller_plugin.settings import SchedulerSettings
from esg_cli.controller_driver import ControllerDriver
from esg_cli.openwhisk_standin import GUEST_KEY, OpenWhiskStandIn
from tests.controller.agent_double import AgentDouble

SCHEDULER_KEY = "c0ffee00-71f6-4ed5-8c54-816aa4f8c502:SchedulerSecretKey0123456789abcdefSECRET"


def profile_table(function: str, rows: list[tuple[int, int, str | None, float]]) -> dict:
    return {"function": function, "gpu_model": "A100-40GB",
            "configs": [{"batch": b, "vcpus": v, "gpu": g, "latency_ms": lat} for b, v, g, lat in rows]}


@pytest.fixture
def profiles_dir(tmp_path: Path) -> Path:
    d = tmp_path / "profiles"
    d.mkdir()
    for name in ("pre", "cls", "cls-b", "vote", "echo-fn"):
        rows = [(1, 1, None, 5.0), (4, 1, None, 8.0), (8, 2, None, 12.0)]
        (d / f"{name}.json").write_text(json.dumps(profile_table(name, rows)))
    return d


@pytest.fixture
def prefix() -> str:
    return f"t{uuid.uuid4().hex[:8]}_"


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


@pytest.fixture
def activation_store(couch_url: str, prefix: str) -> str:
    """The test's own activations database in the session's pouchdb-server."""
    return f"{couch_url}/{prefix.lower()}activations"


@pytest.fixture
def standin(activation_store: str) -> Iterator[OpenWhiskStandIn]:
    keys = {GUEST_KEY: "guest", SCHEDULER_KEY: "guest"}
    with OpenWhiskStandIn(keys=keys, activation_store=activation_store) as s:
        yield s


@pytest.fixture
def settings_factory(kafka_bootstrap: str, redis_url: str, standin: OpenWhiskStandIn, prefix: str,
                     profiles_dir: Path, activation_store: str) -> Callable[..., SchedulerSettings]:
    def make(**kw) -> SchedulerSettings:
        base = dict(kafka=kafka_bootstrap, redis_url=redis_url, openwhisk_api=standin.url,
                    openwhisk_auth=SCHEDULER_KEY, topic_prefix=prefix, profiles_dir=profiles_dir,
                    agent_timeout_s=1.5, ping_interval_s=0.5, activation_store=activation_store)
        base.update(kw)
        return SchedulerSettings(**base)
    return make


class RunningService:
    def __init__(self, svc: SchedulerService) -> None:
        self.svc = svc
        self.thread = threading.Thread(target=svc.run, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.svc.stop()
        self.thread.join(timeout=10)
        self.svc.close()


@pytest.fixture
def service_factory(settings_factory) -> Iterator[Callable[..., SchedulerService]]:
    running: list[RunningService] = []

    def make(**kw) -> SchedulerService:
        svc = SchedulerService(settings_factory(**kw))
        svc.start()
        running.append(RunningService(svc))
        return svc

    yield make
    for r in running:
        r.stop()


@pytest.fixture
def agent_factory(redis_url: str, prefix: str) -> Iterator[Callable[..., AgentDouble]]:
    agents: list[AgentDouble] = []

    def make(node: str = "node-a", redis: str | None = None, **kw) -> AgentDouble:
        a = AgentDouble(redis or redis_url, node, prefix=prefix, **kw)
        agents.append(a)
        return a

    yield make
    for a in agents:
        a.close()


@pytest.fixture
def driver(kafka_bootstrap: str, prefix: str, standin: OpenWhiskStandIn, activation_store: str
           ) -> Iterator[ControllerDriver]:
    d = ControllerDriver(kafka_bootstrap, prefix=prefix, catalog=standin.store.lookup, retest_s=2.0,
                         activation_store=activation_store)
    yield d
    d.close()
