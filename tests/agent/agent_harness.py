"""Test helpers for the agent service: the OpenWhisk REST stand-in, the agent as a subprocess, and a
scheduler-side Kafka client that sends dispatches and reads results and heartbeats (real broker)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from esg.cluster import SliceRef
from esg.model import Config
from esg.protocol import (
    ActionRef,
    DispatchMessage,
    Heartbeat,
    ResultMessage,
    RunRequest,
    decode,
    dispatch_topic,
    encode,
)
from esg_cli import openwhisk_standin as standin
from invoker_agent.kafka_io import ensure_topics

REPO = Path(__file__).resolve().parents[2]
AUTH = "23bc46b1-71f6-4ed5-8c54-816aa4f8c502:test-secret-key-do-not-log"


class OpenWhiskStandIn(standin.OpenWhiskStandIn):
    """The project's REST stand-in, knowing the test key, with a shortcut to add Python source actions."""

    def __init__(self) -> None:
        super().__init__(keys={AUTH: "guest"})

    def add(self, name: str, code: str, namespace: str = "guest", timeout_ms: int = 60000) -> None:
        self.put_action(f"{namespace}/{name}", {
            "exec": {"kind": "python:3", "code": code, "main": "main", "binary": False},
            "limits": {"timeout": timeout_ms, "memory": 256, "logs": 10}})


class AgentProcess:
    """``esg agent`` as a subprocess, its stderr kept in a file."""

    def __init__(self, tmp: Path, kafka: str, api: str, node: str, prefix: str, *extra: str) -> None:
        self.log_path = tmp / f"agent-{node}-{uuid.uuid4().hex[:6]}.log"
        self.cmd = [sys.executable, "-m", "esg_cli.main", "agent", "--kafka", kafka, "--openwhisk-api", api,
                    "--topic-prefix", prefix, "--name", node, "--heartbeat-s", "0.3", "--log-level", "DEBUG", *extra]
        env = {**os.environ, "ESG_OPENWHISK_AUTH": AUTH, "PYTHONPATH": str(REPO)}
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(self.cmd, cwd=REPO, env=env, stdin=subprocess.DEVNULL,
                                     stdout=self.log, stderr=subprocess.STDOUT)

    def output(self) -> str:
        if not self.log.closed:
            self.log.flush()
        return self.log_path.read_text(errors="replace")

    def wait(self, timeout: float) -> int:
        return self.proc.wait(timeout)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.log.close()


class SchedulerSide:
    """What the scheduler does on the wire: dispatch to a node, read results and heartbeats."""

    def __init__(self, kafka: str, prefix: str) -> None:
        self.kafka = kafka
        self.prefix = prefix
        self.results_topic = prefix + "esgresults"
        self.heartbeat_topic = prefix + "esgheartbeat"
        ensure_topics(kafka, [self.results_topic, self.heartbeat_topic])
        self.producer = KafkaProducer(bootstrap_servers=kafka, acks=1)
        self.consumer = KafkaConsumer(bootstrap_servers=kafka, enable_auto_commit=False,
                                      auto_offset_reset="earliest")
        self.consumer.assign([TopicPartition(self.results_topic, 0), TopicPartition(self.heartbeat_topic, 0)])
        self.results: list[ResultMessage] = []
        self.heartbeats: list[Heartbeat] = []

    def dispatch(self, node: str, function: str, values: list[dict], *, batch_id: str | None = None,
                 config: Config | None = None, slice_: SliceRef | None = None,
                 destroy: tuple[SliceRef, ...] = (), namespace: str = "guest", timeout_ms: int = 20000,
                 raw: bytes | None = None) -> DispatchMessage:
        batch_id = batch_id or f"b-{uuid.uuid4().hex[:10]}"
        config = config or Config(len(values), 1, slice_.profile if slice_ else None)
        now = int(time.time() * 1000)
        msg = DispatchMessage(batch_id, node, "app", function, ActionRef(namespace, function, None,
                                                                         timeout_ms=timeout_ms),
                              config, slice_, destroy,
                              tuple(RunRequest(f"{batch_id}-a{i}", f"tx{i}", v, now + 60000, namespace)
                                    for i, v in enumerate(values)))
        self.send(node, raw if raw is not None else encode(msg))
        return msg

    def send(self, node: str, raw: bytes) -> None:
        self.producer.send(dispatch_topic(node, self.prefix), raw).get(timeout=10)

    def poll(self) -> None:
        for recs in self.consumer.poll(timeout_ms=100).values():
            for r in recs:
                m = decode(r.value)
                (self.results if isinstance(m, ResultMessage) else self.heartbeats).append(m)

    def wait_for(self, what: Callable[[], object], timeout: float, describe: str) -> object:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.poll()
            got = what()
            if got:
                return got
        raise AssertionError(f"timed out after {timeout:.0f} s waiting for {describe}")

    def result(self, batch_id: str, timeout: float = 30.0) -> ResultMessage:
        return self.wait_for(lambda: next((r for r in self.results if r.batch_id == batch_id), None),
                             timeout, f"the result of batch {batch_id}")

    def heartbeat(self, node: str, pred: Callable[[Heartbeat], bool] = lambda h: True,
                  timeout: float = 20.0, after: int = 0) -> Heartbeat:
        return self.wait_for(lambda: next((h for h in self.heartbeats[after:] if h.node == node and pred(h)),
                                          None), timeout, f"a matching heartbeat from {node}")

    def close(self) -> None:
        self.consumer.close()
        self.producer.close()
