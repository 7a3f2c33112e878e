"""Bad input is never silent: dead letters, error acks naming the problem; secrets never in logs."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from agent_channel.keys import Keys
from controller_plugin import wire
from controller_plugin.service import SchedulerService, ServiceError
from esg_cli.servers import COUCH_PASSWORD, free_port
from tests.controller.conftest import SCHEDULER_KEY
from tests.controller.test_service_basic import DAG, deploy_app, handlers, put


def dead_letters(kafka: str, prefix: str, want: int, timeout: float = 10.0) -> list:
    consumer = KafkaConsumer(bootstrap_servers=kafka, group_id=None, auto_offset_reset="earliest",
                             enable_auto_commit=False)
    tp = TopicPartition(prefix + "esgdeadletter", 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    out: list = []
    deadline = time.monotonic() + timeout
    while len(out) < want and time.monotonic() < deadline:
        for recs in consumer.poll(timeout_ms=100).values():
            out.extend(recs)
    consumer.close()
    return out


def test_malformed_messages_go_to_dead_letter_and_service_goes_on(
        service_factory, agent_factory, driver, standin, kafka_bootstrap, prefix, redis_client):
    put(standin, "hello", None)
    svc = service_factory()
    agent_factory("node-a")
    driver.wait_healthy(1, timeout=10)
    aid = driver.invoke("guest/hello", {"a": 1}, timeout=20)["activationId"]
    good = dict(driver.published[aid])
    missing = {k: v for k, v in good.items() if k != "user"}
    bad_id = {**good, "activationId": "not-an-id"}
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap)
    topic = wire.invoker_topic(0, prefix)
    raws = [b"{not json", json.dumps(missing).encode(), json.dumps(bad_id).encode()]
    for raw in raws:
        producer.send(topic, raw)
    producer.flush()
    producer.close()
    results = Keys(prefix).results("node-a")      # node-a's results stream: the scheduler reads it
    redis_client.xadd(results, {"m": b"[1,2,3]"})
    redis_client.xadd(results, {"other": b"no message field"})
    letters = dead_letters(kafka_bootstrap, prefix, 5)
    by_topic = {}
    for r in letters:
        by_topic.setdefault(dict(r.headers)["esg-topic"].decode(), []).append(r)
    assert [r.value for r in by_topic[topic]] == raws  # the original bytes
    reasons = [dict(r.headers)["esg-reason"].decode() for r in by_topic[topic]]
    assert "not valid JSON" in reasons[0]
    assert "user" in reasons[1] and "missing" in reasons[1]
    assert "activationId" in reasons[2]
    # agent messages on the results stream: the bytes (none for an entry without the message field)
    assert [r.value for r in by_topic[results]] == [b"[1,2,3]", b""]
    assert all("-" in dict(r.headers)["esg-offset"].decode() for r in by_topic[results])  # stream entry ids
    # the service goes on
    rec = driver.invoke("guest/hello", {"b": 2}, timeout=20)
    assert rec["response"]["result"] == {"b": 2}
    assert svc.stats["dead_letters"] == 5


def test_unknown_action_gets_error_ack_naming_it(service_factory, agent_factory, driver):
    service_factory()
    agent_factory("node-a")
    driver.wait_healthy(1, timeout=10)
    rec = driver.invoke("guest/nosuch", {}, timeout=20)
    assert rec["response"]["statusCode"] == 1
    assert "guest/nosuch" in rec["response"]["result"]["error"]
    assert "does not exist" in rec["response"]["result"]["error"]
    assert driver.acks[rec["activationId"]].completions == 1


@pytest.mark.parametrize("annotations, needle", [
    ({"esg-slo-ms": -5, "esg-dag": DAG}, "esg-slo-ms"),
    ({"esg-slo-ms": "fast", "esg-dag": DAG}, "esg-slo-ms"),
    ({"esg-slo-ms": 300, "esg-dag": {"functions": ["pre", "cls"], "edges": [["pre", "cls"], ["cls", "pre"]]}},
     "cycle"),
    ({"esg-slo-ms": 300, "esg-dag": {"functions": ["pre", "ghost"], "edges": [["pre", "ghost"]]}}, "ghost"),
    ({"esg-slo-ms": 300, "esg-dag": "[1,2"}, "esg-dag"),
    ({"esg-dag": DAG}, "esg-slo-ms"),
])
def test_bad_annotation_gets_error_ack_naming_it(service_factory, agent_factory, driver, standin,
                                                 annotations, needle):
    deploy_app(standin)
    put(standin, "noprof", {})
    put(standin, "badapp", annotations)
    service_factory()
    agent_factory("node-a", handlers=handlers())
    driver.wait_healthy(1, timeout=10)
    rec = driver.invoke("guest/badapp", {"x": 1}, timeout=20)
    assert rec["response"]["statusCode"] in (1, 2)
    assert needle in rec["response"]["result"]["error"]


def test_bad_function_annotation_names_function(service_factory, agent_factory, driver, standin):
    deploy_app(standin)
    put(standin, "cls", {"esg-max-batch": 0})
    service_factory()
    agent_factory("node-a", handlers=handlers())
    driver.wait_healthy(1, timeout=10)
    rec = driver.invoke("guest/imgclass", {"x": 1}, timeout=20)
    err = rec["response"]["result"]["error"]
    assert rec["response"]["statusCode"] == 2 and "esg-max-batch" in err and "guest/cls" in err


def run_cli(*args: str, env: dict | None = None, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "esg_cli.main", "scheduler", *args], capture_output=True,
                          text=True, timeout=timeout, env=env)


def test_unreachable_kafka_is_one_line_exit_2(redis_url):
    port = free_port()
    p = run_cli("--kafka", f"127.0.0.1:{port}", "--redis", redis_url)
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "Kafka" in lines[0] and f"127.0.0.1:{port}" in lines[0]


def test_unreachable_redis_is_one_line_exit_2_without_password(kafka_bootstrap):
    port = free_port()
    p = run_cli("--kafka", kafka_bootstrap, "--redis", f"redis://:hunter2secret@127.0.0.1:{port}/0")
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "Redis" in lines[0] and f"127.0.0.1:{port}" in lines[0]
    assert "hunter2secret" not in p.stderr


def test_wrong_redis_password_is_named(kafka_bootstrap, redis_auth):
    url, password = redis_auth
    p = run_cli("--kafka", kafka_bootstrap, "--redis", url.replace(password, "wrong-pass"))
    assert p.returncode == 2 and "password" in p.stderr and "wrong-pass" not in p.stderr


def test_env_fallback_names_missing_kafka():
    p = run_cli(env={"PATH": "/usr/bin:/bin"})
    assert p.returncode == 2 and "ESG_KAFKA" in p.stderr


def test_password_protected_redis_works_and_secrets_stay_out_of_logs(
        settings_factory, agent_factory, driver, standin, redis_auth, caplog):
    url, password = redis_auth
    deploy_app(standin)
    caplog.set_level(logging.INFO)
    caplog.set_level(logging.DEBUG, logger="esg")
    svc = SchedulerService(settings_factory(redis_url=url))
    svc.start()
    from tests.controller.conftest import RunningService
    running = RunningService(svc)
    try:
        agent_factory("node-a", redis=url, handlers=handlers())  # the agent channel is on the protected Redis too
        driver.wait_healthy(1, timeout=10)
        assert driver.invoke("guest/imgclass", {"x": 1}, timeout=20)["response"]["statusCode"] == 0
        rec = driver.invoke("guest/nosuch", {}, timeout=20)
        assert rec["response"]["statusCode"] == 1
        assert driver.poll_record(rec["activationId"], 10) == rec  # the record is in the activation store
    finally:
        running.stop()
    text = caplog.text
    assert "esg scheduler starting" in text  # the settings line was logged ...
    secret = SCHEDULER_KEY.split(":")[1]
    guest_secret = driver.user["authkey"]["api_key"].split(":")[1]
    for s in (secret, guest_secret, password, COUCH_PASSWORD):
        assert s not in text  # ... without any key or password


def test_service_error_names_redis(kafka_bootstrap, settings_factory):
    with pytest.raises(ServiceError, match="Redis"):
        SchedulerService(settings_factory(redis_url=f"redis://127.0.0.1:{free_port()}/0"))


def test_a_result_holding_nan_is_a_developer_error_naming_where(service_factory, agent_factory, driver, standin):
    put(standin, "nan", None)
    service_factory()
    agent_factory("node-a", handlers={"guest/nan": lambda v: {"scores": [1.0, float("nan")]},
                                      "guest/inf": lambda v: float("inf")})
    put(standin, "inf", None)
    driver.wait_healthy(1, timeout=10)
    for name, where in (("nan", "result.scores[1]"), ("inf", "at result.")):
        rec = driver.invoke(f"guest/{name}", {}, timeout=15)
        assert rec["response"]["statusCode"] == 2 and where in rec["response"]["result"]["error"], rec
        assert driver.acks[rec["activationId"]].is_system_error is False
        assert driver.poll_record(rec["activationId"], 10) == rec     # the store took it too: valid JSON
