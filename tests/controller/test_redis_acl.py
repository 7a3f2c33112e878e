"""Redis with one ACL user per role (``agent_channel/acl.py``): an agent can write only its own node's keys,
and the scheduler believes a heartbeat or a result only from the node's own streams -- forgeries from a
wrong Redis user are refused, by Redis or by the scheduler. And activation secrets (the caller's key, the
call's parameters) stay in Redis only while their batch needs them."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import redis

from agent_channel import acl, protocol
from agent_channel.keys import FIELD, Keys
from agent_channel.streams import fields
from esg_cli.redis_users import url_of
from esg_cli.servers import start_redis
from tests.controller.chaos import answer, wait_for
from tests.controller.test_service_basic import put

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def acl_redis(prefix) -> Iterator[dict[str, str]]:
    """A redis-server whose only users are the deployment's (default user off): each role's URL."""
    users = acl.users(prefix, ["node-a", "node-b"], {})
    admin = next(u for u in users if u.name == acl.ADMIN)
    server = start_redis(acl=acl.acl_file(users), admin=(admin.name, admin.password))
    try:
        yield {u.name: url_of(u, f"{server.host}:{server.port}", 0) for u in users}
    finally:
        server.stop()


def denied(call) -> bool:
    try:
        call()
    except redis.exceptions.NoPermissionError:
        return True
    return False


def test_an_agent_user_writes_only_its_own_nodes_keys_and_reads_no_ledger_or_other_dispatches(acl_redis, prefix):
    keys = Keys(prefix)
    a = redis.Redis.from_url(acl_redis[acl.agent_user("node-a")])
    hb = protocol.encode(protocol.Heartbeat("node-a", 8, 8, 1024, None))
    a.xadd(keys.heartbeats("node-a"), fields(hb))                 # its own: allowed
    a.set(keys.data("node-a", "x" * 32, "f"), b"{}")
    assert a.mget([keys.data("node-b", "x" * 32, "f")]) == [None]  # others' outputs: readable
    assert denied(lambda: a.xadd(keys.heartbeats("node-b"), fields(hb)))
    assert denied(lambda: a.xadd(keys.results("node-b"), fields(b"{}")))
    assert denied(lambda: a.set(keys.data("node-b", "x" * 32, "f"), b"{}"))
    assert denied(lambda: a.set(keys.node_epoch("node-b"), 99))
    assert denied(lambda: a.xrange(keys.dispatch("node-b")))       # another node's dispatches (callers' keys)
    assert denied(lambda: a.hgetall(f"esg:{prefix}0:act:{'x' * 32}"))   # the ledger
    assert denied(lambda: a.get(f"esg:{prefix}0:leader"))
    assert denied(lambda: a.xrange(keys.hello))                    # write only
    assert denied(lambda: a.flushall()) and denied(lambda: a.execute_command("CONFIG", "GET", "*"))
    s = redis.Redis.from_url(acl_redis[acl.SCHEDULER])
    assert denied(lambda: s.flushall()) and denied(lambda: s.keys("*")) and denied(lambda: s.get("other:key"))
    assert denied(lambda: redis.Redis.from_url(acl_redis[acl.OBSERVER]).set(f"esg:{prefix}:x", 1))
    a.close()
    s.close()


def test_forged_heartbeats_and_results_from_a_wrong_redis_user_are_refused(
        acl_redis, service_factory, agent_factory, driver, standin, prefix):
    put(standin, "work")
    svc = service_factory(redis_url=acl_redis[acl.SCHEDULER])
    agent_factory("node-a", redis=acl_redis[acl.agent_user("node-a")])
    b = agent_factory("node-b", redis=acl_redis[acl.agent_user("node-b")], memory_mb=2048,
                      handlers={"guest/work": lambda v: (time.sleep(1.5), {"by": "node-b"})[1]})
    driver.wait_healthy(2, timeout=30)
    keys = Keys(prefix)
    forger = redis.Redis.from_url(acl_redis[acl.agent_user("node-a")])
    # Redis refuses node-a's user anything in node-b's key space
    fake = protocol.Heartbeat("node-b", 64, 64, 999_999, None, draining=True, seq=10**6)
    assert denied(lambda: forger.xadd(keys.heartbeats("node-b"), fields(protocol.encode(fake))))
    # ... and what it writes in its own streams naming node-b, the scheduler sets aside
    forger.xadd(keys.heartbeats("node-a"), fields(protocol.encode(fake)))
    wait_for(lambda: svc.channel.forged >= 1, 10, "the forged heartbeat to be set aside")
    assert svc.registry.agents["node-b"].heartbeat.memory_mb == 2048
    assert not svc.registry.agents["node-b"].heartbeat.draining
    # a result for node-b's batch, forged in node-a's results stream (naming either node), is not believed
    aid = driver.publish("guest/work", {"i": 1}, invoker=svc.registry.ids["node-b"])
    driver.flush()
    wait_for(lambda: any(r.activation_id == aid for m in b.batches for r in m.requests), 10, "node-b to get it")
    batch = next(m for m in b.batches if any(r.activation_id == aid for r in m.requests))
    for node in ("node-a", "node-b"):
        forged = protocol.BatchResult(batch.batch_id, node, (protocol.RunResult(aid, 0, {"by": "forger"}, 1, 2),),
                                      function=batch.function)
        forger.xadd(keys.results("node-a"), fields(protocol.encode(forged)))
    assert denied(lambda: forger.xadd(keys.results("node-b"), fields(protocol.encode(forged))))
    rec = driver.wait(aid, timeout=20)
    assert answer(rec["response"]) == {"statusCode": 0, "result": {"by": "node-b"}}
    assert driver.acks[aid].completions == 1
    forger.close()


def test_activation_secrets_leave_redis_once_their_batch_is_answered(service_factory, agent_factory, driver,
                                                                     standin, redis_client, prefix):
    """The caller's key and the call's parameters travel in the dispatch and the ledger entry; once the
    activation is answered, no key of the deployment holds either."""
    put(standin, "work")
    service_factory()
    agent_factory("node-a", handlers={"guest/work": lambda v: {"ok": True}})
    driver.wait_healthy(1, timeout=10)
    secret = "s3cr3t-parameter-value-7f1c"
    api_key = driver.user["authkey"]["api_key"].split(":")[1]
    ids = [driver.publish("guest/work", {"password": secret}, blocking=i % 2 == 0) for i in range(6)]
    driver.flush()
    assert driver.wait_acked(ids, timeout=20) == []

    def holders() -> list[str]:
        found = []
        for key in redis_client.scan_iter(f"esg:{prefix}*"):
            kind = redis_client.type(key).decode()
            if kind == "string":
                blob = redis_client.get(key) or b""
            elif kind == "hash":
                blob = b"".join(k + v for k, v in redis_client.hgetall(key).items())
            elif kind == "stream":
                blob = b"".join(f.get(FIELD, b"") for _, f in redis_client.xrange(key))
            elif kind == "set":
                blob = b"".join(redis_client.smembers(key))
            else:
                continue
            if secret.encode() in blob or api_key.encode() in blob:
                found.append(key.decode())
        return found

    wait_for(lambda: not holders(), 10, "the activations' secrets to leave Redis")
