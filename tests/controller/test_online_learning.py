"""The live service learns profiles: a new function's table fills in from what runs (exploring within
its budget), the statistics live in Redis for every scheduler, and a drifting configuration moves the
table and the plan."""

from __future__ import annotations

import pytest

from controller_plugin.online import OnlineStore
from esg.model import Config
from esg.online import MIN_SAMPLES, grid
from esg.policies.base import FunctionSpec
from tests.controller.test_service_basic import put


def burst(driver, action: str, n: int) -> list[dict]:
    ids = [driver.publish(action, {"i": i}) for i in range(n)]
    driver.flush()
    return [driver.wait(a, timeout=30) for a in ids]


def learn_the_grid(driver, store: OnlineStore, want: set[Config], rounds: int) -> dict:
    """Bursts of 8 calls of ``guest/newfn``, every one answered with success, until each configuration of
    ``want`` has its warm batches (at most ``rounds`` bursts); its statistics."""
    for _ in range(rounds):
        assert all(r["response"]["statusCode"] == 0 for r in burst(driver, "guest/newfn", 8))
        stats = store.stats("guest/newfn")
        if all(c in stats and stats[c].samples >= MIN_SAMPLES for c in want):
            break
    stats = store.stats("guest/newfn")
    missing = [c.label() for c in want if c not in stats or stats[c].samples < MIN_SAMPLES]
    assert not missing, f"never measured: {missing}"
    return stats


def model_ms(msg) -> float:
    """How long a batch takes on the double: 40 ms per job on one vCPU, parallel over vCPUs."""
    c = msg.config
    return 40.0 * c.batch / c.vcpus + 2.0


def test_new_function_table_fills_in_with_every_grid_configuration(service_factory, agent_factory, driver,
                                                                   standin, redis_client, prefix):
    put(standin, "newfn", {"esg-slo-ms": 5000, "esg-gpu": False}, limits={"timeout": 2000})
    svc = service_factory(explore_fraction=1.0)
    agent_factory("node-a", vcpus=16, handlers={"guest/newfn": lambda v: v}, run_ms=model_ms)
    driver.wait_healthy(1, timeout=10)
    first = driver.invoke("guest/newfn", {"i": -1}, timeout=20)
    assert first["response"] == {"statusCode": 0, "result": {"i": -1}, "size": 9}   # the first call already succeeds
    want = set(grid(FunctionSpec(gpu=False), "A100-40GB"))
    stats = learn_the_grid(driver, OnlineStore(redis_client, prefix), want, rounds=60)
    for c in want:
        assert stats[c].median() == pytest.approx(40.0 * c.batch / c.vcpus + 2.0, rel=0.02), c.label()
    assert svc.metrics.explored._value.get() > 0
    assert svc.metrics.profile_events.labels("measured")._value.get() >= len(want)
    # the statistics outlive the service: a new one plans with the learned table at once
    table = svc.plans.profiles.table("newfn", "guest/newfn", FunctionSpec(gpu=False), 2000.0, "A100-40GB", None)
    assert table.extra["source"] == "online" and set(table.configs) >= want


def test_a_batch_another_workers_start_overlapped_is_not_learned_from(service_factory, agent_factory, driver,
                                                                      standin, redis_client, prefix):
    """The first two batches of every configuration report a worker start beside them and a run time ten
    times the configuration's: the learned table holds the clean run times only, and each configuration
    still gets its warm batches (it is explored again)."""
    put(standin, "newfn", {"esg-slo-ms": 5000, "esg-gpu": False}, limits={"timeout": 2000})
    service_factory(explore_fraction=1.0)
    seen: dict[str, int] = {}
    verdict: dict[str, bool] = {}

    def overlapped(msg) -> bool:
        if msg.batch_id not in verdict:
            label = msg.config.label()
            seen[label] = seen.get(label, 0) + 1
            verdict[msg.batch_id] = seen[label] <= 2
        return verdict[msg.batch_id]

    agent_factory("node-a", vcpus=16, handlers={"guest/newfn": lambda v: v},
                  run_ms=lambda m: model_ms(m) * (10 if overlapped(m) else 1), overlapped=overlapped)
    driver.wait_healthy(1, timeout=10)
    want = set(grid(FunctionSpec(gpu=False), "A100-40GB"))
    stats = learn_the_grid(driver, OnlineStore(redis_client, prefix), want, rounds=80)
    for c in want:
        assert seen[c.label()] > 2, c.label()
        assert stats[c].median() == pytest.approx(40.0 * c.batch / c.vcpus + 2.0, rel=0.02), c.label()


def test_drift_moves_the_table_and_the_plan(service_factory, agent_factory, driver, standin, redis_client, prefix):
    put(standin, "echo-fn", {"esg-slo-ms": 2000, "esg-gpu": False, "esg-max-batch": 1})
    svc = service_factory(explore_fraction=0.0)
    slow = {"on": False}
    agent_factory("node-a", run_ms=lambda m: 20.0 if slow["on"] else 5.0)
    driver.wait_healthy(1, timeout=10)
    c = Config(1, 1, None)
    for i in range(12):
        assert driver.invoke("guest/echo-fn", {"i": i}, timeout=20)["response"]["statusCode"] == 0
    plan = svc.workflows._registered["guest/echo-fn"]
    assert plan.profiles["guest/echo-fn"].latency(c) == pytest.approx(5.0, rel=0.02)
    assert svc.metrics.profile_events.labels("drift")._value.get() == 0
    slow["on"] = True
    for i in range(40):
        assert driver.invoke("guest/echo-fn", {"i": i}, timeout=20)["response"]["statusCode"] == 0
    assert svc.metrics.profile_events.labels("drift")._value.get() == 1
    stats = OnlineStore(redis_client, prefix).stats("guest/echo-fn")
    assert stats[c].median() == pytest.approx(20.0, rel=0.02)
    driver.invoke("guest/echo-fn", {"i": 99}, timeout=20)
    plan = svc.workflows._registered["guest/echo-fn"]
    assert plan.profiles["guest/echo-fn"].latency(c) == pytest.approx(20.0, rel=0.02)
    # configurations nobody ran keep the offline table's figures
    assert plan.profiles["guest/echo-fn"].latency(Config(4, 1, None)) == 8.0
