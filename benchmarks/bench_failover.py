"""Failover benchmark: how long the cluster stops answering when the leading scheduler is killed.

    PYTHONPATH=. python benchmarks/bench_failover.py [--kills 10] [--rate 20] [--lease-s 2]

One Tansu broker and one redis-server are started, two ``esg scheduler`` processes (one leads, one
stands by) and two fast echo agents (``bench_scheduler``'s: each answers the dispatches of a read at once,
on the real channel, claiming each batch first as ``esg agent`` does). The controller driver publishes non-blocking activations
of a plain action at ``--rate`` per second throughout. ``--kills`` times: once a standby stands by,
``kill -9`` the leader (found from the lease in Redis), and measure

* **failover time** -- from the kill to the first ack the controller receives from the new leader (the
  first one after the moment its log says it leads: acks the killed leader had produced can still arrive
  just after the kill);
* **ack gap** -- the longest time without any ack around the kill (from 2 s before it to 10 s after);
* **ping gap** -- the longest time an invoker had no ping on ``health`` (the controller marks it offline
  after 10 s);

then restart the killed scheduler (it comes back as the standby). At the end every activation published
must have been answered exactly once. Printed: each kill's figures, and their distribution.
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kafka import KafkaConsumer, TopicPartition  # noqa: E402

from benchmarks.bench_scheduler import echo_agent  # noqa: E402  (the same fast agent, one per node)
from controller_plugin import wire  # noqa: E402
from esg_cli.controller_driver import ControllerDriver  # noqa: E402
from esg_cli.openwhisk_standin import GUEST_KEY, OpenWhiskStandIn  # noqa: E402
from esg_cli.servers import start_broker, start_redis  # noqa: E402
from invoker_agent.lifetime import die_with_parent  # noqa: E402

PREFIX = "fo_"
PLAIN = "def main(a): return a"


# -- the cluster ----------------------------------------------------------------------------------------
class Pings:
    """The largest gap between two pings of any invoker on ``health``, since :meth:`reset`."""

    def __init__(self, kafka: str) -> None:
        self._consumer = KafkaConsumer(bootstrap_servers=kafka, group_id=None, enable_auto_commit=False)
        tp = TopicPartition(wire.health_topic(PREFIX), 0)
        self._consumer.assign([tp])
        self._consumer.seek_to_end(tp)
        self._last: dict[int, float] = {}
        self.gap = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while not self._stop.is_set():
            for recs in self._consumer.poll(timeout_ms=100).values():
                for rec in recs:
                    try:
                        inst, _ = wire.parse_ping(rec.value)
                    except wire.WireError:
                        continue
                    now = time.monotonic()
                    if inst.instance in self._last:
                        self.gap = max(self.gap, now - self._last[inst.instance])
                    self._last[inst.instance] = now

    def reset(self) -> None:
        self.gap = 0.0

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._consumer.close()


class Cluster:
    def __init__(self, kafka: str, redis_url: str, api: str, logs: Path, lease_s: float) -> None:
        self.env = {**os.environ, "ESG_KAFKA": kafka, "ESG_REDIS": redis_url, "ESG_OPENWHISK_API": api,
                    "ESG_OPENWHISK_AUTH": GUEST_KEY, "ESG_TOPIC_PREFIX": PREFIX, "PYTHONPATH": str(ROOT)}
        self.logs = logs
        self.lease_s = lease_s
        self.redis_url = redis_url
        self.schedulers: dict[str, subprocess.Popen] = {}
        self.agents: list[subprocess.Popen] = []

    def scheduler(self, name: str) -> subprocess.Popen:
        out = open(self.logs / f"{name}.log", "ab")  # noqa: SIM115 - closed with the process
        p = subprocess.Popen([sys.executable, "-m", "esg_cli.main", "scheduler", "--lease-s", str(self.lease_s)],
                             env={**self.env, "ESG_SCHEDULER_NAME": name},
                             stdout=out, stderr=out, cwd=ROOT, stdin=subprocess.DEVNULL, preexec_fn=die_with_parent())
        self.schedulers[name] = p
        return p

    def agent(self, node: str) -> None:
        out = open(self.logs / f"{node}.log", "ab")  # noqa: SIM115 - closed with the process
        p = subprocess.Popen([sys.executable, __file__, "--role", "agent", "--redis", self.redis_url, "--node", node],
                             env=self.env, stdout=subprocess.PIPE, stderr=out, cwd=ROOT, preexec_fn=die_with_parent())
        assert p.stdout is not None and p.stdout.readline().strip() == b"ready"
        self.agents.append(p)

    def leader(self) -> str | None:
        import redis

        token = redis.Redis.from_url(self.redis_url).get(f"esg:{PREFIX}0:leader")
        return token.decode().split(":", 1)[1].split("/")[0] if token else None

    def standing_by(self, name: str) -> bool:
        """Whether ``name`` runs and the last thing it said was that it stands by."""
        readies = [line for line in (self.logs / f"{name}.log").read_text(errors="replace").splitlines()
                   if line.startswith("esg scheduler: ready")]
        return self.schedulers[name].poll() is None and bool(readies) and "standing by" in readies[-1]

    def led_since(self, name: str, after_wall: float) -> float | None:
        """When (wall clock) ``name``'s log last said it leads, if after ``after_wall``."""
        found = None
        for line in (self.logs / f"{name}.log").read_text(errors="replace").splitlines():
            if "leading as epoch" in line:
                stamp = datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
                if stamp >= after_wall:
                    found = stamp
        return found

    def close(self) -> None:
        for p in [*self.schedulers.values(), *self.agents]:
            if p.poll() is None:
                p.terminate()
        for p in [*self.schedulers.values(), *self.agents]:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)


