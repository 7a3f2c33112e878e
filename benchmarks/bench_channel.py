"""Scheduler<->agent channel benchmark: one hop's latency per transport, and the data store's costs.

    PYTHONPATH=. python benchmarks/bench_channel.py [--trips 2000] [--repeats 3]

**Hops.** Two processes play ping-pong over each candidate transport, on one Tansu broker and one
redis-server on loopback; a hop is half a round trip (p50 and p99 over ``--trips`` round trips):

* ``kafka`` -- produce, then a consumer on an assigned partition polling with the fetch wait the
  services use (``FETCH_WAIT_MS``): what dispatches and results paid before they moved to Redis;
* ``redis-stream`` -- ``XADD``, read by ``XREADGROUP ... BLOCK`` in a consumer group; the answer's
  ``XADD`` and the ``XACK`` go in one pipeline (what the channel does);
* ``redis-list`` -- the reliable-queue pattern: ``LPUSH``, ``BLMOVE`` into a processing list, ``LREM``
  to acknowledge;
* ``redis-pubsub`` -- ``PUBLISH`` to a subscriber: the floor, but nothing survives a subscriber that
  is away (no pending entries, no redelivery), so it cannot carry dispatches.

**Data.** The store costs the emulator models for data passed between agents (``esg/emulator/config.py``):
``GET`` of N bytes and its JSON decoding (what a successor on another node pays), and the extra cost of
writing N bytes in the same ``MULTI`` as a result's ``XADD`` (what every producing agent pays; the bytes
are the runtime's reply, stored as they came), each fitted as ``a + N / b`` by least squares over sizes
from 1 KB to 600 KB (the shipped profiles' outputs). Figures are from one run on one machine;
``--repeats`` runs the data phase again and prints the median of the fits, the numbers
``esg/emulator/config.py`` uses.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import redis  # noqa: E402

from esg_cli.servers import start_broker, start_redis  # noqa: E402

#: Output sizes of the shipped profiles range from 0.2 to 602 KB.
SIZES = (1_000, 10_000, 50_000, 100_000, 250_000, 600_000)


def kafka_ends(kafka: str, read: str):
    """A producer, and a consumer reading ``read`` from its end, fetching as the services do."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    from controller_plugin.bus import FETCH_WAIT_MS

    producer = KafkaProducer(bootstrap_servers=kafka, acks=1, linger_ms=0)
    consumer = KafkaConsumer(bootstrap_servers=kafka, group_id=None, enable_auto_commit=False,
                             fetch_max_wait_ms=FETCH_WAIT_MS)
    tp = TopicPartition(read, 0)
    consumer.assign([tp])
    consumer.seek_to_end(tp)
    consumer.position(tp)
    return producer, consumer


# -- the echo side of each transport (its own process) -------------------------------------------------
def echo(kind: str, kafka: str, redis_url: str, ping: str, pong: str) -> None:
    if kind == "kafka":
        from controller_plugin.bus import FETCH_WAIT_MS

        producer, consumer = kafka_ends(kafka, ping)
        print("ready", flush=True)
        while True:
            for recs in consumer.poll(timeout_ms=FETCH_WAIT_MS).values():
                for rec in recs:
                    if rec.value == b"stop":
                        return
                    producer.send(pong, rec.value)
                producer.flush()
    r = redis.Redis.from_url(redis_url)
    if kind == "redis-stream":
        r.xgroup_create(ping, "g", id="$", mkstream=True)
        print("ready", flush=True)
        while True:
            for _, entries in r.xreadgroup("g", "c", {ping: ">"}, count=100, block=1000) or []:
                pipe = r.pipeline(transaction=False)
                for eid, fields in entries:
                    if fields[b"m"] == b"stop":
                        return
                    pipe.xadd(pong, fields)
                    pipe.xack(ping, "g", eid)
                pipe.execute()
    elif kind == "redis-list":
        print("ready", flush=True)
        work = ping + ":processing"
        while True:
            item = r.blmove(ping, work, 1.0, "RIGHT", "LEFT")
            if item is None:
                continue
            if item == b"stop":
                return
            pipe = r.pipeline(transaction=False)
            pipe.lpush(pong, item)
            pipe.lrem(work, 1, item)
            pipe.execute()
    elif kind == "redis-pubsub":
        sub = r.pubsub()
        sub.subscribe(ping)
        sub.get_message(timeout=1)  # the subscribe confirmation
        print("ready", flush=True)
        while True:
            msg = sub.get_message(timeout=1.0)
            if msg is None or msg["type"] != "message":
                continue
            if msg["data"] == b"stop":
                return
            r.publish(pong, msg["data"])


