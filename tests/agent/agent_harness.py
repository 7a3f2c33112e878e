"""Test helpers for the agent service: the OpenWhisk REST stand-in, the agent as a subprocess, and a
scheduler-side Redis client that sends dispatches and reads results and heartbeats (real redis-server)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import redis

from agent_channel.keys import Keys
from agent_channel.protocol import (
    ActionRef,
    BatchResult,
    DispatchMessage,
    Heartbeat,
    PrewarmMessage,
    RunRequest,
    decode,
    encode,
)
from agent_channel.streams import entries, fields
from esg.cluster import SliceRef
from esg.model import Config
from esg_cli import openwhisk_standin as standin

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


def children(pid: int) -> list[int]:
    """The ids of ``pid``'s child processes (from /proc)."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            out.append(int(d.name))
    return out


ORPHAN = """
from invoker_agent import scratch
d = scratch.make("worker-")
(d / "action.log").write_bytes(b"")
print(d, flush=True)
"""


def orphan_worker_dir() -> Path:
    """A worker directory as an agent killed between making it and starting the worker leaves it: its log
    opened, no worker, and the owner (a process that has ended) not there to remove it."""
    out = subprocess.run([sys.executable, "-c", ORPHAN], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                         capture_output=True, text=True, check=True, timeout=30)
    return Path(out.stdout.strip())


def running(pid: int) -> bool:
    """Whether process ``pid`` is still running (not gone, not a zombie)."""
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class AgentProcess:
    """``esg agent`` as a subprocess, its stderr kept in a file."""

    def __init__(self, tmp: Path, redis_url: str, api: str, node: str, prefix: str, *extra: str) -> None:
        self.log_path = tmp / f"agent-{node}-{uuid.uuid4().hex[:6]}.log"
        self.cmd = [sys.executable, "-m", "esg_cli.main", "agent", "--redis", redis_url, "--openwhisk-api", api,
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

    def kill(self) -> None:
        """``kill -9``: no drain, no final heartbeat. Its workers get their parent-death signal and clean
        up after themselves; this waits (10 s at most) until they have, so the test leaves nothing behind."""
        workers = children(self.proc.pid)
        self.proc.kill()
        self.proc.wait(10)
        deadline = time.monotonic() + 10
        while any(running(pid) for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.05)

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

    def __init__(self, redis_url: str, prefix: str) -> None:
        self.keys = Keys(prefix, f"test{uuid.uuid4().hex[:6]}")
        self.r = redis.Redis.from_url(redis_url)
        self._from: dict[str, str] = {self.keys.hello: "0-0"}      # agents announce themselves there
        self.results: list[BatchResult] = []
        self.heartbeats: list[Heartbeat] = []

    def follow(self, node: str) -> str:
        """Read ``node``'s results (to this side's controller id) and heartbeats; its results stream."""
        for stream in (self.keys.results(node), self.keys.heartbeats(node)):
            self._from.setdefault(stream, "0-0")
        return self.keys.results(node)

    def dispatch(self, node: str, function: str, values: list[dict], *, batch_id: str | None = None,
                 config: Config | None = None, slice_: SliceRef | None = None,
                 destroy: tuple[SliceRef, ...] = (), namespace: str = "guest", timeout_ms: int = 20000,
                 raw: bytes | None = None, return_output: bool = True,
                 inputs: list[tuple] | None = None, api_key: str | None = None,
                 callers: list[str] | None = None, evict: tuple[tuple[str, int], ...] = ()) -> DispatchMessage:
        """Send a batch of ``function`` to ``node``; ``callers``: each request's calling namespace (else
        ``namespace``, the action's)."""
        batch_id = batch_id or f"b-{uuid.uuid4().hex[:10]}"
        config = config or Config(len(values), 1, slice_.profile if slice_ else None)
        now = int(time.time() * 1000)
        msg = DispatchMessage(batch_id, node, "app", function, ActionRef(namespace, function, None,
                                                                         timeout_ms=timeout_ms),
                              config, slice_, destroy,
                              tuple(RunRequest(f"{batch_id}-a{i}", f"tx{i}", v, now + 60000,
                                               callers[i] if callers else namespace,
                                               tuple(inputs[i]) if inputs else (), api_key=api_key)
                                    for i, v in enumerate(values)),
                              self.follow(node), return_output, 60, evict=evict)
        self.send(node, raw if raw is not None else encode(msg))
        return msg

    def prewarm(self, node: str, function: str, config: Config, keep_alive_ms: int = 60000, *,
                slice_: SliceRef | None = None, destroy: tuple[SliceRef, ...] = (), namespace: str = "guest",
                prewarm_id: str | None = None, api_key: str | None = None) -> PrewarmMessage:
        msg = PrewarmMessage(prewarm_id or f"p-{uuid.uuid4().hex[:10]}", node, "app", function,
                             ActionRef(namespace, function), config, slice_, destroy, keep_alive_ms,
                             self.follow(node), api_key=api_key)
        self.send(node, encode(msg))
        return msg

    def send(self, node: str, raw: bytes) -> None:
        self.r.xadd(self.keys.dispatch(node), fields(raw))

    def poll(self, block_ms: int | None = 100) -> None:
        followed = len(self._from)
        for e in entries(self.r.xread(self._from, count=1000, block=block_ms)):
            self._from[e.stream] = e.id
            if e.stream == self.keys.hello:
                self.follow(e.raw.decode())
                continue
            m = decode(e.raw)
            (self.results if isinstance(m, BatchResult) else self.heartbeats).append(m)
        if len(self._from) > followed:
            self.poll(None)             # what the nodes just announced have sent so far (no wait)

    def wait_for(self, what: Callable[[], object], timeout: float, describe: str) -> object:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.poll()
            got = what()
            if got:
                return got
        raise AssertionError(f"timed out after {timeout:.0f} s waiting for {describe}")

    def result(self, batch_id: str, timeout: float = 30.0) -> BatchResult:
        return self.wait_for(lambda: next((r for r in self.results if r.batch_id == batch_id), None),
                             timeout, f"the result of batch {batch_id}")

    def heartbeat(self, node: str, pred: Callable[[Heartbeat], bool] = lambda h: True,
                  timeout: float = 20.0, after: int = 0) -> Heartbeat:
        self.follow(node)
        return self.wait_for(lambda: next((h for h in self.heartbeats[after:] if h.node == node and pred(h)),
                                          None), timeout, f"a matching heartbeat from {node}")

    def pending(self, node: str) -> int:
        """Dispatches the node's agent has taken and not answered."""
        try:
            return int(self.r.xpending(self.keys.dispatch(node), "agents")["pending"])
        except redis.ResponseError:
            return 0

    def close(self) -> None:
        self.r.close()
