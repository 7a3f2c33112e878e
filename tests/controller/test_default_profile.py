"""A function with no profile table runs from its first call, and its record says what ran."""

from __future__ import annotations

import json

from tests.controller.test_service_basic import handlers, put


def esg_config(rec: dict) -> dict:
    return {a["key"]: a["value"] for a in rec["annotations"]}["esg-config"]


def test_unprofiled_function_in_an_app_runs_with_the_default(service_factory, agent_factory, driver, standin):
    put(standin, "pre", {})
    put(standin, "noprof", {"esg-max-batch": 4, "esg-gpu": False}, limits={"timeout": 5000})
    put(standin, "app", {"esg-slo-ms": 300, "esg-dag": {"functions": ["pre", "noprof"],
                                                        "edges": [["pre", "noprof"]]}})
    service_factory()
    agent = agent_factory("node-a", handlers={"guest/pre": lambda v: v["x"] * 2, "guest/noprof": lambda v: v + 1})
    driver.wait_healthy(1, timeout=10)
    rec = driver.invoke("guest/app", {"x": 20}, timeout=20)
    assert rec["response"] == {"statusCode": 0, "result": 41, "size": 2}
    ran = esg_config(rec)
    assert ran["noprof"] == {"batch": 1, "vcpus": 1, "gpu": None, "profile": "default"}
    assert ran["pre"]["profile"] == "offline"
    (b,) = [b for b in agent.batches if b.function == "guest/noprof"]
    assert b.config.vcpus == 1 and b.config.gpu is None


def test_unprofiled_one_function_app_is_answered(service_factory, agent_factory, driver, standin):
    put(standin, "hecho", {"esg-slo-ms": 200})
    service_factory()
    agent_factory("node-a", handlers={"guest/hecho": lambda v: v})
    driver.wait_healthy(1, timeout=10)
    for i in range(3):
        rec = driver.invoke("guest/hecho", {"i": i}, timeout=20)
        assert rec["response"] == {"statusCode": 0, "result": {"i": i}, "size": len(json.dumps({"i": i}))}
        assert esg_config(rec)["hecho"]["profile"] == "default"


def test_profiled_app_record_names_offline_tables(service_factory, agent_factory, driver, standin):
    from tests.controller.test_service_basic import deploy_app
    deploy_app(standin)
    service_factory()
    agent_factory("node-a", handlers=handlers())
    driver.wait_healthy(1, timeout=10)
    rec = driver.invoke("guest/imgclass", {"x": 1}, timeout=20)
    ran = esg_config(rec)
    assert set(ran) == {"pre", "cls", "vote"} and {r["profile"] for r in ran.values()} == {"offline"}


def test_plain_actions_are_never_explored(service_factory, agent_factory, driver, standin):
    put(standin, "plainfn", None)
    service_factory(explore_fraction=1.0)
    agent = agent_factory("node-a")
    driver.wait_healthy(1, timeout=10)
    for i in range(12):
        assert driver.invoke("guest/plainfn", {"i": i}, timeout=20)["response"]["statusCode"] == 0
    assert {b.config for b in agent.batches} == {agent.batches[0].config}
    assert agent.batches[0].config.batch == 1 and agent.batches[0].config.vcpus == 1
