"""Scheduler-service benchmark: activations per second and ack latency, against a plain forwarder.

    PYTHONPATH=. python benchmarks/bench_scheduler.py [--n 3000] [--rate 300] [--batch 16]

One Tansu broker and one redis-server are started; the controller driver publishes blocking
activations of no-op actions. Three systems answer them in turn, each in its own process:

* **forwarder** -- consumes ``invoker0`` and produces a Combined ack per message on ``completed0``:
  the floor any invoker stand-in pays for the Kafka round trip;
* **scheduler, plain action** -- ``esg scheduler`` with a fast in-process echo agent; the action has no
  annotations (batch 1: one dispatch and one result message per activation);
* **scheduler, ESG function** -- the same with an ``esg-slo-ms``/``esg-max-batch`` no-op function, so
  the scheduler batches.

Throughput: a burst of ``--n`` activations, first publish to last ack. Latency: p50/p99 from publish
to ack at a steady ``--rate``. Figures are ratios from one run on one machine, never thresholds.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kafka import KafkaConsumer, KafkaProducer, TopicPartition  # noqa: E402

from controller_plugin import wire  # noqa: E402
from controller_plugin.bus import FETCH_WAIT_MS  # noqa: E402  (the forwarder and the agent fetch alike)
from esg import protocol  # noqa: E402
from esg_cli.controller_driver import ControllerDriver  # noqa: E402
from esg_cli.openwhisk_standin import GUEST_KEY, OpenWhiskStandIn  # noqa: E402
from esg_cli.servers import start_broker, start_redis  # noqa: E402


# -- the plain forwarder (its own process) -----------------------------------------------------------
def forwarder(kafka: str, prefix: str) -> None:
    from controller_plugin.bus import Bus

    Bus(kafka).ensure_topics([(wire.invoker_topic(0, prefix), "invoker")])
    producer = KafkaProducer(bootstrap_servers=kafka, acks=1, linger_ms=1)
    consumer = KafkaConsumer(bootstrap_servers=kafka, group_id="bench-forwarder", enable_auto_commit=False,
                             auto_offset_reset="latest", fetch_max_wait_ms=FETCH_WAIT_MS, max_poll_records=500)
    tp = TopicPartition(wire.invoker_topic(0, prefix), 0)
    consumer.assign([tp])
    consumer.seek_to_end(tp)
    consumer.position(tp)
    health = wire.health_topic(prefix)
    instance = wire.InvokerInstance(0, 4096)
    last_ping = 0.0
    print("ready", flush=True)
    while True:
        if time.monotonic() - last_ping > 1:
            producer.send(health, wire.encode(wire.ping_message(instance)))
            last_ping = time.monotonic()
        for recs in consumer.poll(timeout_ms=FETCH_WAIT_MS).values():
            for rec in recs:
                msg = wire.parse_activation(rec.value)
                now = int(time.time() * 1000)
                topic = wire.completed_topic(msg.root_controller, prefix)
                if msg.is_health_test:
                    producer.send(topic, wire.encode_ack(wire.completion(msg, instance)))
                    continue
                record = wire.whisk_activation(msg, start_ms=now, end_ms=now, status_code=0,
                                               result=msg.content, kind="python:3",
                                               limits={"timeout": 60000, "memory": 256, "logs": 10,
                                                       "concurrency": 1}, wait_time_ms=0)
                producer.send(topic, wire.encode_ack(wire.combined(msg, record, instance)))
        producer.flush()


# -- a fast echo agent (its own process) ---------------------------------------------------------------
def echo_agent(kafka: str, prefix: str, node: str = "bench-node") -> None:
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic

    topic = protocol.dispatch_topic(node, prefix)
    admin = KafkaAdminClient(bootstrap_servers=kafka)
    if topic not in admin.list_topics():
        admin.create_topics([NewTopic(topic, 1, 1)])
    admin.close()
    producer = KafkaProducer(bootstrap_servers=kafka, acks=1, linger_ms=1)
    consumer = KafkaConsumer(bootstrap_servers=kafka, group_id=None, enable_auto_commit=False,
                             fetch_max_wait_ms=FETCH_WAIT_MS, max_poll_records=1000)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_end(tp)
    consumer.position(tp)
    results = prefix + protocol.RESULTS_TOPIC
    beats = prefix + protocol.HEARTBEAT_TOPIC
    seq, last = 0, 0.0
    print("ready", flush=True)
    while True:
        if time.monotonic() - last > 0.5:
            seq += 1
            producer.send(beats, protocol.encode(protocol.Heartbeat(node, 4096, 4096, 65536, None, seq=seq)))
            last = time.monotonic()
        for recs in consumer.poll(timeout_ms=FETCH_WAIT_MS).values():
            for rec in recs:
                d = json.loads(rec.value)
                now = int(time.time() * 1000)
                out = {"type": "result", "batch_id": d["batch_id"], "node": node, "error": None,
                       "results": [{"activation_id": r["activation_id"], "status_code": 0, "result": r["value"],
                                    "start_ms": now, "end_ms": now, "init_ms": None, "logs": [],
                                    "timeout": False} for r in d["requests"]]}
                producer.send(results, json.dumps(out, separators=(",", ":")).encode())
        producer.flush()


# -- measuring -----------------------------------------------------------------------------------------
def spawn(args: list[str], env: dict | None = None, log: Path | None = None) -> subprocess.Popen:
    out = open(log, "ab") if log else subprocess.DEVNULL
    p = subprocess.Popen([sys.executable, *args], env={**os.environ, **(env or {})}, stdout=subprocess.PIPE,
                         stderr=out, cwd=ROOT)
    return p


def wait_ready(p: subprocess.Popen, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = p.stdout.readline()
        if b"ready" in line:
            return
    raise RuntimeError("process not ready")


def measure(driver: ControllerDriver, action: str, n: int, rate: float, latency_s: float) -> dict:
    # warm-up
    warm = [driver.publish(action, {"w": i}) for i in range(50)]
    driver.flush()
    assert driver.wait_acked(warm, timeout=60) == [], "warm-up not answered"
    # throughput: a burst
    t0 = time.monotonic()
    ids = [driver.publish(action, {"i": i}) for i in range(n)]
    driver.flush()
    missing = driver.wait_acked(ids, timeout=120)
    t1 = max(driver.acks[a].first_ack_s for a in ids if driver.acks[a].first_ack_s)
    throughput = (n - len(missing)) / (t1 - t0)
    # latency at a steady rate
    lat_ids = []
    start = time.monotonic()
    k = 0
    while time.monotonic() - start < latency_s:
        due = start + k / rate
        if time.monotonic() < due:
            time.sleep(max(0.0, due - time.monotonic()))
        lat_ids.append(driver.publish(action, {"k": k}))
        driver.flush()
        k += 1
    driver.wait_acked(lat_ids, timeout=60)
    lats = sorted((driver.acks[a].first_ack_s - driver.published_s[a]) * 1000 for a in lat_ids
                  if driver.acks[a].first_ack_s)
    dup = len(driver.duplicates())
    return {"throughput": throughput, "missing": len(missing), "p50": statistics.median(lats),
            "p99": lats[min(len(lats) - 1, int(len(lats) * 0.99))], "duplicates": dup}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=3000, help="activations in the throughput burst")
    ap.add_argument("--rate", type=float, default=200.0, help="activations/s in the latency phase")
    ap.add_argument("--latency-s", type=float, default=3.0)
    ap.add_argument("--batch", type=int, default=16, help="esg-max-batch of the ESG no-op function")
    ap.add_argument("--py-spy", metavar="DIR", help="record the scheduler with py-spy (flame data) into DIR")
    ap.add_argument("--only", choices=["forwarder", "plain", "esg"], action="append",
                    help="run only these systems (repeatable; default all)")
    ap.add_argument("--role", choices=["forwarder", "agent"], help=argparse.SUPPRESS)
    ap.add_argument("--kafka", help=argparse.SUPPRESS)
    ap.add_argument("--prefix", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.role == "forwarder":
        return forwarder(a.kafka, a.prefix)
    if a.role == "agent":
        return echo_agent(a.kafka, a.prefix)

    tmp = Path(tempfile.mkdtemp(prefix="esg-bench-"))
    profiles = tmp / "profiles"
    profiles.mkdir()
    (profiles / "noop.json").write_text(json.dumps({"function": "noop", "gpu_model": "A100-40GB", "configs": [
        {"batch": b, "vcpus": 1, "gpu": None, "latency_ms": 1.0 + 0.05 * b} for b in (1, 2, 4, 8, 16, 32, 64)
        if b <= a.batch]}))
    rows = []
    with start_broker() as broker, start_redis() as redis_server:
        import redis as redis_lib
        rc = redis_lib.Redis.from_url(redis_server.url)
        with OpenWhiskStandIn(redis_client=rc) as standin:
            standin.put_action("guest/plain", {"exec": {"kind": "python:3", "code": "def main(a): return a"}})
            standin.put_action("guest/noop", {"exec": {"kind": "python:3", "code": "def main(a): return a"},
                                              "annotations": [{"key": "esg-slo-ms", "value": 1000},
                                                              {"key": "esg-max-batch", "value": a.batch}]})
            systems = {"forwarder": "forwarder", "plain": "scheduler, plain action",
                       "esg": "scheduler, ESG function (batching)"}
            for key, label in systems.items():
                if a.only and key not in a.only:
                    continue
                prefix = f"b{key}_"
                procs = []
                with ControllerDriver(broker.address, prefix=prefix, catalog=standin.store.lookup) as driver:
                    if label == "forwarder":
                        procs.append(spawn([__file__, "--role", "forwarder", "--kafka", broker.address,
                                            "--prefix", prefix]))
                        wait_ready(procs[-1])
                    else:
                        env = {"ESG_KAFKA": broker.address, "ESG_REDIS": redis_server.url,
                               "ESG_OPENWHISK_API": standin.url, "ESG_OPENWHISK_AUTH": GUEST_KEY,
                               "ESG_TOPIC_PREFIX": prefix, "PYTHONPATH": str(ROOT)}
                        cmd = ["-m", "esg_cli.main", "scheduler", "--profiles", str(profiles),
                               "--log-level", "WARNING"]
                        if a.py_spy:
                            out = Path(a.py_spy) / f"{prefix}scheduler.txt"
                            cmd = [str(Path(sys.executable).parent / "py-spy"), "record", "--format", "raw",
                                   "--threads", "--nonblocking", "-r", "200", "-o", str(out), "--",
                                   sys.executable, *cmd]
                            procs.append(subprocess.Popen(cmd, env={**os.environ, **env}, cwd=ROOT,
                                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
                        else:
                            procs.append(spawn(cmd, env, tmp / "scheduler.log"))
                        procs.append(spawn([__file__, "--role", "agent", "--kafka", broker.address,
                                            "--prefix", prefix]))
                        wait_ready(procs[-1])
                    try:
                        driver.wait_healthy(1, timeout=30)
                        action = "guest/noop" if "ESG" in label else "guest/plain"
                        r = measure(driver, action, a.n, a.rate, a.latency_s)
                    finally:
                        for p in procs:
                            p.send_signal(signal.SIGINT if a.py_spy else signal.SIGTERM)
                            try:
                                p.wait(10)
                            except subprocess.TimeoutExpired:
                                p.kill()
                    rows.append((label, r))
                    print(f"{label:38s} {r['throughput']:8.0f} act/s  p50 {r['p50']:6.1f} ms  "
                          f"p99 {r['p99']:6.1f} ms  missing {r['missing']}  duplicates {r['duplicates']}",
                          flush=True)
    if not rows or rows[0][0] != "forwarder":
        return
    fwd = rows[0][1]
    print(f"\nburst of {a.n} blocking activations; latency at {a.rate:.0f}/s for {a.latency_s:.0f} s; "
          f"{os.cpu_count()} cores")
    for label, r in rows[1:]:
        print(f"{label:38s} throughput {r['throughput'] / fwd['throughput']:.2f}x forwarder, "
              f"p50 latency {r['p50'] / fwd['p50']:.2f}x forwarder")


if __name__ == "__main__":
    main()
