"""The scheduler service against the real broker and Redis: health, apps, plain actions, sequences."""

from __future__ import annotations

import time

import requests
from prometheus_client.parser import text_string_to_metric_families

from esg_cli.openwhisk_standin import GUEST_KEY

DAG = {"functions": ["pre", "cls", "vote"], "edges": [["pre", "cls"], ["cls", "vote"]]}


def put(standin, name: str, annotations: dict | None = None, kind: str = "python:3", **kw) -> dict:
    body = {"exec": {"kind": kind, "code": "def main(a): return a"},
            "annotations": [{"key": k, "value": v} for k, v in (annotations or {}).items()], **kw}
    return standin.put_action(f"guest/{name}", body)


def deploy_app(standin) -> None:
    put(standin, "pre", {"esg-max-batch": 8})
    put(standin, "cls", {"esg-profile": "cls", "esg-gpu": False})
    put(standin, "vote", {})
    put(standin, "imgclass", {"esg-slo-ms": 500, "esg-dag": DAG})


def handlers() -> dict:
    return {"guest/pre": lambda v: {"pre": v["x"] * 2},
            "guest/cls": lambda v: {"cls": v["pre"] + 1},
            "guest/vote": lambda v: {"label": f"n{v['cls']}"}}


def test_health_test_action_answered_with_identical_transid(service_factory, agent_factory, driver):
    svc = service_factory()
    agent_factory("node-a")
    ids = driver.wait_healthy(1, timeout=10)
    assert ids == [0]
    ack = driver.health_acks[0]
    assert ack["transid"] == driver.health_transid
    assert ack["isSystemError"] is False
    assert ack["instance"]["instance"] == 0 and ack["instance"]["instanceType"] == "invoker"
    assert ack["instance"]["tags"] == [] and ack["instance"]["dedicatedNamespaces"] == []
    assert svc.registry.ids == {"node-a": 0}


def test_blocking_dag_app_returns_sink_result_in_one_combined_ack(service_factory, agent_factory, driver, standin):
    deploy_app(standin)
    service_factory()
    agent_factory("node-a", handlers=handlers())
    driver.wait_healthy(1, timeout=10)
    rec = driver.invoke("guest/imgclass", {"x": 20}, timeout=20)
    assert rec["response"] == {"statusCode": 0, "result": {"label": "n41"}, "size": 16}
    assert rec["namespace"] == "guest" and rec["name"] == "imgclass" and rec["subject"] == "guest"
    assert rec["version"] == "0.0.1" and rec["publish"] is False
    assert rec["end"] >= rec["start"] and rec["duration"] == rec["end"] - rec["start"]
    ann = {a["key"]: a["value"] for a in rec["annotations"]}
    assert ann["path"] == "guest/imgclass" and ann["kind"] == "python:3"
    assert ann["limits"]["timeout"] == 60000 and ann["waitTime"] >= 0 and ann["timeout"] is False
    assert "initTime" in ann  # the agent reported a cold start
    aid = rec["activationId"]
    log = driver.acks[aid]
    assert log.completions == 1 and log.results == 1 and len(log.acks) == 1
    ack = log.acks[0]
    assert ack["transid"] == driver.published[aid]["transid"]
    assert ack["instance"]["instance"] == 0 and ack["isSystemError"] is False
    assert any(line.startswith("[vote]") for line in rec["logs"])


def test_fan_in_gets_object_keyed_by_predecessor(service_factory, agent_factory, driver, standin):
    put(standin, "pre", {})
    put(standin, "cls", {})
    put(standin, "cls-b", {})
    dag = {"functions": ["pre", "cls", "cls-b"], "edges": [["pre", "cls"], ["pre", "cls-b"]]}
    put(standin, "fan", {"esg-slo-ms": 800, "esg-dag": dag})
    put(standin, "vote", {})
    dag2 = {"functions": ["pre", "cls", "cls-b", "vote"],
            "edges": [["pre", "cls"], ["pre", "cls-b"], ["cls", "vote"], ["cls-b", "vote"]]}
    put(standin, "diamond", {"esg-slo-ms": 800, "esg-dag": dag2})
    service_factory()
    agent_factory("node-a", handlers={"guest/pre": lambda v: v["x"], "guest/cls": lambda v: v + 1,
                                      "guest/cls-b": lambda v: v + 2, "guest/vote": lambda v: v})
    driver.wait_healthy(1, timeout=10)
    assert driver.invoke("guest/diamond", {"x": 1}, timeout=20)["response"]["result"] == {"cls": 2, "cls-b": 3}
    assert driver.invoke("guest/fan", {"x": 1}, timeout=20)["response"]["result"] == {"cls": 2, "cls-b": 3}


