"""Scheduler/agent messages round-trip, malformed ones are named, and inputs compose as ``docs/architecture.md`` §5 says."""

import re
from dataclasses import replace

import pytest

from agent_channel.protocol import (
    ActionRef,
    BatchResult,
    DispatchMessage,
    Heartbeat,
    IdleWorkers,
    InputRef,
    PrewarmDone,
    PrewarmMessage,
    ProtocolError,
    RunRequest,
    RunResult,
    compose_input,
    decode,
    encode,
)
from esg.cluster import ClusterSnapshot, Slice, SliceRef
from esg.model import Config

PREWARM = PrewarmMessage("inc-p0", "n0", "app", "cls", ActionRef("guest", "cls", "0.0.1"), Config(4, 2, "1g.5gb"),
                         SliceRef("1g.5gb", 6), (SliceRef("2g.10gb", 4),), 30000, "esg:0:results",
                         {"MODEL": "r"}, "u:s3cretkey")


def test_round_trips():
    d = DispatchMessage("b1", "n0", "app", "resnet50", ActionRef("guest", "resnet50", "1-abc"),
                        Config(4, 2, "1g.5gb"), SliceRef("1g.5gb", 6), (SliceRef("2g.10gb", 4),),
                        (RunRequest("a" * 32, "tx", {"x": 1}, 123, "guest", init_env={"MODEL": "r", "n": [1]},
                                    api_key="u:s3cretkey"),
                         RunRequest("b" * 32, "tx", None, 123, "guest",
                                    (InputRef("pre", "esg::data:b:pre", "n1", 600),))),
                        "esg:0:results", False, 240)
    r = BatchResult("b1", "n0", (RunResult("a" * 32, 0, {"ok": True}, 1, 2, 150, ("log",), False),
                                   RunResult("b" * 32, 0, None, 1, 2, output_key="k", output_bytes=9)),
                      None, "resnet50", Config(4, 2, "1g.5gb"), 12.5)
    h = Heartbeat("n0", 16, 12, 65536, "A100-40GB", (Slice(SliceRef("3g.20gb", 4), True, "MIG-x"),),
                  (("resnet50", Config(1, 1, None)),), False, 7, 99)
    for msg in (d, r, h):
        assert decode(encode(msg)) == msg
    assert "s3cretkey" not in repr(d)
    assert h.node_state().idle_compute_slices() == 4


def test_a_dispatch_names_the_action_time_limit_and_still_reads_the_name_it_had_before():
    d = DispatchMessage("b1", "n0", "app", "f", ActionRef("guest", "f"), Config(1, 1, None), None, (),
                        (RunRequest("a" * 32, "tx", {"x": 1}, 1718003081790, "guest"),), "esg:0:results")
    wire = encode(d)
    assert b'"time_limit_at_ms":1718003081790' in wire and b"deadline_ms" not in wire
    # a dispatch written before the rename, still pending in a node's stream when the agent is upgraded
    assert decode(wire.replace(b"time_limit_at_ms", b"deadline_ms")) == d
    with pytest.raises(ProtocolError, match="time_limit_at_ms"):
        decode(wire.replace(b'"time_limit_at_ms":1718003081790,', b""))


def test_heartbeats_carry_idle_workers_and_batches_and_results_say_how_they_started():
    ref = SliceRef("3g.20gb", 4)
    h = Heartbeat("n0", 16, 12, 65536, "A100-40GB", (Slice(ref, False, "MIG-x"),), (), False, 8, 99,
                  (IdleWorkers("f", 2, ref, 1), IdleWorkers("f", 4, ref, 2), IdleWorkers("g", 1, None, 1)),
                  ("b2",), ("b1",))
    assert decode(encode(h)) == h
    # the scheduler's node state counts idle workers by (function, slice): any vCPU count serves
    assert h.node_state().idle_workers == {("f", ref): 3, ("g", None): 1}
    r = BatchResult("b1", "n0", (), None, "f", Config(1, 2, "3g.20gb"), 3.0, cold=True, reconfigured=2)
    assert decode(encode(r)) == r
    overlapped = BatchResult("b1", "n0", (), None, "f", Config(1, 2, None), 3.0, cold=False, overlapped_start=True)
    assert decode(encode(overlapped)) == overlapped
    # an older agent's result has no such field: nothing overlapped it, as far as anyone can tell
    older = encode(overlapped).replace(b',"overlapped_start":true', b"")
    assert older != encode(overlapped) and decode(older) == replace(overlapped, overlapped_start=False)
    with pytest.raises(ProtocolError, match="overlapped_start"):
        decode(encode(overlapped).replace(b'"overlapped_start":true', b'"overlapped_start":"yes"'))


