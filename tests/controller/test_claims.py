"""At-most-once claims against a real Redis: whichever of the agent's claim and the scheduler's revocation
comes first wins, a revoked batch cannot start, an older leader's batch cannot start once its node was
told of a newer epoch, and a stale leader can revoke nothing (``agent_channel/claims.py``)."""

from __future__ import annotations

import pytest

from agent_channel import claims, protocol
from agent_channel.keys import AGENT_GROUP, Keys
from agent_channel.streams import ensure_group, fields
from controller_plugin.channel import SchedulerChannel
from controller_plugin.lease import Lease, is_fenced
from esg.model import Config


@pytest.fixture
def world(redis_client, prefix):
    keys = Keys(prefix)
    lease = Lease(redis_client, keys.scope, "leader")
    assert lease.try_acquire()
    ensure_group(redis_client, keys.dispatch("n0"), AGENT_GROUP)
    return keys, lease, SchedulerChannel(redis_client, keys, fence=lease)


def dispatched(redis_client, keys: Keys, batch_id: str) -> str:
    """A dispatch of ``batch_id`` in n0's stream, read by its agent (pending): its entry id."""
    msg = protocol.DispatchMessage(batch_id, "n0", "app", "f", protocol.ActionRef("guest", "f"), Config(1, 1, None),
                                   None, (), (protocol.RunRequest("a" * 32, "tx", {}, 1, "guest"),), keys.results("n0"))
    redis_client.xadd(keys.dispatch("n0"), fields(protocol.encode(msg)))
    (_, got), = redis_client.xreadgroup(AGENT_GROUP, "n0", {keys.dispatch("n0"): ">"}, count=1)
    return got[0][0].decode()


def test_a_claim_first_makes_the_revocation_report_it_running(world, redis_client):
    keys, _, channel = world
    eid = dispatched(redis_client, keys, "b1")
    assert claims.claim(redis_client, keys, "n0", [("b1", 0, 60)]) == [claims.CLAIMED]
    assert channel.revoke("n0", [("b1", eid, 60)]) == [claims.RUNNING]
    assert redis_client.xlen(keys.dispatch("n0")) == 1            # left alone: it runs
    assert claims.claim(redis_client, keys, "n0", [("b1", 0, 60)]) == [claims.RUNNING]   # never started twice


def test_a_revocation_first_means_the_batch_can_never_start(world, redis_client):
    keys, _, channel = world
    eid = dispatched(redis_client, keys, "b2")
    assert channel.revoke("n0", [("b2", eid, 60)]) == [claims.REVOKED]
    assert redis_client.xlen(keys.dispatch("n0")) == 0            # taken out of the stream and its pending list
    assert redis_client.xpending(keys.dispatch("n0"), AGENT_GROUP)["pending"] == 0
    assert claims.claim(redis_client, keys, "n0", [("b2", 0, 60)]) == [claims.REVOKED]


def test_an_answered_batch_reports_done_and_giving_it_up_retires_a_running_one(world, redis_client):
    keys, _, channel = world
    redis_client.set(keys.claim("n0", "b3"), claims.DONE)
    assert channel.revoke("n0", [("b3", "", 60)]) == [claims.DONE]
    eid = dispatched(redis_client, keys, "b4")
    claims.claim(redis_client, keys, "n0", [("b4", 0, 60)])
    assert channel.revoke("n0", [("b4", eid, 60)], give_up=True) == [claims.RUNNING]
    assert redis_client.xlen(keys.dispatch("n0")) == 0            # its activations are answered without it


def test_a_batch_of_an_older_epoch_cannot_start_once_the_node_was_told_of_a_newer(world, redis_client):
    keys, lease, channel = world
    channel.tell_epoch(["n0"], lease.epoch + 1)
    assert claims.claim(redis_client, keys, "n0", [("old", lease.epoch, 60), ("new", lease.epoch + 1, 60)]) == [
        claims.STALE, claims.CLAIMED]
    channel.tell_epoch(["n0"], lease.epoch)                       # never lowered
    assert int(redis_client.get(keys.node_epoch("n0"))) == lease.epoch + 1


def test_a_stale_leader_can_neither_revoke_nor_tell_an_epoch(world, redis_client, prefix):
    keys, lease, channel = world
    eid = dispatched(redis_client, keys, "b5")
    redis_client.delete(lease.key)
    assert Lease(redis_client, keys.scope, "other").try_acquire()
    for call in (lambda: channel.revoke("n0", [("b5", eid, 60)]), lambda: channel.tell_epoch(["n0"], 99)):
        with pytest.raises(Exception) as exc:
            call()
        assert is_fenced(exc.value)
    assert claims.claim(redis_client, keys, "n0", [("b5", 0, 60)]) == [claims.CLAIMED]


def test_the_epoch_and_the_stream_recoveries_travel_in_the_messages():
    msg = protocol.DispatchMessage("b", "n0", "app", "f", protocol.ActionRef("guest", "f"), Config(1, 1, None), None,
                                   (), (protocol.RunRequest("a" * 32, "tx", {}, 1, "guest"),), "r", epoch=7)
    assert protocol.decode(protocol.encode(msg)).epoch == 7
    hb = protocol.Heartbeat("n0", 4, 4, 1024, None, stream_recoveries=2)
    assert protocol.decode(protocol.encode(hb)).stream_recoveries == 2
    raw = protocol.encode(msg).replace(b'"epoch":7', b'"epoch":-1')
    with pytest.raises(protocol.ProtocolError, match="epoch"):
        protocol.decode(raw)
