"""OpenWhisk's Kafka message shapes (reference: OpenWhisk's Message.scala, WhiskActivation.scala)."""

from __future__ import annotations

import json
import time
import uuid

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import MessageSizeTooLargeError

from controller_plugin import wire
from controller_plugin.wire import (
    CombinedCompletionAndResultMessage,
    CompletionMessage,
    ControllerInstance,
    InvokerInstance,
    ResultMessage,
    WireError,
)

ACTIVATION = """{"transid":["f3Kq9ZcWb0Lr7TnY2pXa5MvE8sHd1GuJ",1718003021457],
 "action":{"path":"guest","name":"resize","version":"0.0.2"},
 "revision":"2-6a1f0c9d3b7e4a58b2c1d0e9f8a7b6c5",
 "user":{"subject":"guest","namespace":{"name":"guest","uuid":"23bc46b1-71f6-4ed5-8c54-816aa4f8c502"},
   "authkey":{"api_key":"23bc46b1-71f6-4ed5-8c54-816aa4f8c502:123zO3xZ..."},
   "rights":["READ","PUT","DELETE","ACTIVATE"],"limits":{}},
 "activationId":"9c0e5d2a7b814f6e8a3d1c0b9f7e6d5a",
 "rootControllerIndex":{"asString":"0","instanceType":"controller"},
 "blocking":true,"content":{"width":640,"url":"s3://bkt/img.png"},
 "initArgs":[],"lockedArgs":{}}"""

COMBINED = """{"transid":["f3Kq9ZcWb0Lr7TnY2pXa5MvE8sHd1GuJ",1718003021457],
 "response":{"namespace":"guest","name":"resize","subject":"guest","activationId":"9c0e5d2a7b814f6e8a3d1c0b9f7e6d5a",
   "start":1718003021502,"end":1718003021788,"duration":286,
   "response":{"statusCode":0,"result":{"ok":true,"bytes":48213},"size":27},
   "logs":[],"version":"0.0.2","publish":false,
   "annotations":[{"key":"limits","value":{"timeout":60000,"memory":256,"logs":10,"concurrency":1}},
     {"key":"path","value":"guest/resize"},{"key":"kind","value":"python:3"},
     {"key":"timeout","value":false},{"key":"waitTime","value":41},{"key":"initTime","value":180}]},
 "isSystemError":false,
 "instance":{"instance":0,"userMemory":"1024 MB","instanceType":"invoker","tags":[],"dedicatedNamespaces":[]}}"""

INSTANCE_0 = '{"instance":0,"userMemory":"1024 MB","instanceType":"invoker","tags":[],"dedicatedNamespaces":[]}'
COMPLETION = ('{"transid":["f3Kq9ZcWb0Lr7TnY2pXa5MvE8sHd1GuJ",1718003021457],'
              '"activationId":"9c0e5d2a7b814f6e8a3d1c0b9f7e6d5a","isSystemError":false,"instance":' + INSTANCE_0 + '}')
SHRUNK_RESULT = '{"transid":["f3Kq9ZcWb0Lr7TnY2pXa5MvE8sHd1GuJ",1718003021457],"response":"9c0e5d2a7b814f6e8a3d1c0b9f7e6d5a"}'

PING = """{"name":{"instance":1,"userMemory":"2048 MB","instanceType":"invoker","tags":[],"dedicatedNamespaces":[],
  "uniqueName":"gpu-a","displayedName":"gpu-a"},"isEnabled":true}"""

LIMITS = {"timeout": 60000, "memory": 256, "logs": 10, "concurrency": 1}
INVOKER_0 = InvokerInstance(instance=0, user_memory_mb=1024)


def activation(**changes) -> dict:
    msg = json.loads(ACTIVATION)
    msg.update(changes)
    return msg


def parsed(**changes) -> wire.ActivationMessage:
    return wire.parse_activation(json.dumps(activation(**changes)).encode())


def record(msg: wire.ActivationMessage, status_code: int = 0, result=None, **kw) -> dict:
    args = {"start_ms": 1718003021502, "end_ms": 1718003021788, "kind": "python:3", "limits": LIMITS,
            "wait_time_ms": 41, **kw}
    return wire.whisk_activation(msg, status_code=status_code, result=result, **args)


