"""Pre-warming on the live path: a scheduler step's pre-warm reaches the node's real ``esg agent``, which
starts the worker (visible in its heartbeat as an idle warm worker) and the next batch of that function
runs there warm.

The real broker, Redis and REST stand-in; the scheduler service in this process, the real agent as a
subprocess with real action workers. The service's policy is given the two pre-warming hooks a policy
that pre-warms along the DAG has (``Policy.prewarm``, ``Policy.keep_alive_ms``): when an app's entry
function is dispatched, its successor is pre-warmed beside it, and every batch's worker is kept warm
for ``KEEP_ALIVE_MS``; the core places the pre-warm (``esg.prewarm.place_warmup``) and the service
carries it out.
"""

from __future__ import annotations

import time

import pytest

from controller_plugin.decisions import read_decisions
from esg import policies
from esg.model import Config
from esg.policies.esg_policy import esg_policy
from esg.policies.rules.wait_for_busy import WaitForBusy
from esg.prewarm import WarmUp
from esg_cli.openwhisk_standin import GUEST_KEY
from tests.agent.agent_harness import AgentProcess, SchedulerSide

pytestmark = pytest.mark.timeout(120)

#: How long the first function runs: longer than the successor's cold start on a loaded machine, and
#: than the agent's idle TTL below, so only the pre-warm's own keep-alive keeps the worker until used.
SLOW_S = 3.0
SLOW = f"import time\n\ndef main(a):\n    time.sleep({SLOW_S})\n    return {{'v': a.get('x', 0)}}\n"
FAST = "def main(a):\n    return {'out': a['v'] + 1}\n"
DAG = {"functions": ["slow", "fast"], "edges": [["slow", "fast"]]}
KEEP_ALIVE_MS = 60_000


def deploy(standin) -> None:
    for name, code, table in (("slow", SLOW, "pre"), ("fast", FAST, "cls")):
        standin.put_action(f"guest/{name}", {
            "exec": {"kind": "python:3", "code": code},
            "annotations": [{"key": "esg-profile", "value": table}, {"key": "esg-gpu", "value": False}]})
    standin.put_action("guest/chain", {"exec": {"kind": "python:3", "code": "def main(a): return a"},
                                       "annotations": [{"key": "esg-slo-ms", "value": 20000},
                                                       {"key": "esg-dag", "value": DAG}]})


class PrewarmSuccessors:
    """The hooks of a policy that pre-warms along the DAG, on the service's own policy (ESG's proposer and
    its wait for a busy worker, with a plugin in place of its pre-warming rules): while ``armed``,
    each dispatch of an app's entry function asks for its successors' workers beside it (CPU, one vCPU),
    and every batch's worker is kept warm ``KEEP_ALIVE_MS``."""

    NAME = "esg-prewarm-successors"

    def __init__(self, monkeypatch) -> None:
        self.core = None
        self.armed = False
        self.placed = []
        monkeypatch.setitem(policies._REGISTRY, self.NAME, self.policy)

    def policy(self, ctx):
        hook = self

        class Hooked:  # a plugin in place of ESG's rules
            def prewarm(self, now_ms, snapshot, dispatched, asked):
                for want in hook.prewarm(now_ms, snapshot, dispatched):
                    asked.add(want)

            def wake_ms(self):
                return None

            def on_prewarm(self, p, now_ms):
                hook.placed.append(p)

            def keep_alive_ms(self, app, function, now_ms):
                return KEEP_ALIVE_MS if hook.armed else None

        return esg_policy(ctx, [WaitForBusy, lambda parts: Hooked()])

    def prewarm(self, now_ms, snapshot, dispatched):
        if not self.armed:
            return []
        out = []
        for d in dispatched:
            app = self.core.apps[d.app]
            if not app.predecessors(d.function):
                out += [WarmUp(d.app, succ, Config(1, 1, None), KEEP_ALIVE_MS, (d.node,), True,
                               now_ms + SLOW_S * 1000) for succ in app.successors(d.function)]
        return out


def batches_of(redis_client, svc, function_suffix: str, since_ms: int) -> list[dict]:
    return [d for d in read_decisions(redis_client, svc.decisions.key, since_ms)
            if d.get("type") == "batch" and d["function"].endswith(function_suffix)]


