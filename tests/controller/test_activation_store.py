"""Activation records in OpenWhisk's activation store (CouchDB's API, served by a real pouchdb-server).

What a controller reads there: the record of a non-blocking call, of an ack shrunk past Kafka's limit,
under the document id ``{namespace}/{activationId}`` with ``entityType: "activation"``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
import requests

from controller_plugin.activation_store import ActivationStore, StoreError, document, parse_url, redact
from esg_cli.openwhisk_standin import GUEST_KEY
from esg_cli.servers import free_port
from tests.controller.test_service_basic import put


def test_store_url_parsing_names_the_problem_and_hides_the_password():
    u = parse_url("http://admin:s3cret%40x@db:5984/local_activations")
    assert (u.base, u.database, u.user, u.password) == ("http://db:5984", "local_activations", "admin", "s3cret@x")
    assert u.shown == "http://***@db:5984/local_activations" and "s3cret" not in repr(u)
    assert parse_url("http://127.0.0.1:5984").database == "whisk_local_activations"  # OpenWhisk's default name
    for bad, why in (("ftp://db/x", "expected http"), ("http://db:5984/Bad", "not a CouchDB database name"),
                     ("http://db:99999/x", "not a URL"), ("http://db/x?y=1", "query")):
        with pytest.raises(ValueError, match=why):
            parse_url(bad)
    assert redact("http://u:pw@h:1/d") == "http://***@h:1/d" and "pw" not in redact("http://u:pw@h:99999/d")


def test_document_is_what_couchdbreststore_writes_for_a_whiskactivation():
    record = {"namespace": "alice", "name": "hello", "activationId": "a" * 32, "start": 1, "end": 2}
    doc = document(record, updated_ms=5)
    assert doc == {"_id": f"alice/{'a' * 32}", "entityType": "activation", "updated": 5, **record}


def test_every_activation_is_stored_and_read_back_through_the_api(service_factory, agent_factory, driver,
                                                                  standin, activation_store):
    put(standin, "hello", None)
    service_factory()
    agent_factory("node-a")
    driver.wait_healthy(1, timeout=10)
    aid = driver.invoke("guest/hello", {"x": 1}, blocking=False)
    assert driver.wait_acked([aid], timeout=15) == []
    ack = driver.acks[aid].acks[0]
    assert "response" not in ack and ack["activationId"] == aid   # a Completion: the record is in the store
    store = ActivationStore(activation_store)
    try:
        deadline = time.monotonic() + 10
        while (doc := store.get("guest", aid)) is None and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        store.close()
    assert doc is not None and doc["_id"] == f"guest/{aid}" and doc["entityType"] == "activation"
    assert isinstance(doc["updated"], int) and doc["response"] == {"statusCode": 0, "result": {"x": 1}, "size": 8}
    assert doc["namespace"] == "guest" and doc["name"] == "hello" and doc["subject"] == "guest"
    r = requests.get(f"{standin.url}/api/v1/namespaces/_/activations/{aid}", auth=tuple(GUEST_KEY.split(":")),
                     timeout=5)
    assert r.status_code == 200 and r.json()["response"]["result"] == {"x": 1}
    blocking = driver.invoke("guest/hello", {"x": 2}, timeout=15)     # blocking calls are stored too
    assert driver.poll_record(blocking["activationId"], 10) == blocking


def test_a_record_too_large_for_kafka_is_acked_shrunk_and_read_from_the_store(service_factory, agent_factory,
                                                                             driver, standin):
    # two sinks of 600 KB each: every result within OpenWhisk's 1 MiB, the app's record over Kafka's limit
    for name in ("pre", "cls", "cls-b"):
        put(standin, name, {})
    put(standin, "wide", {"esg-slo-ms": 2000,
                          "esg-dag": {"functions": ["pre", "cls", "cls-b"], "edges": [["pre", "cls"], ["pre", "cls-b"]]}})
    service_factory()
    agent_factory("node-a", handlers={"guest/pre": lambda v: 1, "guest/cls": lambda v: "a" * 600_000,
                                      "guest/cls-b": lambda v: "b" * 600_000})
    driver.wait_healthy(1, timeout=10)
    rec = driver.invoke("guest/wide", {}, timeout=20)
    aid = rec["activationId"]
    assert driver.acks[aid].acks[0]["response"] == aid          # the ack carried the id alone ...
    wide = {"cls": "a" * 600_000, "cls-b": "b" * 600_000}
    assert rec["response"] == {"statusCode": 0, "result": wide, "size": len(json.dumps(wide))}


def test_unreachable_store_is_one_line_exit_2_without_credentials(kafka_bootstrap, redis_url):
    port = free_port()
    p = subprocess.run([sys.executable, "-m", "esg_cli.main", "scheduler", "--kafka", kafka_bootstrap, "--redis",
                        redis_url, "--activation-store", f"http://admin:topsecret9@127.0.0.1:{port}/acts"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "activation store" in lines[0] and f"127.0.0.1:{port}/acts" in lines[0]
    assert "topsecret9" not in p.stderr


def test_wrong_store_password_is_named(couch_url):
    store = ActivationStore(couch_url.replace(":some_passw0rd@", ":wrong@") + "/x_activations")
    try:
        with pytest.raises(StoreError, match="credentials were refused") as err:
            store.ensure()
        assert "wrong" not in str(err.value)
    finally:
        store.close()