def wait(cond, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.05)


def publish(driver: ControllerDriver, rate: float, ids: list[str], stop: threading.Event) -> None:
    i = 0
    while not stop.wait(1 / rate):
        try:
            ids.append(driver.publish("guest/plain", {"i": i}, blocking=False))
            driver.flush()
        except Exception:  # noqa: BLE001 - a 503 (no healthy invoker) would show as a refused call
            ids.append("refused")
        i += 1


def run(a: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="esg-bench-failover-") as tmp, start_broker() as broker, \
            start_redis() as rserver, OpenWhiskStandIn() as standin:
        logs = Path(tmp)
        standin.put_action("guest/plain", {"exec": {"kind": "python:3", "code": PLAIN}})
        cluster = Cluster(broker.address, rserver.url, standin.url, logs, a.lease_s)
        driver = ControllerDriver(broker.address, prefix=PREFIX, catalog=standin.store.lookup, retest_s=2.0)
        pings = Pings(broker.address)
        stop = threading.Event()
        ids: list[str] = []
        rows = []
        try:
            cluster.scheduler("s0")
            wait(lambda: cluster.leader() == "s0", 60, "s0 to lead")
            cluster.scheduler("s1")
            for n in range(2):
                cluster.agent(f"node{n}")
            driver.wait_healthy(2, timeout=60)
            feeder = threading.Thread(target=publish, args=(driver, a.rate, ids, stop), daemon=True)
            feeder.start()
            for k in range(a.kills):
                name = cluster.leader()
                other = "s1" if name == "s0" else "s0"
                wait(lambda o=other: cluster.standing_by(o), 60, f"{other} to stand by")
                time.sleep(a.steady_s)
                pings.reset()
                t_kill, wall_kill = time.monotonic(), time.time()
                cluster.schedulers[name].kill()
                cluster.schedulers[name].wait(10)
                wait(lambda o=other: cluster.leader() == o, 30, f"{other} to take over")
                wait(lambda o=other, w=wall_kill: cluster.led_since(o, w) is not None, 30, f"{other} to log its takeover")
                led = t_kill + (cluster.led_since(other, wall_kill) - wall_kill)
                time.sleep(10)
                acks = sorted(t for x in ids if x != "refused" and (t := driver.acks[x].first_ack_s) is not None
                              and t_kill - 2 <= t <= t_kill + 10)
                first = next((t for t in acks if t > led), None)
                gap = max((b - c for c, b in zip(acks, acks[1:])), default=float("nan"))
                rows.append((k, first - t_kill if first else float("nan"), gap, pings.gap))
                print(f"kill {k + 1:>2}: {name} killed; failover {rows[-1][1] * 1000:7.0f} ms, ack gap "
                      f"{gap * 1000:7.0f} ms, largest ping gap {pings.gap * 1000:7.0f} ms", flush=True)
                cluster.scheduler(name)
            stop.set()
            feeder.join(10)
            published = [x for x in ids if x != "refused"]
            missing = driver.wait_acked(published, timeout=60)
            time.sleep(2)
            dup = driver.duplicates()
        finally:
            stop.set()
            pings.close()
            driver.close()
            cluster.close()
        fo = [r[1] * 1000 for r in rows]
        gaps = [r[2] * 1000 for r in rows]
        print(f"\nlease {a.lease_s:g} s, {a.rate:g} activations/s, {len(rows)} kills of the leader (kill -9):")
        for label, xs in (("failover (kill -> first ack)", fo), ("largest ack gap", gaps),
                          ("largest ping gap", [r[3] * 1000 for r in rows])):
            ordered = sorted(xs)
            p90 = ordered[max(0, math.ceil(0.9 * len(ordered)) - 1)]
            print(f"  {label:<30} min {ordered[0]:6.0f}  median {statistics.median(ordered):6.0f}  p90 {p90:6.0f}  "
                  f"max {ordered[-1]:6.0f} ms")
        print(f"  activations: {len(published)} published, {len(missing)} never answered, {len(dup)} answered "
              f"twice, {ids.count('refused')} refused by the controller (503)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kills", type=int, default=10, help="times the leader is killed")
    ap.add_argument("--rate", type=float, default=20.0, help="activations/s published throughout")
    ap.add_argument("--lease-s", type=float, default=2.0, help="the schedulers' --lease-s")
    ap.add_argument("--steady-s", type=float, default=3.0, help="seconds of steady load before each kill")
    ap.add_argument("--role", choices=["agent"], help=argparse.SUPPRESS)
    ap.add_argument("--redis", help=argparse.SUPPRESS)
    ap.add_argument("--node", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.role == "agent":
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        echo_agent(a.redis, PREFIX, a.node)
        return
    run(a)


if __name__ == "__main__":
    main()
