"""SLO admission control in the live service, through the real broker and Redis: an activation no plan
can meet is answered at once with an application error that says why, and never reaches an agent."""

from __future__ import annotations

import requests

from esg.defaults import HOP_MS
from esg_cli.servers import free_port
from openwhisk_status import STATUS_APPLICATION_ERROR
from tests.controller.test_service_basic import DAG, handlers, put


def test_an_activation_no_plan_can_meet_gets_an_application_error_at_once(
        service_factory, agent_factory, driver, standin):
    # pre -> cls -> vote, each at least 5 ms by its table (tests/controller/conftest.py), each batch paying the
    # per-batch overhead the scheduler plans with (2.5 ms by default): 22.5 ms at the fastest
    fastest = 3 * (5.0 + HOP_MS)
    for name in ("pre", "cls", "vote"):
        put(standin, name, {})
    put(standin, "tight", {"esg-slo-ms": 10, "esg-dag": DAG})
    put(standin, "roomy", {"esg-slo-ms": 500, "esg-dag": DAG})
    port = free_port()
    service_factory(admission_control=True, metrics_port=port)
    agent = agent_factory("node-a", handlers=handlers())
    driver.wait_healthy(1, timeout=10)
    rec = driver.invoke("guest/tight", {"x": 20}, timeout=20)
    assert rec["response"]["statusCode"] == STATUS_APPLICATION_ERROR
    error = rec["response"]["result"]["error"]
    assert error.startswith("rejected by SLO admission control")
    assert f"'guest/tight' needs at least {fastest:.1f} ms" in error and "of its 10 ms SLO are left" in error
    assert agent.batches == []  # nothing ran
    ok = driver.invoke("guest/roomy", {"x": 20}, timeout=20)  # an app that can meet its SLO still runs
    assert ok["response"] == {"statusCode": 0, "result": {"label": "n41"}, "size": 16}
    assert agent.batches
    text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    assert 'esg_slo_total{app="guest/tight",result="rejected"} 1.0' in text
    assert 'esg_slo_total{app="guest/roomy",result="hit"} 1.0' in text


def test_without_the_flag_the_same_activation_runs(service_factory, agent_factory, driver, standin):
    for name in ("pre", "cls", "vote"):
        put(standin, name, {})
    put(standin, "tight", {"esg-slo-ms": 10, "esg-dag": DAG})
    service_factory()
    agent_factory("node-a", handlers=handlers())
    driver.wait_healthy(1, timeout=10)
    assert driver.invoke("guest/tight", {"x": 20}, timeout=20)["response"] == {"statusCode": 0,
                                                                               "result": {"label": "n41"}, "size": 16}