# -- the measuring side ------------------------------------------------------------------------------
def hops(kind: str, kafka: str, redis_url: str, trips: int) -> list[float]:
    """One-hop latencies in ms (half of each round trip)."""
    tag = uuid.uuid4().hex[:8]
    ping, pong = f"bench-ping-{tag}", f"bench-pong-{tag}"
    r = redis.Redis.from_url(redis_url)
    if kind == "kafka":
        from kafka import KafkaAdminClient
        from kafka.admin import NewTopic

        from controller_plugin.bus import FETCH_WAIT_MS

        admin = KafkaAdminClient(bootstrap_servers=kafka)
        admin.create_topics([NewTopic(ping, 1, 1), NewTopic(pong, 1, 1)])
        admin.close()
        producer, consumer = kafka_ends(kafka, pong)
    if kind == "redis-stream":
        r.xgroup_create(pong, "g", id="$", mkstream=True)
    sub = None
    if kind == "redis-pubsub":
        sub = r.pubsub()
        sub.subscribe(pong)
        sub.get_message(timeout=1)
    proc = subprocess.Popen([sys.executable, __file__, "--role", kind, "--kafka", kafka, "--redis", redis_url,
                             "--ping", ping, "--pong", pong], stdout=subprocess.PIPE, cwd=ROOT)
    try:
        assert b"ready" in proc.stdout.readline()
        out = []
        for i in range(trips + 20):
            body = str(i).encode()
            t0 = time.perf_counter()
            if kind == "kafka":
                producer.send(ping, body)
                producer.flush()
                got = False
                while not got:
                    got = any(recs for recs in consumer.poll(timeout_ms=FETCH_WAIT_MS).values())
            elif kind == "redis-stream":
                r.xadd(ping, {"m": body})
                while True:
                    resp = r.xreadgroup("g", "c", {pong: ">"}, count=10, block=1000)
                    if resp:
                        r.xack(pong, "g", *[e for e, _ in resp[0][1]])
                        break
            elif kind == "redis-list":
                r.lpush(ping, body)
                r.brpop([pong], 1.0)
            else:
                r.publish(ping, body)
                while True:
                    msg = sub.get_message(timeout=1.0)
                    if msg is not None and msg["type"] == "message":
                        break
            if i >= 20:  # the first trips warm connections up
                out.append((time.perf_counter() - t0) * 1000 / 2)
        return out
    finally:
        if kind == "kafka":
            producer.send(ping, b"stop")
            producer.flush()
            producer.close()
            consumer.close()
        elif kind == "redis-stream":
            r.xadd(ping, {"m": b"stop"})
        elif kind == "redis-list":
            r.lpush(ping, b"stop")
        else:
            r.publish(ping, b"stop")
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        r.close()


def fit(sizes: list[int], ms: list[float]) -> tuple[float, float]:
    """``ms = a + size / b``: (a in ms, b in MB/s) by least squares."""
    slope, a = np.polyfit(np.array(sizes, float), np.array(ms, float), 1)
    return float(a), float(1e-3 / slope) if slope > 0 else float("inf")