def test_a_step_that_prewarms_starts_the_worker_and_the_next_batch_runs_warm(
        service_factory, driver, standin, redis_url, redis_client, prefix, tmp_path, monkeypatch):
    deploy(standin)
    hook = PrewarmSuccessors(monkeypatch)
    svc = service_factory(policy=hook.NAME)
    hook.core = svc.workflows.scheduler
    agent = AgentProcess(tmp_path, redis_url, standin.url, "node-a", prefix, "--openwhisk-auth", GUEST_KEY,
                         "--fake-gpu", "A100-40GB", "--vcpus", "4", "--memory-mb", "4096", "--idle-ttl-s", "1")
    watch = SchedulerSide(redis_url, prefix)
    try:
        driver.wait_healthy(1, timeout=60)

        # without a pre-warm: the successor's batch starts its worker cold
        t0 = int(time.time() * 1000)
        rec = driver.invoke("guest/chain", {"x": 1}, timeout=60)
        assert rec["response"]["result"] == {"out": 2}, rec
        assert [b["cold"] for b in batches_of(redis_client, svc, "fast", t0)] == [True]
        # the agent's own 1 s TTL retires both workers (a heartbeat written after the answer says so)
        watch.poll()
        watch.heartbeat("node-a", lambda h: not h.idle and not h.running, timeout=30, after=len(watch.heartbeats))

        # with one: the successor's worker is started while the first function runs ...
        hook.armed = True
        t1 = int(time.time() * 1000)
        aid = driver.publish("guest/chain", {"x": 41})
        driver.flush()
        hb = watch.heartbeat("node-a", lambda h: any(w.function.endswith("fast") for w in h.idle),
                             timeout=SLOW_S + 20, after=len(watch.heartbeats))
        (pw,) = hook.placed
        assert pw.prewarm_id in hb.done and pw.function.endswith("fast")
        assert pw.prewarm_id.startswith(svc.s.incarnation + "-")      # unique across restarts
        assert [(w.vcpus, w.slice, w.count) for w in hb.idle if w.function == pw.function] == [(1, None, 1)]
        assert svc.stats["prewarms"] == 1
        assert svc.metrics.registry.get_sample_value("esg_prewarms_total") == 1.0
        # ... and its batch, once the first function is done, runs on it warm
        rec = driver.wait(aid, timeout=60)
        assert rec["response"]["result"] == {"out": 42}, rec
        (fast,) = batches_of(redis_client, svc, "fast", t1)
        assert fast["cold"] is False and fast["warm"] is True, fast     # the agent ran it warm, as planned
        assert fast["keep_alive_ms"] == KEEP_ALIVE_MS
        # the decision log has the pre-warm, for esg replay's accounting: ready when the heartbeat said done
        (logged,) = [e for e in read_decisions(redis_client, svc.decisions.key, t1) if e["type"] == "prewarm"]
        assert logged["prewarm_id"] == pw.prewarm_id and logged["ready"] is True and logged["slice"] is None
        assert logged["outcome"] == "started" and logged["reconfigured"] == 0, logged     # as the agent said
        assert logged["sent_ms"] <= logged["done_ms"] <= fast["sent_ms"]
        assert [b["cold"] for b in batches_of(redis_client, svc, "slow", t1)] == [True]
        # the policy's keep-alive came with each dispatch: both workers outlive the agent's own 1 s TTL
        time.sleep(2.5)
        watch.poll()
        hb = [h for h in watch.heartbeats if h.node == "node-a"][-1]
        assert sorted(w.function for w in hb.idle) == ["guest/fast", "guest/slow"], hb
    finally:
        watch.close()
        agent.stop()
    log = agent.output()
    assert "pre-warm" in log and "worker ready" in log, log[-3000:]


def test_esg_prewarms_the_successor_live_and_its_batch_runs_warm(
        service_factory, driver, standin, redis_url, redis_client, prefix, tmp_path):
    """The same app under the shipped ESG policy, no hook added: its JIT rule pre-warms ``fast`` beside
    ``slow``'s batch, and ``fast`` runs on that worker."""
    deploy(standin)
    svc = service_factory()
    agent = AgentProcess(tmp_path, redis_url, standin.url, "node-a", prefix, "--openwhisk-auth", GUEST_KEY,
                         "--fake-gpu", "A100-40GB", "--vcpus", "4", "--memory-mb", "4096")
    try:
        driver.wait_healthy(1, timeout=60)
        t0 = int(time.time() * 1000)
        rec = driver.invoke("guest/chain", {"x": 1}, timeout=60)
        assert rec["response"]["result"] == {"out": 2}, rec
        log = read_decisions(redis_client, svc.decisions.key, t0)
        prewarms = [e for e in log if e["type"] == "prewarm" and e["function"].endswith("fast")]
        assert prewarms and prewarms[0]["ready"] is True, log
        (fast,) = batches_of(redis_client, svc, "fast", t0)
        assert fast["cold"] is False and fast["warm"] is True, fast
        assert svc.stats["prewarms"] >= 1
    finally:
        agent.stop()
