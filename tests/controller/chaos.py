"""Helpers of the fault tests (``tests/controller/test_failover.py``): schedulers as processes, a TCP proxy in
front of Redis that a test can cut, a watch over the pings the controller sees, load, and the count of what
went wrong -- activations lost, answered twice, run twice."""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from kafka import KafkaConsumer, TopicPartition

from controller_plugin import wire
from esg_cli.controller_driver import DriverError
from tests.controller.conftest import SCHEDULER_KEY

ROOT = Path(__file__).resolve().parents[2]


class Scheduler:
    """``esg scheduler`` as a process (its log in a file), with the settings of a test."""

    def __init__(self, settings, log: Path, redis_url: str | None = None, *extra: str, name: str = "s") -> None:
        self.log_path = log
        env = {**os.environ, "ESG_KAFKA": settings.kafka, "ESG_REDIS": redis_url or settings.redis_url,
               "ESG_OPENWHISK_API": settings.openwhisk_api, "ESG_OPENWHISK_AUTH": SCHEDULER_KEY,
               "ESG_TOPIC_PREFIX": settings.topic_prefix, "ESG_ACTIVATION_STORE": settings.activation_store,
               "ESG_SCHEDULER_NAME": name, "PYTHONPATH": str(ROOT)}
        self._log = open(log, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen([sys.executable, "-m", "esg_cli.main", "scheduler", "--profiles",
                                      str(settings.profiles_dir), *extra], env=env, stdout=self._log,
                                     stderr=subprocess.STDOUT, cwd=ROOT, stdin=subprocess.DEVNULL)

    def text(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def signal(self, sig: signal.Signals) -> None:
        self.proc.send_signal(sig)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)       # a stopped process cannot handle SIGTERM
            self.proc.terminate()
            try:
                self.proc.wait(25)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._log.close()


def answer(response: dict) -> dict:
    """An activation record's response as status and result (OpenWhisk's record adds the result's size)."""
    return {"statusCode": response.get("statusCode"), "result": response.get("result")}


def wait_for(cond, timeout: float, what: str, every: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)


class RedisProxy:
    """A TCP proxy in front of Redis: :meth:`cut` closes every connection and refuses new ones (a
    partition the clients see at once), :meth:`heal` lets them connect again."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self._lock = threading.Lock()
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._cut = False
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._accept, daemon=True),
                         threading.Thread(target=self._pump, daemon=True)]
        for t in self._threads:
            t.start()

    def url(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def _accept(self) -> None:
        while not self._stop.is_set():
            ready, _, _ = select.select([self.listener], [], [], 0.1)
            if not ready:
                continue
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            with self._lock:
                if self._cut:
                    client.close()
                    continue
            try:
                server = socket.create_connection(self.target, timeout=2)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._pairs.append((client, server))

    def _pump(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                socks = {s: (a if s is b else b) for a, b in self._pairs for s in (a, b)}
            if not socks:
                time.sleep(0.01)
                continue
            try:
                ready, _, _ = select.select(list(socks), [], [], 0.05)
            except (OSError, ValueError):
                continue
            for s in ready:
                try:
                    data = s.recv(65536)
                    if data:
                        socks[s].sendall(data)
                        continue
                except OSError:
                    pass
                self._drop(s)

    def _drop(self, s: socket.socket) -> None:
        with self._lock:
            for pair in [p for p in self._pairs if s in p]:
                self._pairs.remove(pair)
                for x in pair:
                    x.close()

    def cut(self) -> None:
        with self._lock:
            self._cut = True
            pairs, self._pairs = self._pairs, []
        for a, b in pairs:
            for x in (a, b):
                try:
                    x.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                x.close()

    def heal(self) -> None:
        with self._lock:
            self._cut = False

    def close(self) -> None:
        self._stop.set()
        self.cut()
        for t in self._threads:
            t.join(timeout=2)
        self.listener.close()


class PingWatch:
    """The pings on ``health`` as the controller sees them: per invoker, the largest gap between two
    (more than 10 s: the controller marked it offline)."""

    def __init__(self, kafka: str, prefix: str) -> None:
        self.gaps: dict[int, float] = {}
        self._last: dict[int, float] = {}
        self._stop = threading.Event()
        self._consumer = KafkaConsumer(bootstrap_servers=kafka, group_id=None, enable_auto_commit=False)
        tp = TopicPartition(wire.health_topic(prefix), 0)
        self._consumer.assign([tp])
        self._consumer.seek_to_end(tp)
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while not self._stop.is_set():
            for records in self._consumer.poll(timeout_ms=100).values():
                for rec in records:
                    try:
                        instance, _ = wire.parse_ping(rec.value)
                    except wire.WireError:
                        continue
                    now = time.monotonic()
                    i = instance.instance
                    if i in self._last:
                        self.gaps[i] = max(self.gaps.get(i, 0.0), now - self._last[i])
                    self._last[i] = now

    def largest_gap(self) -> float:
        """The largest gap so far, the time since each invoker's last ping included."""
        now = time.monotonic()
        return max([*self.gaps.values(), *(now - t for t in self._last.values()), 0.0])

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._consumer.close()


class Load:
    """Calls of ``action`` at ``rate`` per second from a thread, alternating blocking and not, until stopped.
    A call the controller refuses (503: no healthy invoker) is counted in ``refused``: its caller got an
    error at once, nothing was accepted."""

    def __init__(self, driver, action: str, rate: float) -> None:
        self.driver = driver
        self.action = action
        self.rate = rate
        self.ids: list[str] = []
        self.params: dict[str, dict] = {}
        self.refused = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        i = 0
        while not self._stop.wait(1 / self.rate):
            p = {"i": i}
            try:
                aid = self.driver.publish(self.action, p, blocking=i % 2 == 0)
            except DriverError:
                self.refused += 1
                i += 1
                continue
            self.driver.flush()
            self.params[aid] = p
            self.ids.append(aid)
            i += 1

    def stop(self) -> list[str]:
        self._stop.set()
        self._thread.join(timeout=10)
        return list(self.ids)


def ack_gap(driver, ids: Iterable[str]) -> float:
    """The largest gap between two acks of ``ids`` as the controller received them (s)."""
    times = sorted(driver.acks[a].acked_s for a in ids if getattr(driver.acks[a], "acked_s", None))
    return max((b - a for a, b in zip(times, times[1:])), default=0.0)


def faults(driver, ids: list[str], runs: Iterable[str], timeout: float = 60.0) -> dict[str, list[str]]:
    """What went wrong for ``ids``: ``lost`` (never answered), ``duplicated`` (answered twice), ``double``
    (run twice: ``runs`` holds one activation id per run, from every agent)."""
    lost = driver.wait_acked(ids, timeout=timeout)
    time.sleep(1.5)             # late duplicates would show up here
    ran = Counter(runs)
    dup = driver.duplicates()
    return {"lost": lost, "duplicated": [a for a in ids if a in dup], "double": [a for a in ids if ran[a] > 1]}
