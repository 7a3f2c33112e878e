"""Scheduler/agent messages round-trip, malformed ones are named, and inputs compose as DESIGN §3 says."""

import pytest

from esg.cluster import SliceRef
from esg.model import Config
from esg.protocol import (
    ActionRef,
    DispatchMessage,
    Heartbeat,
    InputRef,
    ProtocolError,
    ResultMessage,
    RunRequest,
    RunResult,
    SliceStatus,
    compose_input,
    decode,
    encode,
)


def test_round_trips():
    d = DispatchMessage("b1", "n0", "app", "resnet50", ActionRef("guest", "resnet50", "1-abc"),
                        Config(4, 2, "1g.5gb"), SliceRef("1g.5gb", 6), (SliceRef("2g.10gb", 4),),
                        (RunRequest("a" * 32, "tx", {"x": 1}, 123, "guest"),
                         RunRequest("b" * 32, "tx", None, 123, "guest",
                                    (InputRef("pre", "esg::data:b:pre", "n1", 600),))),
                        "esg:0:results", False, 240)
    r = ResultMessage("b1", "n0", (RunResult("a" * 32, 0, {"ok": True}, 1, 2, 150, ("log",), False),
                                   RunResult("b" * 32, 0, None, 1, 2, output_key="k", output_bytes=9)),
                      None, "resnet50", Config(4, 2, "1g.5gb"), 12.5)
    h = Heartbeat("n0", 16, 12, 65536, "A100-40GB", (SliceStatus(SliceRef("3g.20gb", 4), True, "MIG-x"),),
                  (("resnet50", Config(1, 1, None)),), False, 7, 99)
    for msg in (d, r, h):
        assert decode(encode(msg)) == msg
    assert h.node_state().idle_compute_slices() == 4


def test_inputs_compose_as_the_data_flow_rule_says():
    assert compose_input([("pre", {"t": 1})]) == {"t": 1}
    assert compose_input([("cls", 2), ("cls-b", 3)]) == {"cls": 2, "cls-b": 3}


@pytest.mark.parametrize("raw, needle", [
    (b"\xff", "JSON"), (b"[]", "object"), (b'{"type":"nope"}', "nope"),
    (b'{"type":"result","node":"n","results":[]}', "batch_id"),
    (b'{"type":"result","batch_id":"b","node":"n","results":[{"activation_id":"a","status_code":7,'
     b'"start_ms":1,"end_ms":2}]}', "status_code"),
    (b'{"type":"heartbeat","node":"n","vcpus_total":"x","vcpus_free":1,"memory_mb":1}', "vcpus_total"),
    (b'{"type":"dispatch","batch_id":"b","node":"n","app":"a","function":"f","action":{"namespace":"g",'
     b'"name":"f"},"config":{"batch":1,"vcpus":1},"requests":[{"activation_id":"a","transaction_id":"t",'
     b'"deadline_ms":1,"namespace":"g"}]}', "reply_to"),
    (b'{"type":"dispatch","batch_id":"b","node":"n","app":"a","function":"f","action":{"namespace":"g",'
     b'"name":"f"},"config":{"batch":1,"vcpus":1},"reply_to":"r","requests":[{"activation_id":"a",'
     b'"transaction_id":"t","deadline_ms":1,"namespace":"g","inputs":[{"name":"p","node":"n"}]}]}', "key"),
])
def test_malformed_messages_are_named(raw, needle):
    with pytest.raises(ProtocolError, match=needle):
        decode(raw)