def test_planning_on_a_heartbeat_marks_the_schedulers_copy_of_its_slices_not_the_message():
    ref = SliceRef("3g.20gb", 4)
    h = Heartbeat("n0", 16, 16, 65536, "A100-40GB", (Slice(ref, False, "MIG-x"),))
    snap = ClusterSnapshot.of([h.node_state()])
    config = Config(1, 1, "3g.20gb")
    fit = snap.fit("n0", config)
    assert fit is not None and fit.slice == ref and not fit.create
    snap.reserve(config, fit)
    assert snap.nodes["n0"].slices == [Slice(ref, True, "MIG-x")]
    assert h.slices == (Slice(ref, False, "MIG-x"),) and decode(encode(h)) == h


@pytest.mark.parametrize("field, value, needle", [
    ("idle", [{"function": "f", "vcpus": 0, "slice": None, "count": 1}], "vcpus"),
    ("idle", [{"function": "f", "vcpus": 1, "slice": None, "count": -1}], "count"),
    ("idle", ["x"], "object"), ("running", "b1", "batch ids"), ("done", [1], "batch ids"),
    ("prewarmed", {"p1": "started"}, "must be a list"), ("prewarmed", ["p1"], "object"),
    ("prewarmed", [{"prewarm_id": "p1"}], "outcome"),
    ("prewarmed", [{"prewarm_id": "p1", "outcome": "ready"}], "one of started"),
    ("prewarmed", [{"prewarm_id": 7, "outcome": "warm"}], "prewarm_id"),
    ("prewarmed", [{"prewarm_id": "p1", "outcome": "warm", "reconfigured": -1}], "reconfigured"),
])
def test_malformed_heartbeat_tracking_fields_are_named(field, value, needle):
    import json
    raw = {"type": "heartbeat", "node": "n", "vcpus_total": 1, "vcpus_free": 1, "memory_mb": 1, field: value}
    with pytest.raises(ProtocolError, match=needle):
        decode(json.dumps(raw))


def test_a_prewarm_round_trips_and_a_dispatch_may_carry_its_keep_alive():
    assert decode(encode(PREWARM)) == PREWARM
    assert "s3cretkey" not in repr(PREWARM)
    bare = PrewarmMessage("p1", "n0", "app", "f", ActionRef("guest", "f"), Config(1, 1, None), None, (), 0)
    assert decode(encode(bare)) == bare and b"api_key" not in encode(bare) and b"init_env" not in encode(bare)
    d = DispatchMessage("b1", "n0", "app", "f", ActionRef("guest", "f"), Config(1, 1, None), None, (),
                        (RunRequest("a" * 32, "tx", {}, 1, "guest"),), "r")
    assert d.keep_alive_ms is None and b"keep_alive_ms" not in encode(d) and decode(encode(d)) == d
    assert decode(encode(replace(d, keep_alive_ms=1500))).keep_alive_ms == 1500


def _prewarm_with(**change) -> str:
    import json
    raw = json.loads(encode(PREWARM))
    for k, v in change.items():
        if v is KeyError:
            del raw[k]
        else:
            raw[k] = v
    return json.dumps(raw)


