"""Fuzzed wire, agent side: mutated real dispatches through the agent's reader (``agent_channel.protocol.decode``)
and batch entry (:class:`BatchHandler` with real workers, the fake MIG backend and the REST stand-in).

A mutated dispatch is either refused with a named :class:`ProtocolError` (and what the agent salvages from
it to answer is well-formed) or run: then every activation of it gets exactly one answer with one of
OpenWhisk's status codes, the answer can be published, and a good batch behind it still runs.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from agent_channel import protocol
from agent_channel.keys import Keys
from esg.model import Config
from invoker_agent.actions import ActionFetcher
from invoker_agent.batch import BatchHandler
from invoker_agent.data import DataPlane, LocalOutputs
from invoker_agent.heartbeat import WarmRegistry
from invoker_agent.node import NodeAgent
from invoker_agent.service import salvage
from invoker_agent.slices import SliceManager
from invoker_agent.vcpus import VcpuAllocator
from tests.agent.agent_harness import AUTH, OpenWhiskStandIn
from tests.fuzz import FUZZ, json_values, mutated

ECHO = ("def main(a):\n    return {'echo': a}\n"
        "def main_batch(xs):\n    return [{'echo': x} for x in xs]\n")
DISPATCH = {"type": "dispatch", "batch_id": "b-000001", "node": "node-f", "app": "guest/echo",
            "function": "guest/echo",
            "action": {"namespace": "guest", "name": "echo", "revision": None, "kind": "python:3",
                       "timeout_ms": 20000, "memory_mb": 256},
            "config": {"batch": 2, "vcpus": 1, "gpu": "1g.5gb"}, "slice": {"profile": "1g.5gb", "start": 0},
            "destroy": [], "reply_to": "esg:0:results",
            "requests": [{"activation_id": "a" * 32, "transaction_id": "t1", "value": {"seed": 1},
                          "deadline_ms": 1718003081790, "namespace": "guest"},
                         {"activation_id": "b" * 32, "transaction_id": "t2", "value": {"seed": 2, "s": "ü"},
                          "deadline_ms": 1718003081790, "namespace": "guest"}]}
GOOD = protocol.DispatchMessage("good", "node-f", "guest/echo", "guest/echo",
                                protocol.ActionRef("guest", "echo", None, timeout_ms=20000), Config(1, 1), None, (),
                                (protocol.RunRequest("c" * 32, "t3", {"ok": 1}, 1718003081790, "guest"),))


@pytest.fixture(scope="module")
def batches():
    with OpenWhiskStandIn() as api:
        api.add("echo", ECHO, timeout_ms=20000)
        api.add("deep", "def main(a):\n    v = []\n    for _ in range(500):\n        v = [v]\n    return {'v': v}\n")
        node = NodeAgent.create("node-f", vcpus=2, fake_gpu="A100-40GB")
        try:
            # no data store: these batches carry their inputs and return their outputs inline
            yield BatchHandler(node, ActionFetcher(api.url, AUTH), SliceManager(node),
                              VcpuAllocator(2, sorted(__import__("os").sched_getaffinity(0))), WarmRegistry(),
                              DataPlane(None, Keys(), LocalOutputs(1 << 20)))
        finally:
            node.close()


@st.composite
def odd_dispatches(draw) -> bytes:
    """Well-formed dispatches with odd contents: other configurations and slices (some impossible), an
    action that does not exist, a tiny time limit, values of any shape, huge or deeply nested."""
    gpu = draw(st.sampled_from([None, "1g.5gb", "2g.10gb", "7g.40gb", "9g.99gb"]))
    depth = draw(st.integers(1, 900))
    values = st.one_of(json_values, st.integers(1, 300_000).map(lambda n: "x" * n),
                       st.just(json.loads("[" * depth + "]" * depth)))
    requests = [{"activation_id": f"{i:032x}", "transaction_id": f"t{i}", "value": draw(values),
                 "deadline_ms": 1718003081790, "namespace": "guest"} for i in range(draw(st.integers(1, 3)))]
    slice_ = None if gpu is None and draw(st.booleans()) else {
        "profile": draw(st.sampled_from([gpu or "1g.5gb", "3g.20gb"])), "start": draw(st.integers(0, 7))}
    return json.dumps({**DISPATCH, "batch_id": f"odd-{draw(st.integers(0, 10**6))}",
                       "action": {**DISPATCH["action"], "name": draw(st.sampled_from(["echo", "echo", "nosuch"])),
                                  "timeout_ms": draw(st.sampled_from([1, 20000, 20000]))},
                       "config": {"batch": len(requests), "vcpus": draw(st.integers(1, 3)), "gpu": gpu},
                       "slice": slice_,
                       "destroy": draw(st.lists(st.fixed_dictionaries(
                           {"profile": st.sampled_from(["1g.5gb", "3g.20gb", "7g.40gb"]),
                            "start": st.integers(0, 7)}), max_size=2)),
                       "requests": requests}).encode()


@settings(FUZZ, max_examples=250)
@given(st.one_of(mutated(DISPATCH), odd_dispatches()))
def test_mutated_dispatches_are_refused_by_name_or_answered_in_full(batches, raw):
    try:
        msg = protocol.decode(raw)
    except protocol.ProtocolError as exc:
        event("refused by the reader")
        assert str(exc).strip()
        batch_id, ids, _ = salvage(raw)
        if batch_id is not None:               # the agent answers each id it could read with status 3
            protocol.encode(protocol.BatchResult(batch_id, "node-f", ()))
        assert all(isinstance(i, str) for i in ids)
        return
    if not isinstance(msg, protocol.DispatchMessage):
        return                                  # a result or heartbeat: the agent skips it by name
    result, _ = batches.run(msg)
    event(f"run: status {sorted({r.status_code for r in result.results})}")
    assert result.batch_id == msg.batch_id
    assert sorted(r.activation_id for r in result.results) == sorted(r.activation_id for r in msg.requests)
    assert all(r.status_code in (0, 1, 2, 3) for r in result.results)
    protocol.decode(protocol.encode(result))   # it can be published and read back
    good, _ = batches.run(GOOD)                  # and the agent still runs a good batch behind it
    assert [(r.status_code, r.result) for r in good.results] == [(0, {"echo": {"ok": 1}})]


def test_a_result_nested_too_deeply_is_the_actions_error_by_name(batches):
    deep = protocol.DispatchMessage("deep", "node-f", "guest/deep", "guest/deep",
                                    protocol.ActionRef("guest", "deep", None), Config(1, 1), None, (),
                                    (protocol.RunRequest("d" * 32, "t4", {}, 1718003081790, "guest"),))
    (result,) = batches.run(deep)[0].results
    assert result.status_code == 2 and "nests deeper than 200 levels" in result.result["error"]
    protocol.decode(protocol.encode(protocol.BatchResult("deep", "node-f", (result,))))