def data_costs(redis_url: str, reps: int = 60) -> dict[str, tuple[float, float, dict[int, float]]]:
    """Median times per size of a GET (+ JSON decode) and of the SET added to a result's pipeline."""
    r = redis.Redis.from_url(redis_url)
    stream = f"bench-results-{uuid.uuid4().hex[:8]}"
    get_ms: dict[int, float] = {}
    put_ms: dict[int, float] = {}
    for size in SIZES:
        value = {"data": "x" * (size - 12)}
        blob = json.dumps(value).encode()
        key = f"bench-data-{uuid.uuid4().hex[:8]}"
        gets, puts, alone = [], [], []
        for _ in range(reps):
            t0 = time.perf_counter()
            pipe = r.pipeline(transaction=True)
            pipe.xadd(stream, {"m": b"{}"}, maxlen=100, approximate=True)
            pipe.execute()
            t1 = time.perf_counter()
            pipe = r.pipeline(transaction=True)
            pipe.set(key, blob, ex=60)
            pipe.xadd(stream, {"m": b"{}"}, maxlen=100, approximate=True)
            pipe.execute()
            t2 = time.perf_counter()
            json.loads(r.get(key))
            t3 = time.perf_counter()
            alone.append(t1 - t0)
            puts.append(t2 - t1)
            gets.append(t3 - t2)
        r.delete(key)
        assert len(blob) > 0
        get_ms[size] = statistics.median(gets) * 1000
        put_ms[size] = (statistics.median(puts) - statistics.median(alone)) * 1000
    r.delete(stream)
    r.close()
    out = {}
    for name, table in (("get", get_ms), ("put", put_ms)):
        a, b = fit(list(table), list(table.values()))
        out[name] = (a, b, table)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trips", type=int, default=2000, help="round trips per transport")
    ap.add_argument("--repeats", type=int, default=3, help="runs of the data-cost phase")
    ap.add_argument("--only", action="append", choices=["kafka", "redis-stream", "redis-list", "redis-pubsub"])
    ap.add_argument("--role", help=argparse.SUPPRESS)
    ap.add_argument("--kafka", help=argparse.SUPPRESS)
    ap.add_argument("--redis", help=argparse.SUPPRESS)
    ap.add_argument("--ping", help=argparse.SUPPRESS)
    ap.add_argument("--pong", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.role:
        return echo(a.role, a.kafka, a.redis, a.ping, a.pong)
    kinds = a.only or ["kafka", "redis-stream", "redis-list", "redis-pubsub"]
    with start_broker() as broker, start_redis() as rs:
        print(f"one hop (half a round trip between two processes), {a.trips} round trips, {os.cpu_count()} cores")
        print(f"{'transport':14s} {'p50 ms':>8s} {'p99 ms':>8s}")
        p50s = {}
        for kind in kinds:
            lat = sorted(hops(kind, broker.address, rs.url, a.trips))
            p50s[kind] = statistics.median(lat)
            print(f"{kind:14s} {p50s[kind]:8.3f} {lat[int(len(lat) * 0.99)]:8.3f}", flush=True)
        if "kafka" in p50s and "redis-stream" in p50s:
            print(f"redis-stream hop = {p50s['redis-stream'] / p50s['kafka']:.3f}x the kafka hop (p50)")
        print("\ndata store on loopback (median of 60 per size; cost = a + bytes / b)")
        fits: dict[str, list[tuple[float, float]]] = {"get": [], "put": []}
        for rep in range(a.repeats):
            costs = data_costs(rs.url)
            for name, (a_ms, b_mbs, table) in costs.items():
                fits[name].append((a_ms, b_mbs))
                what = "GET + decode" if name == "get" else "SET in the result's pipeline"
                sizes = "  ".join(f"{s // 1000}K {t:.3f}" for s, t in table.items())
                print(f"run {rep + 1} {what:29s} a = {a_ms:.3f} ms  b = {b_mbs:7.0f} MB/s   [{sizes}]")
        get_a = statistics.median(f[0] for f in fits["get"])
        get_b = statistics.median(f[1] for f in fits["get"])
        put_b = statistics.median(f[1] for f in fits["put"])
        print(f"\nmedian of {a.repeats} runs: a successor on another node reads its inputs in "
              f"{get_a:.3f} ms + bytes / {get_b:.0f} MB/s; a producer writes its outputs in bytes / "
              f"{put_b:.0f} MB/s more")


if __name__ == "__main__":
    main()