@pytest.mark.parametrize("change, needle", [
    ({"prewarm_id": KeyError}, "prewarm_id"), ({"prewarm_id": 7}, "prewarm_id"),
    ({"node": KeyError}, "node"), ({"function": None}, "function"),
    ({"action": "guest/cls"}, "action"), ({"action": {"namespace": "guest"}}, "name"),
    ({"action": {"namespace": "guest", "name": "cls", "revision": 3}}, "revision"),
    ({"config": None}, "config"), ({"config": {"batch": 0, "vcpus": 1}}, "config"),
    ({"slice": "1g.5gb"}, "slice"), ({"slice": {"profile": "1g.5gb", "start": "6"}}, "start"),
    ({"destroy": {"profile": "1g.5gb", "start": 6}}, "destroy"), ({"destroy": [None]}, "destroy"),
    ({"keep_alive_ms": -1}, "keep_alive_ms"), ({"sent_ms": "now"}, "sent_ms"), ({"sent_ms": 1.5}, "sent_ms"),
    ({"keep_alive_ms": 1.5}, "keep_alive_ms"), ({"keep_alive_ms": True}, "keep_alive_ms"),
    ({"reply_to": KeyError}, "reply_to"), ({"init_env": "MODEL=r"}, "init_env"), ({"api_key": 5}, "api_key"),
])
def test_malformed_prewarms_are_named(change, needle):
    with pytest.raises(ProtocolError, match=needle):
        decode(_prewarm_with(**change))


def test_a_dispatch_with_a_bad_keep_alive_is_named():
    d = DispatchMessage("b1", "n0", "app", "f", ActionRef("guest", "f"), Config(1, 1, None), None, (),
                        (RunRequest("a" * 32, "tx", {}, 1, "guest"),), "r")
    for bad in (b'"keep_alive_ms":-5', b'"keep_alive_ms":"5"'):
        with pytest.raises(ProtocolError, match="keep_alive_ms"):
            decode(encode(d)[:-1] + b"," + bad + b"}")


def test_a_dispatch_may_name_idle_workers_to_stop_first_and_one_that_names_none_reads_as_before():
    import json
    d = DispatchMessage("b1", "n0", "app", "f", ActionRef("guest", "f"), Config(1, 1, "3g.20gb"),
                        SliceRef("3g.20gb", 4), (), (RunRequest("a" * 32, "tx", {}, 1, "guest"),), "r")
    assert d.evict == () and b"evict" not in encode(d) and decode(encode(d)) == d
    e = replace(d, evict=(("g", 2), ("h", 1)))
    assert json.loads(encode(e))["evict"] == [{"function": "g", "count": 2}, {"function": "h", "count": 1}]
    assert decode(encode(e)) == e
    # a message written before the field (or by a scheduler that names none) stops nothing
    older = json.loads(encode(e))
    del older["evict"]
    assert decode(json.dumps(older)).evict == ()
    assert decode(json.dumps({**older, "evict": []})).evict == ()


@pytest.mark.parametrize("evict, needle", [
    ({"function": "g", "count": 1}, "'evict' must be a list"), ("g", "'evict' must be a list"),
    (["g"], "evict: an entry must be an object"), ([["g", 1]], "evict: an entry must be an object"),
    ([{"count": 1}], "evict: missing field 'function'"), ([{"function": 7, "count": 1}], "evict: field 'function'"),
    ([{"function": "", "count": 1}], "evict: 'function' must not be empty"),
    ([{"function": "g"}], "evict: missing field 'count'"), ([{"function": "g", "count": "1"}], "evict: field 'count'"),
    ([{"function": "g", "count": 1.0}], "evict: field 'count'"), ([{"function": "g", "count": True}], "evict: field 'count'"),
    ([{"function": "g", "count": 0}], "evict: 'count' must be a positive integer"),
    ([{"function": "g", "count": -2}], "evict: 'count' must be a positive integer"),
])
def test_a_dispatch_with_a_bad_eviction_is_named(evict, needle):
    import json
    d = DispatchMessage("b1", "n0", "app", "f", ActionRef("guest", "f"), Config(1, 1, "3g.20gb"),
                        SliceRef("3g.20gb", 4), (), (RunRequest("a" * 32, "tx", {}, 1, "guest"),), "r")
    with pytest.raises(ProtocolError, match=re.escape(needle)):
        decode(json.dumps({**json.loads(encode(d)), "evict": evict}))


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
    (b'{"type":"dispatch","batch_id":"b","node":"n","app":"a","function":"f","action":{"namespace":"g",'
     b'"name":"f"},"config":{"batch":1,"vcpus":1},"reply_to":"r","requests":[{"activation_id":"a",'
     b'"transaction_id":"t","deadline_ms":1,"namespace":"g","init_env":"MODEL=r"}]}', "init_env"),
])
def test_malformed_messages_are_named(raw, needle):
    with pytest.raises(ProtocolError, match=needle):
        decode(raw)


