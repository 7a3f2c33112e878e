"""Scheduler-service benchmark: ack latency and throughput against a plain forwarder, and data passing.

    PYTHONPATH=. python benchmarks/bench_scheduler.py [--n 3000] [--rate 200] [--latency-s 5]

One Tansu broker and one redis-server are started; the controller driver publishes blocking
activations. Each system answers them in turn, each in its own processes, on the same broker and Redis:

* **forwarder** -- consumes ``invoker0`` and produces a Combined ack per message on ``completed0``: the
  floor any invoker stand-in pays for OpenWhisk's two Kafka hops; on kafka-python (as in runs A-I);
* **forwarder, librdkafka** -- the same forwarder on confluent-kafka's consumer and producer, the client
  the scheduler reads and writes Kafka with: the like-for-like floor;
* **forwarder + warm action** -- the forwarder that also runs the action, as OpenWhisk's invoker does:
  each activation on a warm worker of the pool ``esg agent`` uses (same workers, same ``/run``), one at a
  time per worker on 8 vCPUs, the ack carrying its result. No scheduler, no agent channel: the floor of
  any system that runs the action in a worker of its own. Ratios are given to all three;
* **echo agent, plain action** -- ``esg scheduler`` with a fast echo agent (a process that answers the
  dispatches of each read at once, in one round trip, on the real channel; no action runtime); the
  action has no annotations (batch 1: one dispatch and one result per activation);
* **esg agent, warm action** -- ``esg scheduler`` with a real ``esg agent`` process running the same
  trivial Python action (``def main(a): return a``) on warm workers;
* **echo agent, ESG function** -- an ``esg-slo-ms``/``esg-max-batch`` function, so the scheduler batches.

The systems run one at a time (an idle Kafka client costs a tenth of a core: idle systems would load
the one measured), in ``--rounds`` rounds that start, measure and stop every system in turn, so that
drifting background load spreads over all of them. Throughput: a burst of ``--n`` activations (first
publish to last ack), in the first round. Latency: p50/p99 publish->ack at a steady ``--rate`` for
``--latency-s`` seconds per system per round; the ratios to the forwarder are given from the pooled
samples and per round (their spread).

Then a two-function app (``produce`` -> ``consume``, the first returning ``n`` bytes) on two real
``esg agent`` systems at once, calls alternating between them at ``--app-rate``: **local** (the
successor reads the producer's copy kept on its node) and **remote** (that agent keeps no copies,
``--local-data-mb 0``, so the successor reads the output from Redis, as one on another node does).
Figures are ratios and differences from one run on one machine, never thresholds.
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
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kafka import KafkaConsumer, KafkaProducer, TopicPartition  # noqa: E402

from controller_plugin import wire  # noqa: E402
from controller_plugin.bus import FETCH_WAIT_MS  # noqa: E402  (the forwarder fetches as the scheduler does)
from esg_cli.controller_driver import ControllerDriver  # noqa: E402
from esg_cli.openwhisk_standin import GUEST_KEY, OpenWhiskStandIn  # noqa: E402
from esg_cli.servers import start_broker, start_redis  # noqa: E402
from invoker_agent.runtime_client import RuntimeResult  # noqa: E402

NODE = "bench-node"
ECHO_CODE = "def main(a):\n    return a\n"
PRODUCE_CODE = "def main(a):\n    return {'blob': 'x' * int(a['n'])}\n"
CONSUME_CODE = "def main(a):\n    return {'n': len(a['blob'])}\n"


def _ack(msg: wire.ActivationMessage, instance: wire.InvokerInstance, ran: RuntimeResult | None = None) -> bytes:
    """The Combined ack of ``msg``: its result as ``ran`` (None: the activation's own parameters, now)."""
    if msg.is_health_test:
        return wire.encode_ack(wire.completion(msg, instance))
    now = int(time.time() * 1000)
    start, end, code, result = (now, now, 0, msg.content) if ran is None else (
        int(ran.started_ms or now), int((ran.started_ms or now) + ran.duration_ms), ran.status_code, ran.result)
    record = wire.whisk_activation(msg, start_ms=start, end_ms=end, status_code=code, result=result,
                                   kind="python:3", limits={"timeout": 60000, "memory": 256, "logs": 10,
                                                            "concurrency": 1}, wait_time_ms=0)
    return wire.encode_ack(wire.combined(msg, record, instance))


# -- the plain forwarder (its own process) -----------------------------------------------------------
def forwarder_rdkafka(kafka: str, prefix: str) -> None:
    """The forwarder on librdkafka: the scheduler's consumer and producer settings, no group commits
    (the forwarder keeps no guarantees: it is the floor)."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka import TopicPartition as RdTopicPartition

    from controller_plugin.bus import producer_settings

    _make_invoker_topic(kafka, prefix)
    producer = Producer(producer_settings(kafka, "bench-forwarder", 5000))
    # the scheduler's consumer settings (controller_plugin.bus.activation_consumer_settings), spelt out
    # here so that the benchmark runs against code from before the scheduler had them too
    consumer = Consumer({"bootstrap.servers": kafka, "group.id": "bench-forwarder", "enable.auto.commit": False,
                         "enable.auto.offset.store": False, "fetch.wait.max.ms": FETCH_WAIT_MS,
                         "socket.nagle.disable": True, "log.connection.close": False})
    tp = RdTopicPartition(wire.invoker_topic(0, prefix), 0)
    # the end now, as kafka-python's seek_to_end + position: OFFSET_END would be looked up later, and
    # what the driver publishes meanwhile (its first health test) would be skipped
    consumer.assign([RdTopicPartition(tp.topic, 0, consumer.get_watermark_offsets(tp, timeout=10)[1])])
    health = wire.health_topic(prefix)
    instance = wire.InvokerInstance(0, 4096)
    last_ping = 0.0
    print("ready", flush=True)
    while True:
        if time.monotonic() - last_ping > 1:
            producer.produce(health, wire.encode(wire.ping_message(instance)))
            last_ping = time.monotonic()
        first = consumer.poll(FETCH_WAIT_MS / 1000)
        if first is None:
            producer.poll(0)
            continue
        for m in [first, *consumer.consume(499, 0)]:
            if m.error() is not None:
                continue
            msg = wire.parse_activation(m.value())
            producer.produce(wire.completed_topic(msg.root_controller, prefix), _ack(msg, instance))
        producer.poll(0)


def forwarder(kafka: str, prefix: str) -> None:
    producer, consumer = _forwarder_clients(kafka, prefix)
    instance = wire.InvokerInstance(0, 4096)
    _forward(producer, consumer, prefix, instance,
             lambda msg: producer.send(wire.completed_topic(msg.root_controller, prefix), _ack(msg, instance)))


def invoker(kafka: str, prefix: str, vcpus: int) -> None:
    """The forwarder that also runs the action, as OpenWhisk's invoker does and nothing more: each
    activation runs on a warm worker of the pool ``esg agent`` uses (the same worker processes and
    ``/run`` exchange), one activation per worker at a time, on ``vcpus`` threads and vCPUs; its
    Combined ack carries the action's result. No scheduler, no agent channel, no guarantees: the floor
    for any system that runs the action in a worker of its own."""
    from concurrent.futures import ThreadPoolExecutor

    from agent_channel.protocol import RunRequest
    from invoker_agent.actions import ActionCode
    from invoker_agent.vcpus import VcpuAllocator
    from invoker_agent.workers import WorkerKey, WorkerPool, WorkerSpec

    producer, consumer = _forwarder_clients(kafka, prefix)
    pool, cpus = WorkerPool(), VcpuAllocator(vcpus)
    signal.signal(signal.SIGTERM, lambda *_: (pool.shutdown(), os._exit(0)))
    action = ActionCode("/guest/plain", "0.0.1", "python:3", ECHO_CODE)
    key = WorkerKey(action.fqn, action.revision, "cpu", None)
    instance = wire.InvokerInstance(0, 4096)

    def run(msg: wire.ActivationMessage) -> None:
        ids = cpus.acquire(1)
        assert ids is not None
        try:
            [ran] = pool.run(key, WorkerSpec(cpus.host_ids(ids)), action,
                             [RunRequest(msg.activation_id, value=msg.content)])
        finally:
            cpus.release(ids)
        producer.send(wire.completed_topic(msg.root_controller, prefix), _ack(msg, instance, ran))

    threads = ThreadPoolExecutor(vcpus)

    def take(msg: wire.ActivationMessage) -> None:
        if msg.is_health_test:
            producer.send(wire.completed_topic(msg.root_controller, prefix), _ack(msg, instance))
        else:
            threads.submit(run, msg)
    _forward(producer, consumer, prefix, instance, take)


def _forward(producer: KafkaProducer, consumer: KafkaConsumer, prefix: str, instance: wire.InvokerInstance,
             take: Callable[[wire.ActivationMessage], object]) -> None:
    """The forwarders' loop: a ping every second, each activation read handed to ``take``, the
    producer flushed after each poll."""
    health = wire.health_topic(prefix)
    last_ping = 0.0
    print("ready", flush=True)
    while True:
        if time.monotonic() - last_ping > 1:
            producer.send(health, wire.encode(wire.ping_message(instance)))
            last_ping = time.monotonic()
        for recs in consumer.poll(timeout_ms=FETCH_WAIT_MS).values():
            for rec in recs:
                take(wire.parse_activation(rec.value))
        producer.flush()


def _make_invoker_topic(kafka: str, prefix: str) -> None:
    """``invoker0``, created as the scheduler creates it (read before it exists, records can be lost)."""
    from controller_plugin.bus import Bus

    bus = Bus(kafka)
    try:
        bus.ensure_topics([(wire.invoker_topic(0, prefix), "invoker")])
    finally:
        bus.close()     # an idle client left open would cost the forwarder a share of a core


def _forwarder_clients(kafka: str, prefix: str) -> tuple[KafkaProducer, KafkaConsumer]:
    """kafka-python's producer and a consumer of ``invoker0`` from its end, as the forwarder has them."""
    _make_invoker_topic(kafka, prefix)
    producer = KafkaProducer(bootstrap_servers=kafka, acks=1, linger_ms=1)
    consumer = KafkaConsumer(bootstrap_servers=kafka, group_id="bench-forwarder", enable_auto_commit=False,
                             auto_offset_reset="latest", fetch_max_wait_ms=FETCH_WAIT_MS, max_poll_records=500)
    tp = TopicPartition(wire.invoker_topic(0, prefix), 0)
    consumer.assign([tp])
    consumer.seek_to_end(tp)
    consumer.position(tp)
    return producer, consumer


# -- a fast echo agent (its own process) on the real channel ------------------------------------------
def echo_agent(redis_url: str, prefix: str, node: str = NODE) -> None:
    """Answer every dispatch of ``node``'s stream at once (each read's answers in one round trip), after
    claiming its batches as ``esg agent`` does; a batch whose claim it does not get is retired unrun."""
    from agent_channel import claims, protocol
    from agent_channel.connect import connect
    from agent_channel.keys import Keys
    from invoker_agent.channel import AgentChannel
    from invoker_agent.data import DataPlane, LocalOutputs

    client = connect(redis_url)
    keys = Keys(prefix)
    channel = AgentChannel(client, keys, node)
    data = DataPlane(client, keys, LocalOutputs(64 << 20), node)
    seq, last = 0, 0.0
    earlier: list[str] = []    # batches answered before the last heartbeat, and since: each is named in two
    done: list[str] = []       # heartbeats, as a real agent names them (the scheduler's view forgets them then)
    print("ready", flush=True)
    while True:
        if time.monotonic() - last > 0.5:
            seq += 1
            channel.heartbeat(protocol.Heartbeat(node, 4096, 4096, 65536, None, seq=seq, done=(*earlier, *done)))
            earlier, done = done, []
            last = time.monotonic()
        got = channel.take(1000, 100)
        msgs = [protocol.decode(e.raw) for e in got]
        # each batch claimed before it runs, as esg agent does (at most once): one script call for the read
        verdicts = claims.claim(client, keys, node, [(m.batch_id, m.epoch, m.data_ttl_s) for m in msgs])
        pipe = client.pipeline(transaction=True)
        for e, msg, verdict in zip(got, msgs, verdicts):
            if verdict != claims.CLAIMED:
                pipe.xack(channel.stream, "agents", e.id)
                pipe.xdel(channel.stream, e.id)
                continue
            now = int(time.time() * 1000)
            results = [protocol.RunResult(r.activation_id, 0, v, now, now)
                       for r, v in zip(msg.requests, data.inputs(msg))]
            results, writes = data.outputs(msg, results)
            channel.stage_answer(pipe, e.id, msg.reply_to, protocol.BatchResult(
                msg.batch_id, node, tuple(results), None, msg.function, msg.config, 0.0), writes,
                claim_ttl_s=msg.data_ttl_s)
            done.append(msg.batch_id)
        if got:
            pipe.execute()  # every answer of this read in one round trip


# -- measuring -----------------------------------------------------------------------------------------
class Procs:
    """The processes of one system; all stopped (and reaped) on leaving."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.procs: list[subprocess.Popen] = []

    def spawn(self, args: list[str], name: str, env: dict | None = None, ready: bool = False) -> subprocess.Popen:
        out = open(self.logs / f"{name}.log", "ab")  # noqa: SIM115 - closed with the process
        p = subprocess.Popen([sys.executable, *args], env={**os.environ, **(env or {})}, cwd=ROOT,
                             stdout=subprocess.PIPE if ready else out, stderr=out)
        self.procs.append(p)
        if ready:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and b"ready" not in p.stdout.readline():
                pass
        return p

    def __enter__(self) -> Procs:
        return self

    def __exit__(self, *exc: object) -> None:
        for p in self.procs:
            p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def latencies(driver: ControllerDriver, ids: list[str]) -> list[float]:
    return sorted((driver.acks[a].first_ack_s - driver.published_s[a]) * 1000 for a in ids
                  if driver.acks[a].first_ack_s)


def pct(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, int(len(values) * q))]


def warm_up(driver: ControllerDriver, action: str, n: int = 50) -> None:
    warm = [driver.publish(action, {"w": i}) for i in range(n)]
    driver.flush()
    assert driver.wait_acked(warm, timeout=60) == [], "warm-up not answered"


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` and its waited-for children (``/proc/PID/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def burst(driver: ControllerDriver, action: str, n: int, pids: dict[str, int]) -> dict:
    """Throughput of a burst of ``n`` (first publish to last ack) and the CPU each of the system's
    processes spent over it, in ms per activation."""
    warm_up(driver, action)
    before = {role: cpu_s(pid) for role, pid in pids.items()}
    t0 = time.monotonic()
    ids = [driver.publish(action, {"i": i}) for i in range(n)]
    driver.flush()
    missing = driver.wait_acked(ids, timeout=300)
    t1 = max(driver.acks[a].first_ack_s for a in ids if driver.acks[a].first_ack_s)
    cpu = {role: (cpu_s(pid) - before[role]) * 1000 / n for role, pid in pids.items()}
    return {"throughput": (n - len(missing)) / (t1 - t0), "missing": len(missing), "cpu_ms": cpu}


def summary(lats: list[float]) -> dict:
    lats = sorted(lats)
    return {"p50": statistics.median(lats), "p99": pct(lats, 0.99), "n": len(lats)}


def alternate(drivers: list[ControllerDriver], action: str, rate: float, seconds: float, params) -> list[list[str]]:
    """Calls to each driver in turn, one every 1/rate s in all, for ``seconds``; the ids per driver."""
    ids: list[list[str]] = [[] for _ in drivers]
    start = time.monotonic()
    k = 0
    while time.monotonic() - start < seconds:
        due = start + k / rate
        if time.monotonic() < due:
            time.sleep(max(0.0, due - time.monotonic()))
        d = k % len(drivers)
        ids[d].append(drivers[d].publish(action, params(k)))
        drivers[d].flush()
        k += 1
    for d, got in zip(drivers, ids):
        d.wait_acked(got, timeout=120)
    return ids


def app_latency(drivers: dict[str, ControllerDriver], sizes: list[int], rate: float, seconds: float,
                rounds: int) -> dict[str, dict[int, dict]]:
    names = list(drivers)
    for d in drivers.values():
        warm = [d.publish("guest/pipe", {"n": s}) for s in sizes for _ in range(3)]
        d.flush()
        assert d.wait_acked(warm, timeout=120) == [], "warm-up not answered"
    lats: dict[str, dict[int, list[float]]] = {n: {s: [] for s in sizes} for n in names}
    bad = 0
    for _ in range(rounds):
        for size in sizes:
            got = alternate([drivers[n] for n in names], "guest/pipe", rate, seconds / rounds,
                            lambda k, size=size: {"n": size})
            for n, ids in zip(names, got):
                d = drivers[n]
                lats[n][size] += latencies(d, ids)
                bad += sum(1 for a in ids if (d.acks[a].record or {}).get("response", {}).get("result") != {"n": size})
    assert bad == 0, f"{bad} calls of the two-function app answered wrongly"
    return {n: {s: summary(v) for s, v in per.items()} for n, per in lats.items()}


def write_profiles(directory: Path, max_batch: int) -> None:
    directory.mkdir()
    rows = [{"batch": b, "vcpus": 1, "gpu": None, "latency_ms": 1.0 + 0.05 * b}
            for b in (1, 2, 4, 8, 16, 32, 64) if b <= max_batch]
    for name, out in (("noop", 0), ("produce", 100_000), ("consume", 20)):
        (directory / f"{name}.json").write_text(json.dumps({"function": name, "gpu_model": "A100-40GB",
                                                            "configs": rows, "output_bytes": out}))


def deploy(standin: OpenWhiskStandIn, max_batch: int) -> None:
    def put(name: str, code: str, annotations: dict | None = None) -> None:
        standin.put_action(f"guest/{name}", {"exec": {"kind": "python:3", "code": code},
                                             "annotations": [{"key": k, "value": v}
                                                             for k, v in (annotations or {}).items()]})
    put("plain", ECHO_CODE)
    put("noop", ECHO_CODE, {"esg-slo-ms": 1000, "esg-max-batch": max_batch})
    put("produce", PRODUCE_CODE, {"esg-max-batch": 1})
    put("consume", CONSUME_CODE, {"esg-max-batch": 1})
    put("pipe", ECHO_CODE, {"esg-slo-ms": 5000,
                            "esg-dag": {"functions": ["produce", "consume"], "edges": [["produce", "consume"]]}})


SYSTEMS = {
    "forwarder": "forwarder",
    "forwarder-rdk": "forwarder, librdkafka",
    "invoker": "forwarder + warm action (no scheduler)",
    "plain-echo": "scheduler + echo agent, plain action",
    "plain-agent": "scheduler + esg agent, warm action",
    "esg-echo": "scheduler + echo agent, ESG function",
}
ACTIONS = {"forwarder": "guest/plain", "forwarder-rdk": "guest/plain", "invoker": "guest/plain",
           "plain-echo": "guest/plain", "plain-agent": "guest/plain", "esg-echo": "guest/noop"}
#: what the ratios are given to: the two forwarders, and the floor of a system that runs the action
BASES = ("forwarder", "forwarder-rdk", "invoker")
#: the vCPUs (and threads) of the node that runs the action: the invoker floor's and the agent's
VCPUS = 8


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=3000, help="activations in each throughput burst")
    ap.add_argument("--rate", type=float, default=50.0, help="activations/s in the latency phase")
    ap.add_argument("--latency-s", type=float, default=4.0, help="seconds per system per latency round")
    ap.add_argument("--rounds", type=int, default=3, help="latency rounds (every system once per round)")
    ap.add_argument("--batch", type=int, default=16, help="esg-max-batch of the ESG no-op function")
    ap.add_argument("--sizes", default="10000,100000,600000", help="payload sizes (bytes) of the two-function app")
    ap.add_argument("--app-rate", type=float, default=20.0, help="calls/s of the two-function app (both systems)")
    ap.add_argument("--app-s", type=float, default=15.0, help="seconds per payload size of the two-function app")
    ap.add_argument("--only", choices=["systems", "data"], help="run only one of the two parts")
    ap.add_argument("--systems", default=",".join(SYSTEMS),
                    help=f"the systems to measure, comma-separated, the forwarder among them (of: {', '.join(SYSTEMS)})")
    ap.add_argument("--role", choices=["forwarder", "forwarder-rdk", "invoker", "agent"], help=argparse.SUPPRESS)
    ap.add_argument("--kafka", help=argparse.SUPPRESS)
    ap.add_argument("--redis", help=argparse.SUPPRESS)
    ap.add_argument("--prefix", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.role == "forwarder":
        return forwarder(a.kafka, a.prefix)
    if a.role == "forwarder-rdk":
        return forwarder_rdkafka(a.kafka, a.prefix)
    if a.role == "invoker":
        return invoker(a.kafka, a.prefix, VCPUS)
    if a.role == "agent":
        return echo_agent(a.redis, a.prefix)

    sizes = [int(s) for s in a.sizes.split(",")]
    systems = [key for key in a.systems.split(",") if key]
    unknown = [key for key in systems if key not in SYSTEMS]
    if unknown or "forwarder" not in systems:
        ap.error(f"--systems: {', '.join(unknown) or 'forwarder missing'} (of: {', '.join(SYSTEMS)})")
    # the processes' logs and the profiles live here until the run ends (after every process stopped)
    with tempfile.TemporaryDirectory(prefix="esg-bench-") as tmpdir, start_broker() as broker, \
            start_redis() as redis_server, ExitStack() as outer:
        tmp = Path(tmpdir)
        write_profiles(tmp / "profiles", a.batch)
        standin = outer.enter_context(OpenWhiskStandIn())
        deploy(standin, a.batch)
        base_env = {"ESG_KAFKA": broker.address, "ESG_REDIS": redis_server.url, "ESG_OPENWHISK_API": standin.url,
                    "ESG_OPENWHISK_AUTH": GUEST_KEY, "PYTHONPATH": str(ROOT)}

        pids: dict[str, dict[str, int]] = {}

        def start(stack: ExitStack, key: str, *agent_flags: str) -> ControllerDriver:
            """One system on its own prefix: its processes (their ids in ``pids[key]``) and the controller
            driver that calls it."""
            prefix = f"b{key.replace('-', '')}_"
            driver = stack.enter_context(ControllerDriver(broker.address, prefix=prefix,
                                                          catalog=standin.store.lookup))
            procs = stack.enter_context(Procs(tmp))
            env = {**base_env, "ESG_TOPIC_PREFIX": prefix}
            if key.startswith("forwarder") or key == "invoker":
                pids[key] = {key: procs.spawn([__file__, "--role", key, "--kafka", broker.address,
                                                       "--prefix", prefix], key, ready=True).pid}
                return driver
            sched = procs.spawn(["-m", "esg_cli.main", "scheduler", "--profiles", str(tmp / "profiles"),
                                 "--log-level", "WARNING"], f"{prefix}scheduler", env)
            if key.endswith("echo"):
                agent = procs.spawn([__file__, "--role", "agent", "--redis", redis_server.url, "--prefix", prefix],
                                    f"{prefix}echo", ready=True)
            else:
                agent = procs.spawn(["-m", "esg_cli.main", "agent", "--name", NODE, "--fake-gpu", "A100-40GB",
                                     "--vcpus", str(VCPUS), "--max-batches", str(VCPUS), "--log-level", "WARNING",
                                     *agent_flags], f"{prefix}agent", env)
            pids[key] = {"scheduler": sched.pid, "agent": agent.pid}
            return driver

        rows: dict[str, dict] = {key: {} for key in systems}
        per_round: dict[str, list[list[float]]] = {key: [] for key in systems}
        if a.only in (None, "systems"):
            for r in range(a.rounds):
                for key in systems:
                    with ExitStack() as stack:
                        d = start(stack, key)
                        d.wait_healthy(1, timeout=60)
                        if r == 0:
                            rows[key] = burst(d, ACTIONS[key], a.n, pids[key])
                            cpu = ", ".join(f"{role} {ms:.2f}" for role, ms in rows[key]["cpu_ms"].items())
                            print(f"{SYSTEMS[key]:40s} burst {rows[key]['throughput']:6.0f} act/s  "
                                  f"(missing {rows[key]['missing']}; CPU ms per activation: {cpu})", flush=True)
                        else:
                            warm_up(d, ACTIONS[key])
                        got = alternate([d], ACTIONS[key], a.rate, a.latency_s, lambda k: {"k": k})[0]
                        per_round[key].append(latencies(d, got))
                        rows[key]["duplicates"] = rows[key].get("duplicates", 0) + len(d.duplicates())
            for key in systems:
                rows[key].update(summary([x for r in per_round[key] for x in r]))
                rows[key]["rounds"] = [statistics.median(r) for r in per_round[key]]
            report_systems(rows, a)

        if a.only in (None, "data"):
            with ExitStack() as stack:
                drivers = {"local": start(stack, "data-local"),
                           "remote": start(stack, "data-remote", "--local-data-mb", "0")}
                for d in drivers.values():
                    d.wait_healthy(1, timeout=60)
                data = app_latency(drivers, sizes, a.app_rate, a.app_s, a.rounds)
            report_data(data, sizes)


def report_systems(rows: dict[str, dict], a: argparse.Namespace) -> None:
    for base in BASES:
        if base in rows:
            report_against(rows, a, base)


def report_against(rows: dict[str, dict], a: argparse.Namespace, base: str) -> None:
    fwd = rows[base]
    print(f"\nburst of {a.n} blocking activations per system; latency at {a.rate:.0f}/s, {a.rounds} rounds of "
          f"{a.latency_s:.0f} s per system, one system at a time; {len(os.sched_getaffinity(0))} cores; ratios to: "
          f"{SYSTEMS[base]}")
    print(f"{'system':40s} {'act/s':>7s} {'p50 ms':>7s} {'p99 ms':>7s} {'thr.':>6s} {'p50':>6s} {'p99':>6s}  "
          f"p50 per round (x forwarder)")
    for key, r in rows.items():
        per = " ".join(f"{x / y:.2f}" for x, y in zip(r["rounds"], fwd["rounds"]))
        print(f"{SYSTEMS[key]:40s} {r['throughput']:7.0f} {r['p50']:7.1f} {r['p99']:7.1f} "
              f"{r['throughput'] / fwd['throughput']:5.2f}x {r['p50'] / fwd['p50']:5.2f}x "
              f"{r['p99'] / fwd['p99']:5.2f}x  {per}   (missing {r['missing']}, duplicates {r['duplicates']})")


def report_data(data: dict[str, dict[int, dict]], sizes: list[int]) -> None:
    print("\ntwo-function app (produce -> consume), publish->ack, calls alternating between the two systems")
    print(f"{'output':>8s} {'local p50':>10s} {'remote p50':>11s} {'remote - local':>15s} {'local p99':>10s} "
          f"{'remote p99':>11s}")
    for size in sizes:
        lo, re = data["local"][size], data["remote"][size]
        print(f"{size / 1000:6.0f} KB {lo['p50']:8.1f} ms {re['p50']:8.1f} ms {re['p50'] - lo['p50']:+12.1f} ms "
              f"{lo['p99']:7.1f} ms {re['p99']:8.1f} ms")


if __name__ == "__main__":
    main()