def test_non_blocking_gets_completion_and_record_is_readable(service_factory, agent_factory, driver, standin):
    deploy_app(standin)
    service_factory()
    agent_factory("node-a", handlers=handlers())
    driver.wait_healthy(1, timeout=10)
    aid = driver.invoke("guest/imgclass", {"x": 1}, blocking=False)
    assert driver.wait_acked([aid], timeout=20) == []
    log = driver.acks[aid]
    assert log.completions == 1 and log.results == 0
    ack = log.acks[0]
    assert set(ack) == {"transid", "activationId", "isSystemError", "instance"}
    assert ack["activationId"] == aid
    resp = requests.get(f"{standin.url}/api/v1/namespaces/guest/activations/{aid}",
                        auth=tuple(GUEST_KEY.split(":")), timeout=5)
    assert resp.status_code == 200
    assert resp.json()["response"]["result"] == {"label": "n3"}


def test_plain_action_without_annotations_runs(service_factory, agent_factory, driver, standin):
    put(standin, "hello", None, parameters=[{"key": "greeting", "value": "hi"}], limits={"timeout": 3000})
    service_factory()
    agent = agent_factory("node-a")
    driver.wait_healthy(1, timeout=10)
    rec = driver.invoke("guest/hello", {"name": "ann"}, timeout=20)
    assert rec["response"] == {"statusCode": 0, "result": {"greeting": "hi", "name": "ann"}, "size": 33}
    ann = {a["key"]: a["value"] for a in rec["annotations"]}
    assert ann["limits"]["timeout"] == 3000
    batch = agent.batches[-1]
    assert batch.action.path == "guest/hello" and batch.config.batch == 1 and batch.config.gpu is None
    assert batch.requests[0].transaction_id == driver.published[rec["activationId"]]["transid"][0]


def test_sequence_component_is_scheduled_as_an_ordinary_action(service_factory, agent_factory, driver, standin):
    put(standin, "step1", None)
    service_factory()
    agent_factory("node-a", handlers={"guest/step1": lambda v: {"n": v["n"] + 1}})
    driver.wait_healthy(1, timeout=10)
    parent = "0123456789abcdef0123456789abcdef"
    rec = driver.invoke("guest/step1", {"n": 1}, cause=parent, timeout=20)
    assert rec["response"]["result"] == {"n": 2}
    assert rec["cause"] == parent
    assert {"key": "causedBy", "value": "sequence"} in rec["annotations"]


def test_function_failure_fails_the_request(service_factory, agent_factory, driver, standin, redis_client, prefix):
    deploy_app(standin)
    service_factory()

    def bad(v):
        raise RuntimeError("model exploded")

    agent_factory("node-a", handlers={**handlers(), "guest/cls": bad})
    driver.wait_healthy(1, timeout=10)
    rec = driver.invoke("guest/imgclass", {"x": 1}, timeout=20)
    assert rec["response"]["statusCode"] == 2
    assert "model exploded" in rec["response"]["result"]["error"]
    assert rec["response"]["result"]["function"] == "cls"
    assert driver.acks[rec["activationId"]].completions == 1
    time.sleep(0.5)
    assert redis_client.keys(f"esg:{prefix}:data:{rec['activationId']}:*") == []   # pre's output went too