# --- ActivationMessage --------------------------------------------------------------------------------


def test_parses_the_reference_activation_message():
    msg = wire.parse_activation(ACTIVATION.encode())
    assert msg.transid == ["f3Kq9ZcWb0Lr7TnY2pXa5MvE8sHd1GuJ", 1718003021457]
    assert msg.action == wire.EntityName(path="guest", name="resize", version="0.0.2")
    assert msg.revision == "2-6a1f0c9d3b7e4a58b2c1d0e9f8a7b6c5"
    assert msg.user.subject == "guest"
    assert msg.user.namespace == "guest"
    assert msg.user.namespace_uuid == "23bc46b1-71f6-4ed5-8c54-816aa4f8c502"
    assert msg.user.api_key == "23bc46b1-71f6-4ed5-8c54-816aa4f8c502:123zO3xZ..."
    assert msg.user.rights == ("READ", "PUT", "DELETE", "ACTIVATE")
    assert msg.activation_id == "9c0e5d2a7b814f6e8a3d1c0b9f7e6d5a"
    assert msg.root_controller == ControllerInstance("0", "controller")
    assert msg.blocking is True
    assert msg.content == {"width": 640, "url": "s3://bkt/img.png"}
    assert msg.init_args == () and msg.locked_args == {}
    assert msg.cause is None and msg.trace_context is None
    assert not msg.is_health_test
    assert msg.raw == json.loads(ACTIVATION)  # kept for dead-lettering


def test_optional_fields_and_any_json_content():
    msg = parsed(content=[1, "two"], cause="0" * 32, traceContext={"traceparent": "00-ab-cd-01"},
                 revision=None, initArgs=["MODEL"], lockedArgs={"secret": "aes-256"})
    assert msg.content == [1, "two"]
    assert msg.cause == "0" * 32 and msg.caused_by_sequence
    assert msg.trace_context == {"traceparent": "00-ab-cd-01"}
    assert msg.revision is None
    assert msg.init_args == ("MODEL",) and msg.locked_args == {"secret": "aes-256"}
    without_content = activation()
    del without_content["content"]
    assert wire.parse_activation(json.dumps(without_content)).content is None


def test_action_name_in_plain_string_form_and_with_package():
    assert parsed(action="guest/img/resize").action == wire.EntityName("guest/img", "resize")
    msg = parsed(action={"path": "guest/img", "name": "resize", "version": "0.0.1", "binding": "guest/lib"})
    assert msg.action.qualified == "guest/img/resize"
    assert msg.action.namespace == "guest"


def test_any_auth_key_object_is_accepted_as_openwhisks_generic_auth_key():
    iam = {"api_key": None, "token": "t0ken", "refresh_token": "r"}
    msg = parsed(user={**json.loads(ACTIVATION)["user"], "authkey": {"token": "t0ken", "refresh_token": "r"}})
    assert msg.user.api_key is None and msg.user.authkey == {"token": "t0ken", "refresh_token": "r"}
    assert "t0ken" not in repr(msg)
    assert parsed(user={**json.loads(ACTIVATION)["user"], "authkey": iam}).user.api_key is None


def test_api_key_never_appears_in_repr():
    msg = wire.parse_activation(ACTIVATION)
    assert "123zO3xZ" not in repr(msg)
    assert "123zO3xZ" not in repr(msg.user)


def test_health_test_action_is_recognised():
    msg = parsed(transid=["sid_invokerHealth", 1718000000000],
                 action={"path": "whisk.system", "name": "invokerHealthTestAction0", "version": "0.0.1"},
                 revision=None, blocking=False, content=None)
    assert msg.is_health_test
    assert not parsed(action={"path": "guest", "name": "invokerHealthTestAction0"}).is_health_test
    assert not parsed(action={"path": "whisk.system", "name": "other"}).is_health_test
    ack = json.loads(wire.encode_ack(wire.completion(msg, InvokerInstance(2, 1024))))
    assert ack["transid"] == ["sid_invokerHealth", 1718000000000]
    assert ack["isSystemError"] is False and ack["instance"]["instance"] == 2


