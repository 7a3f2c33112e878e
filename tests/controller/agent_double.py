"""A small in-process invoker agent for the scheduler's integration tests (not shipped).

It is the real agent's channel and data plane (``invoker_agent.channel``, ``invoker_agent.data``) on the
real Redis, with the runner replaced: actions are Python callables by fully qualified name (default:
echo the input), so tests need no action code or worker processes. A handler that raises ``TimeoutError``
stands for an action that ran past its time limit: answered as ``esg agent`` answers one (status 2, the
``timeout`` flag, OpenWhisk's message). Heartbeats go to the heartbeat
stream, batches come from the node's dispatch stream, results go to each dispatch's ``reply_to``, and
non-sink outputs are stored and referenced exactly as ``esg agent`` does it. A batch it answers it claims
first, as ``esg agent`` does (``agent_channel/claims.py``): one the scheduler revoked is not run; with
``answering`` off it reads batches and never starts them (a revocation then takes them back).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import redis

from agent_channel import protocol
from agent_channel.keys import Keys
from invoker_agent.channel import AgentChannel
from invoker_agent.data import DataPlane, LocalOutputs, MissingInput

Handler = Callable[[Any], Any]


class AgentDouble:
    def __init__(self, redis_url: str, node: str, prefix: str = "", vcpus: int = 8, memory_mb: int = 2048,
                 handlers: dict[str, Handler] | None = None, heartbeat_s: float = 0.2,
                 gpu_model: str | None = None, run_delay_s: float = 0.0, local_data: bool = True,
                 run_ms: Callable[[protocol.DispatchMessage], float] | None = None,
                 overlapped: Callable[[protocol.DispatchMessage], bool] | None = None) -> None:
        self.node = node
        self.vcpus = vcpus
        self.memory_mb = memory_mb
        self.handlers = dict(handlers or {})
        self.heartbeat_s = heartbeat_s
        self.gpu_model = gpu_model
        self.run_delay_s = run_delay_s
        self.run_ms = run_ms
        """The run time each batch reports (default 0): a model of how long its configuration takes."""
        self.overlapped = overlapped
        """Whether a batch reports that another worker's start overlapped it (default never)."""
        self.batches: list[protocol.DispatchMessage] = []
        self.ran: list[str] = []
        """Every activation it ran, one id per run (a fault test counts runs of the same id)."""
        self.prewarms: list[protocol.PrewarmMessage] = []
        """Pre-warms received (retired at once and otherwise ignored: the double has no workers)."""
        self.answering = True
        self.heartbeating = True
        self._stop = threading.Event()
        self._seq = 0
        self.redis = redis.Redis.from_url(redis_url)
        keys = Keys(prefix)
        self.channel = AgentChannel(self.redis, keys, node)
        self.data = DataPlane(self.redis, keys, LocalOutputs(64 << 20 if local_data else 0), node)
        self._threads = [threading.Thread(target=self._beat, daemon=True),
                         threading.Thread(target=self._serve, daemon=True)]
        for t in self._threads:
            t.start()

    def heartbeat(self) -> protocol.Heartbeat:
        self._seq += 1
        return protocol.Heartbeat(self.node, self.vcpus, self.vcpus, self.memory_mb, self.gpu_model,
                                  seq=self._seq, sent_ms=int(time.time() * 1000))

    def _beat(self) -> None:
        while not self._stop.is_set():
            if self.heartbeating:
                try:
                    self.channel.heartbeat(self.heartbeat())
                except redis.RedisError:    # Redis restarting: as esg agent does, beat again next time
                    pass
            self._stop.wait(self.heartbeat_s)

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                self._serve_once()
            except redis.RedisError:        # Redis restarting: as esg agent does, read again
                self._stop.wait(0.2)

    def _serve_once(self) -> None:
        """One read of the node's stream, its batches run and answered."""
        got = self.channel.take(100, 50)
        out = []
        for e in got:
            msg = protocol.decode(e.raw)
            if isinstance(msg, protocol.PrewarmMessage):
                self.prewarms.append(msg)
                self.channel.drop(e.id)
                continue
            assert isinstance(msg, protocol.DispatchMessage)
            self.batches.append(msg)
            if self.answering:
                if self.channel.claim(msg.batch_id, msg.epoch, msg.data_ttl_s) != "claimed":
                    self.channel.drop(e.id)
                    continue
                self.ran += [r.activation_id for r in msg.requests]
                out.append((e.id, msg, *self.run(msg)))
        if out and self.run_delay_s:
            time.sleep(self.run_delay_s)
        for entry_id, msg, result, writes in out:
            if self.answering:
                self.channel.answer(entry_id, msg.reply_to, result, writes, msg.data_ttl_s)

    def run(self, msg: protocol.DispatchMessage) -> tuple[protocol.BatchResult, list]:
        handler = self.handlers.get(msg.action.path, lambda v: v)
        results = []
        for r, value in zip(msg.requests, self.data.inputs(msg)):
            start = int(time.time() * 1000)
            if isinstance(value, MissingInput):
                results.append(protocol.RunResult(r.activation_id, 3, {"error": value.error}, start, start))
                continue
            timed_out = False
            try:
                value = handler(value)
                code = 1 if isinstance(value, dict) and "error" in value else 0
            except TimeoutError:
                value, code, timed_out = {"error": f"The action exceeded its time limits of "
                                                   f"{msg.action.timeout_ms} milliseconds."}, 2, True
            except Exception as exc:
                value, code = {"error": f"{type(exc).__name__}: {exc}"}, 2
            results.append(protocol.RunResult(r.activation_id, code, value, start, int(time.time() * 1000),
                                              init_ms=5 if len(self.batches) == 1 else None,
                                              logs=(f"ran {msg.function}",), timeout=timed_out))
        results, writes = self.data.outputs(msg, results)
        return protocol.BatchResult(msg.batch_id, self.node, tuple(results), None, msg.function, msg.config,
                                    self.run_ms(msg) if self.run_ms is not None else 0.0,
                                    overlapped_start=self.overlapped is not None and self.overlapped(msg)), writes

    def close(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=5)
        self.redis.close()