def test_a_prewarm_may_leave_its_keep_alive_to_the_agent_and_say_when_it_was_sent():
    bare = PrewarmMessage("p1", "n0", "app", "f", ActionRef("guest", "f"), Config(1, 1, None), None, (), None,
                          sent_ms=1_700_000_000_000)
    assert b"keep_alive_ms" not in encode(bare) and decode(encode(bare)) == bare
    old = PrewarmMessage("p1", "n0", "app", "f", ActionRef("guest", "f"), Config(1, 1, None), None, (), 0)
    assert decode(encode(old)).sent_ms is None and b"sent_ms" not in encode(old)


def test_a_heartbeat_says_what_became_of_each_prewarm_it_names_done_and_an_older_one_says_nothing():
    h = Heartbeat("n0", 16, 12, 65536, "A100-40GB", done=("b1", "p1", "p2", "p3"),
                  prewarmed=(PrewarmDone("p1", "started", 1), PrewarmDone("p2", "warm"), PrewarmDone("p3", "expired")))
    assert decode(encode(h)) == h
    older = encode(h).replace(encode(h)[encode(h).index(b',"prewarmed"'):-1], b"")
    assert b"prewarmed" not in older and decode(older) == replace(h, prewarmed=())


def test_a_result_and_a_prewarm_say_how_long_their_mig_change_took_and_an_older_one_says_nothing():
    r = BatchResult("b1", "n0", (), None, "f", Config(1, 2, "3g.20gb"), 3.0, cold=True, reconfigured=2,
                    reconfig_ms=2150.5)
    assert decode(encode(r)) == r and b'"reconfig_ms":2150.5' in encode(r)
    # none measured (no change made, or an older agent): the field is not written, and reads as None
    plain = replace(r, reconfigured=0, reconfig_ms=None)
    assert b"reconfig_ms" not in encode(plain) and decode(encode(plain)) == plain
    assert decode(encode(r).replace(b',"reconfig_ms":2150.5', b"")) == replace(r, reconfig_ms=None)
    h = Heartbeat("n0", 16, 12, 65536, "A100-40GB", done=("p1", "p2"),
                  prewarmed=(PrewarmDone("p1", "started", 1, 980.0), PrewarmDone("p2", "warm")))
    assert decode(encode(h)) == h
    assert encode(h).count(b"reconfig_ms") == 1


@pytest.mark.parametrize("value", ['"2000"', "true", "-1", "-0.5", "NaN", "Infinity", "-Infinity", "1e400",
                                   "1" + "0" * 400, "[1]", "{}"])
def test_a_bad_mig_change_time_is_named(value):
    import json
    r = json.loads(encode(BatchResult("b1", "n0", (), None, "f", Config(1, 1, "1g.5gb"), 3.0, reconfigured=1)))
    raw = json.dumps(r)[:-1] + f',"reconfig_ms":{value}}}'
    with pytest.raises(ProtocolError, match="reconfig_ms"):
        decode(raw)
    beat = {"type": "heartbeat", "node": "n", "vcpus_total": 1, "vcpus_free": 1, "memory_mb": 1}
    raw = json.dumps(beat)[:-1] + (',"prewarmed":[{"prewarm_id":"p1","outcome":"started","reconfigured":1,'
                                   f'"reconfig_ms":{value}}}]}}')
    with pytest.raises(ProtocolError, match="reconfig_ms"):
        decode(raw)