def _without(*path: str) -> dict:
    msg = activation()
    node = msg
    for key in path[:-1]:
        node = node[key]
    del node[path[-1]]
    return msg


def _with(path: tuple[str, ...], value) -> dict:
    msg = activation()
    node = msg
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return msg


MALFORMED = [
    (b"not json", "ActivationMessage"),
    (b"\xff\xfe", "ActivationMessage"),
    (b"[1, 2]", "ActivationMessage"),
    (b'"a string"', "ActivationMessage"),
    *[(_without(key), key) for key in ("transid", "action", "revision", "user", "activationId",
                                       "rootControllerIndex", "blocking", "initArgs", "lockedArgs")],
    (_without("action", "name"), "action.name"),
    (_without("action", "path"), "action.path"),
    (_without("user", "subject"), "user.subject"),
    (_without("user", "namespace", "uuid"), "user.namespace.uuid"),
    (_with(("user", "authkey"), "uuid:key"), "user.authkey"),
    (_with(("user", "authkey", "api_key"), 7), "user.authkey.api_key"),
    (_without("user", "rights"), "user.rights"),
    (_without("user", "limits"), "user.limits"),
    (_without("rootControllerIndex", "asString"), "rootControllerIndex.asString"),
    (_with(("activationId",), "9C0E5D2A7B814F6E8A3D1C0B9F7E6D5A"), "activationId"),
    (_with(("activationId",), "9c0e5d2a7b814f6e8a3d1c0b9f7e6d5"), "activationId"),
    (_with(("activationId",), "9c0e5d2a-7b81-4f6e-8a3d-1c0b9f7e6d5a"), "activationId"),
    (_with(("activationId",), 12345), "activationId"),
    (_with(("transid",), "f3Kq9ZcWb0Lr7TnY2pXa5MvE8sHd1GuJ"), "transid"),
    (_with(("transid",), []), "transid"),
    (_with(("blocking",), "true"), "blocking"),
    (_with(("revision",), 2), "revision"),
    (_with(("action",), "resize"), "action"),
    (_with(("action",), 7), "action"),
    (_with(("user", "rights"), ["READ", 1]), "user.rights[1]"),
    (_with(("initArgs",), "MODEL"), "initArgs"),
    (_with(("lockedArgs", "secret"), 1), "lockedArgs.secret"),
    (_with(("cause",), "not-an-id"), "cause"),
    (_with(("traceContext",), "x"), "traceContext"),
    (_with(("rootControllerIndex", "asString"), "0/../x"), "rootControllerIndex.asString"),
]


@pytest.mark.parametrize(("message", "field"), MALFORMED, ids=[f for _, f in MALFORMED])
def test_malformed_activation_names_the_field(message, field):
    data = message if isinstance(message, bytes) else json.dumps(message).encode()
    with pytest.raises(WireError) as err:
        wire.parse_activation(data)
    assert err.value.field == field
    assert str(err.value).startswith(f"{field}: ")


# --- acks -------------------------------------------------------------------------------------------


def test_builds_the_reference_combined_ack():
    msg = wire.parse_activation(ACTIVATION)
    activation_record = record(msg, 0, {"ok": True, "bytes": 48213}, size=27, init_time_ms=180)
    ack = wire.combined(msg, activation_record, INVOKER_0)
    assert json.loads(wire.encode_ack(ack)) == json.loads(COMBINED)


@pytest.mark.parametrize(("text", "kind"), [(COMBINED, CombinedCompletionAndResultMessage),
                                            (COMPLETION, CompletionMessage), (SHRUNK_RESULT, ResultMessage)])
def test_reference_acks_round_trip(text, kind):
    ack = wire.parse_ack(text)
    assert type(ack) is kind
    assert json.loads(wire.encode_ack(ack)) == json.loads(text)


def test_builds_the_reference_completion_and_shrunk_result():
    msg = wire.parse_activation(ACTIVATION)
    assert wire.encode_ack(wire.completion(msg, INVOKER_0)) == COMPLETION.encode()
    assert wire.encode(wire.result(msg, record(msg)).shrink().to_json()) == SHRUNK_RESULT.encode()


