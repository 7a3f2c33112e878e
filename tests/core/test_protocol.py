"""Scheduler/agent messages round-trip, and malformed ones are named."""

import pytest

from esg.cluster import SliceRef
from esg.model import Config
from esg.protocol import (
    ActionRef,
    DispatchMessage,
    Heartbeat,
    ProtocolError,
    ResultMessage,
    RunRequest,
    RunResult,
    SliceStatus,
    decode,
    dispatch_topic,
    encode,
)


def test_round_trips():
    d = DispatchMessage("b1", "n0", "app", "resnet50", ActionRef("guest", "resnet50", "1-abc"),
                        Config(4, 2, "1g.5gb"), SliceRef("1g.5gb", 6), (SliceRef("2g.10gb", 4),),
                        (RunRequest("a" * 32, "tx", {"x": 1}, 123, "guest"),))
    r = ResultMessage("b1", "n0", (RunResult("a" * 32, 0, {"ok": True}, 1, 2, 150, ("log",), False),))
    h = Heartbeat("n0", 16, 12, 65536, "A100-40GB", (SliceStatus(SliceRef("3g.20gb", 4), True, "MIG-x"),),
                  (("resnet50", Config(1, 1, None)),), False, 7, 99)
    for msg in (d, r, h):
        assert decode(encode(msg)) == msg
    assert h.node_state().idle_compute_slices() == 4
    assert dispatch_topic("n0", "p_") == "p_esgdispatchn0"


@pytest.mark.parametrize("raw, needle", [
    (b"\xff", "JSON"), (b"[]", "object"), (b'{"type":"nope"}', "nope"),
    (b'{"type":"result","node":"n","results":[]}', "batch_id"),
    (b'{"type":"result","batch_id":"b","node":"n","results":[{"activation_id":"a","status_code":7,'
     b'"start_ms":1,"end_ms":2}]}', "status_code"),
    (b'{"type":"heartbeat","node":"n","vcpus_total":"x","vcpus_free":1,"memory_mb":1}', "vcpus_total"),
])
def test_malformed_messages_are_named(raw, needle):
    with pytest.raises(ProtocolError, match=needle):
        decode(raw)
