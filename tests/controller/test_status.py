"""``esg status``: the nodes as their heartbeats report them, the last batch on each and the queues."""

from __future__ import annotations

import json
import time
import uuid

import redis

from agent_channel import protocol
from agent_channel.keys import FIELD, Keys
from agent_channel.protocol import Heartbeat, IdleWorkers
from controller_plugin.decisions import DecisionLog, decisions_key, status_key
from esg.cluster import Fit, Slice, SliceRef
from esg.events import Dispatch
from esg.model import Config, Job
from esg_cli.main import main


def test_status_shows_layouts_warm_workers_last_batch_and_queues(redis_url, capsys):
    prefix = f"t{uuid.uuid4().hex[:8]}_"
    keys = Keys(prefix)
    r = redis.Redis.from_url(redis_url)
    three = SliceRef("3g.20gb", 4)
    now = int(time.time() * 1000)
    hb = Heartbeat("n0", 16, 14, 4096, "A100-40GB", (Slice(three, False, "MIG-1"),
                                                     Slice(SliceRef("1g.5gb", 0), True, "MIG-2")),
                   (), False, 3, now, (IdleWorkers("guest/f", 2, three, 1),), ("b9",), ())
    r.xadd(keys.heartbeats("n0"), {FIELD: protocol.encode(hb)})
    r.xadd(keys.hello, {FIELD: b"n0"})
    log = DecisionLog(decisions_key(keys.scope))
    d = Dispatch("b1", "guest/app", "guest/f", (Job("j1", "a1", "guest/app", "guest/f", 0.0, 100.0, 0.0),), Config(1, 2, "3g.20gb"),
                 Fit("n0", three, False, (), ("guest/f", three)))
    log.sent([d], now - 20)
    log.done(d, protocol.BatchResult("b1", "n0", (), None, "guest/f", d.config, 6.0, cold=True), "A100-40GB", now)
    log.status(status_key(keys.scope), {("guest/app", "guest/f"): 3},
               {("guest/app", "guest/f"): "waiting for a warm worker of guest/f"}, now)
    pipe = r.pipeline()
    log.stage(pipe)
    pipe.execute()
    try:
        assert main(["status", "--redis", redis_url, "--topic-prefix", prefix, "--json"]) == 0
        state = json.loads(capsys.readouterr().out)
        n0 = state["nodes"]["n0"]
        assert n0["slices"] == [{"slice": "3g.20gb@4", "busy": False}, {"slice": "1g.5gb@0", "busy": True}]
        assert n0["idle_workers"] == [{"function": "guest/f", "vcpus": 2, "count": 1, "slice": "3g.20gb@4"}]
        assert n0["running"] == 1 and n0["vcpus_free"] == 14
        assert n0["last_batch"]["slice"] == "3g.20gb@4" and "started cold" in n0["last_batch"]["why"]
        assert state["queues"] == {"guest/app/guest/f": 3}
        assert main(["status", "--redis", redis_url, "--topic-prefix", prefix]) == 0
        text = capsys.readouterr().out
        assert "MIG: 3g.20gb@4 idle, 1g.5gb@0 busy" in text and "waiting for a warm worker" in text
    finally:
        r.delete(keys.heartbeats("n0"), keys.hello, decisions_key(keys.scope), status_key(keys.scope))
        r.close()


def test_the_decision_log_adds_each_staged_entry_as_its_own_stream_entry_in_order(redis_url, monkeypatch):
    """A turn's decision entries go in one script call (chunked); each is one stream entry, in order,
    read back as it was written."""
    from controller_plugin import decisions

    monkeypatch.setattr(decisions, "ADD_PER_CALL", 2)
    r = redis.Redis.from_url(redis_url)
    log = DecisionLog("esg:test-decisions-order:decisions")
    try:
        for i in range(5):
            log._staged.append(json.dumps({"type": "request", "id": f"a{i}"}).encode())
        pipe = r.pipeline()
        assert log.stage(pipe) == 3
        pipe.execute()
        log.written()
        got = r.xrange(log.key)
        assert [json.loads(f[b"m"])["id"] for _, f in got] == [f"a{i}" for i in range(5)]
        assert all(list(f) == [b"m"] for _, f in got)
        pipe = r.pipeline()
        assert log.stage(pipe) == 0 and pipe.command_stack == []
    finally:
        r.delete(log.key)
        r.close()