def test_ack_without_is_system_error_reads_as_false_and_unknown_kind_is_rejected():
    ack = wire.parse_ack('{"transid":["x",1],"activationId":"' + "a" * 32 + '","instance":' + INSTANCE_0 + "}")
    assert ack.is_system_error is False
    with pytest.raises(WireError, match="neither"):
        wire.parse_ack('{"transid":["x",1]}')
    with pytest.raises(WireError) as err:
        wire.parse_ack('{"transid":["x",1],"response":"short"}')
    assert err.value.field == "response"


TRANSIDS = [
    '["f3Kq9ZcWb0Lr7TnY2pXa5MvE8sHd1GuJ",1718003021457]',
    '["f3Kq9ZcWb0Lr7TnY2pXa5MvE8sHd1GuJ",1718003021457,true]',
    '["f3Kq9ZcWb0Lr7TnY2pXa5MvE8sHd1GuJ",1718003021457,["parentParentParent",1718003020000]]',
    '["sid_invokerHealth",1718000000000,true,["p",1,true]]',
]


@pytest.mark.parametrize("transid", TRANSIDS)
def test_transid_is_echoed_byte_for_byte(transid):
    text = ACTIVATION.replace('["f3Kq9ZcWb0Lr7TnY2pXa5MvE8sHd1GuJ",1718003021457]', transid)
    msg = wire.parse_activation(text.encode())
    for ack in (wire.completion(msg, INVOKER_0), wire.result(msg, record(msg)),
                wire.combined(msg, record(msg), INVOKER_0)):
        encoded = wire.encode_ack(ack)
        assert encoded.startswith(b'{"transid":' + transid.encode() + b",")


@pytest.mark.parametrize(("status", "system_error"), [(0, False), (1, False), (2, False), (3, True)])
def test_system_error_flag_is_set_exactly_for_whisk_errors(status, system_error):
    msg = wire.parse_activation(ACTIVATION)
    ack = wire.combined(msg, record(msg, status, {"error": "boom"} if status else {}), INVOKER_0)
    assert ack.is_system_error is system_error
    assert json.loads(wire.encode_ack(ack))["isSystemError"] is system_error


def test_oversize_ack_is_shrunk_to_the_activation_id():
    msg = wire.parse_activation(ACTIVATION)
    huge = record(msg, 0, {"blob": "x" * wire.MAX_MESSAGE_BYTES})
    for ack in (wire.combined(msg, huge, INVOKER_0), wire.result(msg, huge)):
        data = wire.encode_ack(ack)
        assert len(data) < 1000
        out = json.loads(data)
        assert out["response"] == "9c0e5d2a7b814f6e8a3d1c0b9f7e6d5a"
        assert out["transid"] == msg.transid
    shrunk = json.loads(wire.encode_ack(wire.combined(msg, record(msg, 3, {"blob": "x" * 2_000_000}), INVOKER_0)))
    assert shrunk["isSystemError"] is True and shrunk["instance"] == json.loads(INSTANCE_0)


@pytest.mark.parametrize(("value_bytes", "record_bytes"), [(0, 85), (63, 148), (64, 150), (1_054_562, 1_054_650)])
def test_record_size_estimate_matches_kafka_producer(value_bytes, record_bytes):
    # 1_054_562 -> 1_054_650: the size kafka-python's producer reports when it refuses such a record.
    assert wire.record_size_upper_bound(value_bytes) == record_bytes


def test_shrinking_starts_exactly_where_kafka_would_refuse_the_record():
    msg = wire.parse_activation(ACTIVATION)
    base = len(wire.encode(wire.result(msg, record(msg, 0, {"b": ""})).to_json()))
    limit = wire.MAX_MESSAGE_BYTES - 88  # the largest value the producer still takes
    assert wire.record_size_upper_bound(limit) == wire.MAX_MESSAGE_BYTES
    fits = wire.result(msg, record(msg, 0, {"b": "x" * (limit - base)}))
    too_big = wire.result(msg, record(msg, 0, {"b": "x" * (limit - base + 1)}))
    assert len(wire.encode_ack(fits)) == limit
    assert json.loads(wire.encode_ack(too_big))["response"] == msg.activation_id