def test_metrics_are_served(service_factory, agent_factory, driver, standin):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    deploy_app(standin)
    service_factory(metrics_port=port)
    agent_factory("node-a", handlers=handlers())
    driver.wait_healthy(1, timeout=10)
    driver.invoke("guest/imgclass", {"x": 1}, timeout=20)
    time.sleep(1.2)     # the queue gauges are refreshed once a second
    text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for fam in text_string_to_metric_families(text) for s in fam.samples}

    def total(name: str, **labels: str) -> float:
        return sum(v for (n, ls), v in samples.items() if n == name and labels.items() <= dict(ls).items())

    app = "guest/imgclass"
    assert total("esg_requests_total", app=app) == 1
    assert total("esg_slo_total", app=app, result="hit") == 1 and total("esg_slo_total", result="miss") == 0
    assert total("esg_request_seconds_count", app=app) == 1
    assert total("esg_decisions_total", app=app) == 3                 # pre, cls, vote: a batch each
    assert {dict(ls)["function"] for (n, ls) in samples if n == "esg_decisions_total"} == \
        {"guest/pre", "guest/cls", "guest/vote"}
    assert total("esg_jobs_total", app=app) == 3 and total("esg_batch_size_count", app=app) == 3
    for stage in ("queue", "dispatch", "run", "return"):               # every batch's stages
        assert total("esg_stage_seconds_count", app=app, stage=stage) == 3, stage
    assert total("esg_afw_queue_length", app=app) == 0                 # all answered: the gauges read 0
    assert total("esg_afw_queue_head_age_seconds", app=app) == 0
    assert total("esg_node_up", node="node-a") == 1 and total("esg_agents_alive") == 1
    assert total("esg_scheduler_step_seconds_count") >= 3
    assert total("esg_redis_round_trip_seconds_count", what="dispatches") >= 3
    assert total("esg_redis_round_trip_seconds_count", what="ledger") >= 1
    assert total("esg_acks_total", kind="combined") == 1
    assert total("esg_ack_latency_seconds_count") == 1 and "esg_dead_letters_total" in text





def test_intermediate_data_goes_agent_to_agent_by_reference_and_is_deleted_at_the_end(
        service_factory, agent_factory, driver, standin, redis_client, prefix):
    deploy_app(standin)
    service_factory()
    agent = agent_factory("node-a", handlers=handlers())
    driver.wait_healthy(1, timeout=10)
    rec = driver.invoke("guest/imgclass", {"x": 20}, timeout=20)
    assert rec["response"]["result"] == {"label": "n41"}
    aid = rec["activationId"]
    by_function = {b.function: b for b in agent.batches if b.requests[0].activation_id == aid}
    entry, middle, sink = by_function["guest/pre"], by_function["guest/cls"], by_function["guest/vote"]
    assert entry.requests[0].value == {"x": 20} and entry.requests[0].inputs == ()
    # the successors get references to where the outputs are, never the outputs
    assert middle.requests[0].value is None
    (ref,) = middle.requests[0].inputs
    assert (ref.name, ref.node, ref.key) == ("pre", "node-a", f"esg:{prefix}:node:node-a:data:{aid}:guest/pre")
    assert ref.bytes == len('{"pre":40}')
    assert [i.name for i in sink.requests[0].inputs] == ["cls"]
    assert not entry.return_output and not middle.return_output and sink.return_output
    assert entry.reply_to == f"esg:{prefix}:node:node-a:results:0"       # the node's own results stream
    # answered: the request's stored outputs are gone (deleted with the ack's ledger write)
    deadline = time.monotonic() + 5
    while redis_client.keys(f"esg:{prefix}:node:*:data:{aid}:*") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert redis_client.keys(f"esg:{prefix}:node:*:data:{aid}:*") == []


def test_result_over_openwhisk_limit_is_a_developer_error_naming_it(service_factory, agent_factory, driver,
                                                                     standin):
    put(standin, "huge", None)
    service_factory()
    agent_factory("node-a", handlers={"guest/huge": lambda v: {"blob": "x" * 1_100_000}})
    driver.wait_healthy(1, timeout=10)
    rec = driver.invoke("guest/huge", {}, timeout=20)
    assert rec["response"]["statusCode"] == 2
    assert "exceeded the allowed length" in rec["response"]["result"]["error"]
    assert "1048576 bytes" in rec["response"]["result"]["error"]
