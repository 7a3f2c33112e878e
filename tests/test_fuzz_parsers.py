"""Fuzzed wire, pure consumers: mutated real messages and files get a result or a *named* error, never a
crash or a hang (tests/fuzz.py makes the mutations).

* OpenWhisk's Kafka shapes (``controller_plugin.wire``): the ActivationMessage the scheduler reads on
  ``invoker{N}``, acks and pings -> a parsed message or :class:`WireError`;
* the scheduler/agent messages (``agent_channel.protocol.decode``): dispatches, pre-warms, results, heartbeats ->
  a message or :class:`ProtocolError`; the agent's salvage of a malformed dispatch never raises;
* app files and profile tables (``esg.model``, ``esg.profiles``) -> an app/profile or AppError/ProfileError;
* the emulator's trace files -> rows or a one-line CliError.

The broker-backed reader of ``invoker{N}`` is fuzzed in ``tests/controller/test_fuzz_invoker_reader.py``,
the agent's batch entry in ``tests/agent/test_fuzz_batch_entry.py``, the REST metadata parser in
``tests/controller/test_fuzz_metadata.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from agent_channel import protocol
from controller_plugin import wire
from esg.errors import AppError, ProfileError
from esg.model import App
from esg.profiles import Profile
from esg_cli.emulate import read_trace
from esg_cli.errors import CliError
from esg_files import load_app, load_profile
from invoker_agent.service import salvage
from tests.fuzz import FUZZ, mutated

ROOT = Path(__file__).resolve().parent.parent
ACTIVATION = {
    "transid": ["a1b2c3", 1718003021000, False],
    "action": {"path": "guest", "name": "imgclass", "version": "0.0.1"},
    "revision": "1-9c0e5d2a7b814f6e8a3d1c0b9f7e6d5a",
    "user": {"subject": "guest", "namespace": {"name": "guest", "uuid": "23bc46b1-71f6-4ed5-8c54-816aa4f8c502"},
             "authkey": {"api_key": "23bc46b1-71f6-4ed5-8c54-816aa4f8c502:secret"},
             "rights": ["READ", "PUT", "DELETE", "ACTIVATE"], "limits": {}},
    "activationId": "9c0e5d2a7b814f6e8a3d1c0b9f7e6d5a",
    "rootControllerIndex": {"asString": "0", "instanceType": "controller"},
    "blocking": True, "content": {"seed": 1}, "initArgs": [], "lockedArgs": {},
}
INSTANCE = {"instance": 0, "userMemory": "2048 MB", "instanceType": "invoker", "tags": [],
            "dedicatedNamespaces": []}
ACK = {"transid": ["a1b2c3", 1718003021000], "response": {"activationId": ACTIVATION["activationId"],
                                                          "response": {"statusCode": 0, "result": {}}},
       "isSystemError": False, "instance": INSTANCE}
PING = {"name": INSTANCE, "isEnabled": True}
DISPATCH = {"type": "dispatch", "batch_id": "inc-1", "node": "node0", "app": "guest/imgclass",
            "function": "guest/resnet50",
            "action": {"namespace": "guest", "name": "resnet50", "revision": "0.0.1", "kind": "python:3",
                       "timeout_ms": 60000, "memory_mb": 512},
            "config": {"batch": 2, "vcpus": 1, "gpu": "1g.5gb"}, "slice": {"profile": "1g.5gb", "start": 0},
            "destroy": [{"profile": "3g.20gb", "start": 4}], "reply_to": "esg:0:results",
            "return_output": False, "data_ttl_s": 240, "evict": [{"function": "guest/densenet121", "count": 1}],
            "requests": [{"activation_id": "a" * 32, "transaction_id": "t1", "value": {"seed": 1},
                          "deadline_ms": 1718003081790, "namespace": "guest"},
                         {"activation_id": "b" * 32, "transaction_id": "t2", "value": None,
                          "deadline_ms": 1718003081790, "namespace": "guest",
                          "inputs": [{"name": "pre", "key": "esg::data:b:pre", "node": "node1", "bytes": 600}]}]}
RESULT = {"type": "result", "batch_id": "inc-1", "node": "node0", "error": None, "function": "guest/resnet50",
          "config": {"batch": 2, "vcpus": 1, "gpu": "1g.5gb"}, "run_ms": 12.5, "reconfigured": 1,
          "reconfig_ms": 2040.5,
          "results": [{"activation_id": "a" * 32, "status_code": 0, "result": {"ok": True}, "start_ms": 1,
                       "end_ms": 2, "init_ms": None, "logs": ["hello"], "timeout": False},
                      {"activation_id": "b" * 32, "status_code": 0, "result": None, "start_ms": 1,
                       "end_ms": 2, "init_ms": 40, "logs": [], "timeout": False,
                       "output_key": "esg::data:b:resnet50", "output_bytes": 4000}]}
HEARTBEAT = {"type": "heartbeat", "node": "node0", "vcpus_total": 16, "vcpus_free": 8, "memory_mb": 1024,
             "gpu_model": "A100-40GB", "slices": [{"profile": "1g.5gb", "start": 0, "busy": True, "uuid": "MIG-1"}],
             "warm": [{"function": "guest/resnet50", "config": {"batch": 1, "vcpus": 1, "gpu": None}}],
             "draining": False, "seq": 3, "sent_ms": 5}
PREWARM = {"type": "prewarm", "prewarm_id": "inc-w1", "node": "node0", "app": "guest/imgclass",
           "function": "guest/resnet50",
           "action": {"namespace": "guest", "name": "resnet50", "revision": "0.0.1", "kind": "python:3",
                      "timeout_ms": 60000, "memory_mb": 512},
           "config": {"batch": 1, "vcpus": 1, "gpu": "1g.5gb"}, "slice": {"profile": "1g.5gb", "start": 0},
           "destroy": [], "keep_alive_ms": 30000, "reply_to": "esg:0:results", "init_env": {"MODEL": "r"},
           "api_key": "u:k"}
APP = json.loads((ROOT / "apps" / "expanded-image-classification.json").read_text())
PROFILE = json.loads((ROOT / "profiles" / "tables" / "a100" / "resnet50.json").read_text())


def _named(exc: Exception) -> bool:
    """An error message names something: never empty."""
    return bool(str(exc).strip())


@settings(FUZZ, max_examples=600)
@given(mutated(ACTIVATION))
def test_activation_messages(raw):
    try:
        msg = wire.parse_activation(raw)
    except wire.WireError as exc:
        assert _named(exc) and exc.field
        return
    assert len(msg.activation_id) == 32
    wire.encode(msg.raw)             # what is accepted can be written back (ledger, dead letters)


@FUZZ
@given(st.one_of(mutated(ACK), mutated(PING)))
def test_acks_and_pings(raw):
    for parse in (wire.parse_ack, wire.parse_ping):
        try:
            parse(raw)
        except wire.WireError as exc:
            assert _named(exc)


@settings(FUZZ, max_examples=600)
@given(st.one_of(mutated(DISPATCH), mutated(PREWARM), mutated(RESULT), mutated(HEARTBEAT)))
def test_scheduler_agent_messages(raw):
    try:
        msg = protocol.decode(raw)
    except protocol.ProtocolError as exc:
        assert _named(exc)
        batch_id, ids, reply_to = salvage(raw)      # what the agent answers a malformed dispatch with
        assert batch_id is None or isinstance(batch_id, str)
        assert reply_to is None or isinstance(reply_to, str)
        assert all(isinstance(i, str) for i in ids)
        return
    assert protocol.decode(protocol.encode(msg)) == msg    # what is accepted survives a round trip


@FUZZ
@given(mutated(APP))
def test_app_files(tmp_path_factory, raw):
    path = tmp_path_factory.mktemp("app") / "app.json"
    path.write_bytes(raw)
    try:
        app = load_app(path)
    except AppError as exc:
        assert str(path) in str(exc)
        return
    assert isinstance(app, App) and app.topo_order


@FUZZ
@given(mutated(PROFILE))
def test_profile_tables(tmp_path_factory, raw):
    path = tmp_path_factory.mktemp("profile") / "resnet50.json"
    path.write_bytes(raw)
    try:
        profile = load_profile(path)
    except ProfileError as exc:
        assert str(path) in str(exc)
        return
    assert isinstance(profile, Profile) and profile.entries


TRACE = (b"HashOwner,HashApp,HashFunction,Trigger,1,2,3\n"
         b"o1,a1,f1,http,3,0,7\no2,a2,f2,timer,1,1,1\n")


@FUZZ
@given(st.one_of(st.integers(0, len(TRACE) - 1).map(lambda n: TRACE[:n]),
                 st.binary(max_size=200).map(lambda b: TRACE + b),
                 st.lists(st.text(max_size=10), max_size=8).map(lambda r: TRACE + ",".join(r).encode()),
                 st.binary(max_size=300)))
def test_trace_files(tmp_path_factory, raw):
    path = tmp_path_factory.mktemp("trace") / "trace.csv"
    path.write_bytes(raw)
    try:
        rows = read_trace(str(path))
    except CliError as exc:
        assert "--trace" in str(exc) and "\n" not in str(exc).strip()
        return
    assert all(isinstance(name, str) and all(isinstance(c, float) for c in counts) for name, counts in rows)


def test_parameters_nested_too_deeply_are_refused_by_name():
    deep = json.loads("[" * 900 + "]" * 900)     # parses, but could not be written into an ack again
    for raw, parse, error in ((wire.encode({**ACTIVATION, "content": deep}), wire.parse_activation, wire.WireError),
                              (json.dumps({**DISPATCH, "requests": [{**DISPATCH["requests"][0], "value": deep}]}),
                               protocol.decode, protocol.ProtocolError)):
        try:
            parse(raw)
        except error as exc:
            assert "deeper than 200 levels" in str(exc)
        else:
            raise AssertionError("accepted")