@pytest.mark.parametrize("transid", TRANSIDS)
def test_combined_ack_from_the_records_json_is_encode_acks_bytes(transid):
    """The ack built around the record's JSON (encoded once for the ack and the ledger) is byte for byte
    what encoding the whole ack writes, shrunk at the same size."""
    import random
    rng = random.Random(transid)
    text = ACTIVATION.replace('["f3Kq9ZcWb0Lr7TnY2pXa5MvE8sHd1GuJ",1718003021457]', transid)
    msg = wire.parse_activation(text.encode())
    instances = [INVOKER_0, wire.InvokerInstance(3, 2048, "node-é")]
    for i in range(60):
        status = rng.choice([0, 1, 2, 3])
        result = {"s": "".join(rng.choice("aé\"\\\n😀{}[]") for _ in range(rng.randint(0, 12))),
                  "n": rng.random(), "l": [rng.randint(-5, 5), None, True]}
        ack = wire.combined(msg, record(msg, status, result), instances[i % 2])
        assert wire.encode_combined(ack, wire.encode(ack.response)) == wire.encode_ack(ack)
    big = wire.combined(msg, record(msg, 0, {"b": "x" * 500}), INVOKER_0)
    fits = wire.record_size_upper_bound(len(wire.encode_ack(big)))
    for limit in (fits, fits - 1):           # fits exactly, then one byte short
        assert (wire.encode_combined(big, wire.encode(big.response), limit)
                == wire.encode_ack(big, limit)), limit
    assert json.loads(wire.encode_combined(big, wire.encode(big.response), fits))["response"] != msg.activation_id
    assert json.loads(wire.encode_combined(big, wire.encode(big.response), fits - 1))["response"] == msg.activation_id


def test_completion_is_never_shrunk():
    msg = wire.parse_activation(ACTIVATION)
    ack = wire.completion(msg, INVOKER_0)
    assert ack.shrink() == ack


# --- WhiskActivation ---------------------------------------------------------------------------------


def test_activation_record_fields_and_annotations():
    msg = parsed(action={"path": "guest/img", "name": "resize", "version": "0.0.3"},
                 user={**activation()["user"], "subject": "alice", "namespace": {"name": "alice-ns", "uuid": "u"}})
    rec = record(msg, 1, {"error": "bad input"}, logs=["2024-06-10T00:00:00Z stdout: hi"])
    assert rec["namespace"] == "alice-ns" and rec["subject"] == "alice" and rec["name"] == "resize"
    assert rec["version"] == "0.0.3" and rec["publish"] is False
    assert rec["duration"] == rec["end"] - rec["start"] == 286
    assert rec["response"] == {"statusCode": 1, "result": {"error": "bad input"}}
    assert rec["logs"] == ["2024-06-10T00:00:00Z stdout: hi"]
    annotations = {a["key"]: a["value"] for a in rec["annotations"]}
    assert annotations == {"limits": LIMITS, "path": "guest/img/resize", "kind": "python:3",
                           "timeout": False, "waitTime": 41}  # warm start: no initTime
    assert "cause" not in rec


def test_sequence_component_record_carries_cause_and_caused_by():
    msg = parsed(cause="1" * 32)
    rec = record(msg, init_time_ms=300, timed_out=True)
    annotations = {a["key"]: a["value"] for a in rec["annotations"]}
    assert rec["cause"] == "1" * 32
    assert annotations["causedBy"] == "sequence"
    assert annotations["initTime"] == 300 and annotations["timeout"] is True


# --- ping, instance ids, topics ----------------------------------------------------------------------


def test_builds_and_reads_the_reference_ping():
    instance = InvokerInstance(instance=1, user_memory_mb=2048, unique_name="gpu-a", displayed_name="gpu-a")
    assert wire.ping_message(instance) == json.loads(PING)
    assert wire.parse_ping(PING) == (instance, True)
    assert wire.parse_ping('{"name":' + INSTANCE_0 + "}") == (INVOKER_0, True)  # OpenWhisk 1.0.0 form
    assert wire.ping_message(INVOKER_0, is_enabled=False)["isEnabled"] is False


@pytest.mark.parametrize(("memory", "mb"), [("1024 MB", 1024), ("2 GB", 2048), ("1048576 KB", 1024),
                                            ("134217728 B", 128)])
