"""End to end: a function deployed with no profile table on the embedded cluster (real broker, Redis,
``esg scheduler`` and ``esg agent`` processes, real action workers) runs from its first call, and after
enough calls its exported table holds every configuration of the grid, at latencies close to what an
offline ``esg profile`` of the same action measures on this machine."""

from __future__ import annotations

import os
from contextlib import ExitStack

import pytest
import redis

from esg.model import Config
from esg.online import MIN_SAMPLES, grid
from esg.policies.base import FunctionSpec
from esg_cli.main import main as esg_main
from esg_cli.up import ACTIVATIONS_DB, ROOT, _spawn, _stop_all
from esg_files import load_profile

pytestmark = pytest.mark.integration

#: Sleeps, so its run time is the same on a busy machine: ``SLEEP_MS`` per request of a batch.
SLEEP_MS = 30
ACTION = f'''
import time


def main(args):
    time.sleep({SLEEP_MS / 1000})
    return {{"i": args.get("i", 0)}}
'''
GRID = ["--batch", "1,2,4,8", "--vcpus", "1,2,4", "--gpu", "none"]
SPEC = FunctionSpec(max_batch=8, gpu=False)


def _explain(procs: dict, logs, rclient, ids: list[str]) -> str:
    """Whether each process still runs, the end of its log, what ``esg status`` shows and which of the
    round's activations the scheduler answered: what a stuck activation needs to be read."""
    import time

    from agent_channel.keys import Keys
    from controller_plugin.decisions import decisions_key, read_decisions
    from esg_cli.status import gather, render
    keys = Keys("", "0")
    decided = read_decisions(rclient, decisions_key(keys.scope))
    answered = {d["id"]: d["ok"] for d in decided if d.get("type") == "request"}
    dispatched = {j for d in decided if d.get("type") == "batch" for j in d.get("jobs", [])}
    parts = [f"--- esg status:\n{render(gather(rclient, keys, time.time() * 1000))}",
             "--- the round's activations, as the scheduler's decisions name them:\n" + "\n".join(
                 f"{a}: ledger={rclient.hget(f'esg:{keys.scope}:act:{a}', 'state')} answered={answered.get(a)} "
                 f"in a batch={a in dispatched}" for a in ids)]
    for name, proc in procs.items():
        lines = (logs / f"{name}.log").read_text(errors="replace").splitlines()
        parts.append(f"--- {name} (exit code {proc.poll()}), last lines of its log:\n" + "\n".join(lines[-25:]))
    return "\n".join(parts)


def _batches(rclient) -> dict[str, list[dict]]:
    """Per configuration label, the batches the scheduler's decisions log holds (when each was sent and
    answered, its measured run time, whether it paid a cold start)."""
    from controller_plugin.decisions import decisions_key, read_decisions
    out: dict[str, list[dict]] = {}
    for d in read_decisions(rclient, decisions_key("0")):
        if d.get("type") == "batch":
            label = Config(d["batch"], d["vcpus"], d["gpu"]).label()
            out.setdefault(label, []).append({k: d.get(k) for k in ("batch_id", "jobs", "sent_ms", "done_ms", "run_ms",
                                                                     "cold", "overlapped_start", "warm")})
    return out


def test_new_function_is_learned_online_like_an_offline_profile(tmp_path):
    from controller_plugin.online import OnlineStore
    from esg_cli.controller_driver import ControllerDriver, DriverError
    from esg_cli.openwhisk_standin import GUEST_KEY, OpenWhiskStandIn
    from esg_cli.servers import start_broker, start_couchdb, start_redis

    source = tmp_path / "sleepy.py"
    source.write_text(ACTION)
    logs = tmp_path / "logs"
    logs.mkdir()
    want = set(grid(SPEC, "A100-40GB"))
    with ExitStack() as stack:
        broker = stack.enter_context(start_broker())
        rserver = stack.enter_context(start_redis())
        rclient = redis.Redis.from_url(rserver.url)
        stack.callback(rclient.close)
        couch = stack.enter_context(start_couchdb())
        records = f"{couch.url}/{ACTIVATIONS_DB}"
        standin = stack.enter_context(OpenWhiskStandIn(activation_store=records))
        standin.put_action("guest/sleepy", {
            "exec": {"kind": "python:3", "code": ACTION}, "limits": {"timeout": 5000},
            "annotations": [{"key": "esg-slo-ms", "value": 20000}, {"key": "esg-gpu", "value": False},
                            {"key": "esg-max-batch", "value": 8}]})
        env = dict(os.environ, ESG_KAFKA=broker.address, ESG_REDIS=rserver.url, ESG_OPENWHISK_API=standin.url,
                   ESG_OPENWHISK_AUTH=GUEST_KEY, ESG_ACTIVATION_STORE=records, PYTHONPATH=str(ROOT))
        procs = {}
        stack.callback(_stop_all, procs)
        procs["scheduler"] = _spawn(["scheduler", "--explore-fraction", "1"], env, logs / "scheduler.log")
        procs["node0"] = _spawn(["agent", "--name", "node0", "--fake-gpu", "A100-40GB", "--vcpus", "8", "--journal", str(logs / "j")],
                                env,
                                logs / "node0.log")
        driver = stack.enter_context(ControllerDriver(broker.address, catalog=standin.store.lookup,
                                                      activation_store=records))
        driver.wait_healthy(1, timeout=90)
        first = driver.invoke("guest/sleepy", {"i": -1}, timeout=60)
        assert first["response"] == {"statusCode": 0, "result": {"i": -1}, "size": 9}, first["response"]
        store = OnlineStore(rclient)
        calls = 1
        for _ in range(80):
            ids = [driver.publish("guest/sleepy", {"i": i}) for i in range(8)]
            driver.flush()
            try:
                recs = [driver.wait(a, timeout=60) for a in ids]
            except DriverError as exc:
                raise AssertionError(f"{exc}\n{_explain(procs, logs, rclient, ids)}") from None
            calls += len(recs)
            assert all(r["response"]["statusCode"] == 0 for r in recs), [r["response"] for r in recs]
            stats = store.stats("guest/sleepy")
            if all(c in stats and stats[c].samples >= MIN_SAMPLES for c in want):
                break
        out = tmp_path / "learned"
        assert esg_main(["profile", "export", "--redis", rserver.url, "--out", str(out)]) == 0
        batches = _batches(rclient)
    learned = load_profile(out / "guest" / "sleepy.json")    # learned for the namespace that ran it
    assert set(learned.configs) >= want, f"after {calls} calls: {sorted(c.label() for c in want - set(learned.configs))}"
    offline_dir = tmp_path / "offline"
    assert esg_main(["profile", str(source), *GRID, "--runs", "3", "--no-progress", "--out", str(offline_dir)]) == 0
    offline = load_profile(offline_dir / "sleepy.json")
    # the profiler skips vCPU counts this host lacks (the agent advertises 8): compare what both measured
    assert set(offline.configs) <= set(learned.configs) and len(offline.configs) >= 4
    for c in offline.configs:
        a, b = learned.latency(c), offline.latency(c)
        assert abs(a - b) <= 0.25 * b + 5.0, (f"{c.label()}: {a:.1f} ms learned, {b:.1f} ms offline; its batches:\n"
                                              + "\n".join(str(x) for x in batches.get(c.label(), [])))
    assert learned.latency(Config(8, 1, None)) > 4 * SLEEP_MS