def test_invoker_memory_units(memory, mb):
    text = INSTANCE_0.replace("1024 MB", memory)
    assert InvokerInstance.from_json(json.loads(text)).user_memory_mb == mb


@pytest.mark.parametrize(("instance", "field"), [
    ({"instance": 0, "userMemory": "lots", "instanceType": "invoker"}, "name.userMemory"),
    ({"instance": "0", "userMemory": "1 MB", "instanceType": "invoker"}, "name.instance"),
    ({"instance": 0, "userMemory": "1 MB", "instanceType": "controller"}, "name.instanceType"),
    ({"userMemory": "1 MB", "instanceType": "invoker"}, "name.instance"),
])
def test_malformed_ping_names_the_field(instance, field):
    with pytest.raises(WireError) as err:
        wire.parse_ping(json.dumps({"name": instance}))
    assert err.value.field == field


def test_topic_names_with_prefix():
    assert wire.invoker_topic(3) == "invoker3"
    assert wire.invoker_topic(0, prefix="real_") == "real_invoker0"
    assert wire.completed_topic("0") == "completed0"
    assert wire.completed_topic(ControllerInstance("standalone")) == "completedstandalone"
    assert wire.completed_topic(wire.parse_activation(ACTIVATION).root_controller, "p_") == "p_completed0"
    assert wire.health_topic("real_") == "real_health"


def test_topic_settings_match_openwhisk():
    invoker = wire.topic_config("invoker")
    assert invoker == {"segment.bytes": "536870912", "retention.bytes": "1073741824",
                       "retention.ms": "172800000", "max.message.bytes": "1054644"}
    assert wire.topic_config("completed")["retention.ms"] == "3600000"
    assert wire.topic_config("completed")["max.message.bytes"] == "1054644"
    assert "max.message.bytes" not in wire.topic_config("health")
    with pytest.raises(KeyError):
        wire.topic_config("nope")


# --- through a real broker (integration) ----------------------------------------------------------


@pytest.fixture
def completed_topic(kafka_bootstrap) -> str:
    name = wire.completed_topic(f"t{uuid.uuid4().hex[:8]}")
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    try:
        admin.create_topics([NewTopic(name, 1, 1, topic_configs=wire.topic_config("completed"))])
    finally:
        admin.close()
    return name


@pytest.mark.integration
def test_producer_refuses_exactly_what_encode_ack_shrinks(kafka_bootstrap, completed_topic):
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, acks=1, max_request_size=wire.MAX_MESSAGE_BYTES)
    largest = wire.MAX_MESSAGE_BYTES - 88
    try:
        producer.send(completed_topic, b"x" * largest).get(timeout=10)
        with pytest.raises(MessageSizeTooLargeError):
            producer.send(completed_topic, b"x" * (largest + 1)).get(timeout=10)
        msg = wire.parse_activation(ACTIVATION)
        huge = wire.combined(msg, record(msg, 0, {"blob": "y" * wire.MAX_MESSAGE_BYTES}), INVOKER_0)
        producer.send(completed_topic, wire.encode_ack(huge)).get(timeout=10)
    finally:
        producer.close()

    consumer = KafkaConsumer(bootstrap_servers=kafka_bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False, fetch_max_bytes=4 * wire.MAX_MESSAGE_BYTES,
                             max_partition_fetch_bytes=4 * wire.MAX_MESSAGE_BYTES)
    consumer.assign([TopicPartition(completed_topic, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + 10
    try:
        while len(values) < 2 and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                values += [r.value for r in records]
    finally:
        consumer.close()
    assert [len(v) for v in values][:1] == [largest]
    ack = wire.parse_ack(values[1])
    assert isinstance(ack, wire.CombinedCompletionAndResultMessage)
    assert ack.response == json.loads(ACTIVATION)["activationId"]


def test_nan_and_infinity_are_no_json_in_and_never_written_out():
    for constant in ("NaN", "Infinity", "-Infinity"):
        with pytest.raises(wire.WireError, match="not valid JSON"):
            wire.parse_activation(ACTIVATION.replace('"content":', f'"x":{constant},"content":'))
    with pytest.raises(ValueError):
        wire.encode({"x": float("nan")})
