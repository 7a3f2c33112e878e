"""Warm workers pinned to a MIG slice and vCPUs, and the pool that runs batches on them.

A *worker backend* is how a worker process is made; the agent's ``--runner`` flag names it.
``--runner process`` (this module's :class:`ProcessWorker`): a worker is a runtime process -- :mod:`invoker_agent.action_worker` for Python kinds,
``node_runtime.js`` for Node.js kinds (:mod:`invoker_agent.runtimes`) -- in a sandbox of its own
(:mod:`invoker_agent.sandbox`: its own uid and namespaces, no network, the action's memory limit, a
seccomp filter), speaking OpenWhisk's action runtime protocol over HTTP on a Unix socket. Its
environment gets ``CUDA_VISIBLE_DEVICES=MIG-<uuid>`` (empty for CPU-only work, hiding every GPU) and
nothing of the agent's; its processes are pinned to the assigned vCPU ids. A kind the backend has no
runtime for is the developer's error naming it (status 2), never a fault of the invoker.
``--runner docker`` uses :class:`invoker_agent.docker_workers.DockerWorker` behind the same pool.

**Batches.** If the action defines ``main_batch(list_of_args) -> list_of_results`` (``<main>_batch``
for another entry point), a batch is ONE ``/run`` whose value is ``{"__esg_batch__": [args, ...]}``
and whose result is ``{"__esg_batch__": [results, ...]}``, under one time limit for the whole batch.
Otherwise the batch runs as one ``/run`` per request on the same warm worker, each with the action's
time limit. Each request gets its own :class:`RuntimeResult` (OpenWhisk's status codes, :mod:`agent_channel.protocol`).

**Failures never kill the agent.** A time limit exceeded kills the worker (result 2, ``timeout``) and
every process it started; a worker that dies or replies garbage gives result 2 and is replaced on the
next request; an /init failure
(e.g. an import error) gives result 2 naming it, and the pool keeps working.

:class:`WorkerPool` keys warm workers by :class:`WorkerKey` (calling namespace, action, revision, config,
slice UUID),
reuses idle ones, evicts those idle longer than their TTL, and reports which MIG slices are busy (the
reconciler never destroys those). Each worker has its own TTL: the keep-alive of the batch (or
pre-warm) that last left it idle, else the pool's ``idle_ttl_s``. :meth:`WorkerPool.prewarm` starts
and ``/init``-s a worker without running anything, leaving it idle under its keep-alive. A batch may
bring a hook that runs just before its new worker starts (none runs for a warm one): the agent stops
there the idle workers whose GPU memory the new one needs (:meth:`WorkerPool.stop_idle`).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from agent_channel.protocol import RunRequest
from esg.defaults import KEEP_ALIVE_MS
from esg.model import Config
from invoker_agent import scratch
from invoker_agent.action_worker import log_line
from invoker_agent.actions import ActionCode
from invoker_agent.runtime_client import (
    BATCH_KEY,
    SENTINEL,
    RuntimeClient,
    RuntimeCrashed,
    RuntimeResult,
    RuntimeTimeout,
    UnsupportedKind,
    Worker,
    WorkerStartError,
    classify,
    crash_result,
    timeout_result,
)
from invoker_agent.runtimes import runtime_for
from invoker_agent.sandbox import Limits, Mount, kill_tree, pin_tree, sandbox
from invoker_agent.whole_gpu import cuda_device
from openwhisk_status import STATUS_DEVELOPER_ERROR, STATUS_WHISK_ERROR

#: How much of a worker's log one read takes (reads go on while they come back full).
LOG_READ = 1 << 16
#: A worker's log file, once read past this, is emptied (what one run may write is bounded by its
#: sandbox's file-size limit, :class:`invoker_agent.sandbox.Limits`).
LOG_KEEP = 1 << 20
_INHERITED_ENV = ("PATH", "LANG", "LC_ALL", "TZ")
#: The error of a batch or pre-warm whose new worker's start was under way when the pool was shut down.
SHUT_DOWN = "the worker pool was shut down while the worker started"
#: What a worker's MIG slice needs mounted: its device nodes, by MIG UUID (:func:`invoker_agent.sandbox.gpu_devices`).
DeviceLookup = Callable[[str], list[Mount]]


@dataclass(frozen=True)
class WorkerKey:
    """Warm workers are shared only between requests with the same key: as OpenWhisk keys its
    containers, by the calling namespace, the action and its revision (and here the slice), so a worker
    that served one namespace never serves another."""

    action: str                 # fully qualified action name
    revision: str
    config: str                 # e.g. "2c/3g.20gb": vCPUs and MIG profile (any batch size runs on it)
    slice_uuid: str | None      # MIG UUID, None for CPU only
    namespace: str = ""         # the calling namespace (the activation's user's, not the action's)


@dataclass(frozen=True)
class WorkerSpec:
    """Where a worker runs: its vCPU ids and MIG slice."""

    vcpus: tuple[int, ...]
    mig_uuid: str | None = None
    memory_mb: int = 256
    config: Config | None = None
    """The configuration the batch was dispatched with (a timing twin runs by it)."""


def worker_env(spec: WorkerSpec, extra: dict[str, str] | None = None) -> dict[str, str]:
    """A worker's whole environment: a few inherited basics (never a secret of the agent's), its private
    ``/tmp``, GPU visibility and thread counts."""
    env = {k: os.environ[k] for k in _INHERITED_ENV if k in os.environ}
    env.update(HOME="/tmp", TMPDIR="/tmp")          # the sandbox's own, private /tmp
    env["CUDA_VISIBLE_DEVICES"] = cuda_device(spec.mig_uuid)
    env["PYTHONUNBUFFERED"] = "1"
    n = str(max(1, len(spec.vcpus)))
    env.update(OMP_NUM_THREADS=n, MKL_NUM_THREADS=n, OPENBLAS_NUM_THREADS=n)
    env.update(extra or {})
    return env


def check_vcpus(vcpus: tuple[int, ...]) -> None:
    usable = os.sched_getaffinity(0)
    if not vcpus:
        raise WorkerStartError("a worker needs at least one vCPU")
    missing = sorted(set(vcpus) - usable)
    if missing:
        raise WorkerStartError(f"vCPU ids {missing} are not available to this agent (usable: {sorted(usable)})")


class ProcessWorker:
    """A runtime process in a sandbox of its own (``--runner process``, :mod:`invoker_agent.sandbox`),
    reached on a Unix socket in its directory."""

    def __init__(self, spec: WorkerSpec, action: ActionCode | None = None, start_timeout_s: float = 20.0,
                 extra_env: dict[str, str] | None = None, devices: DeviceLookup | None = None) -> None:
        self.runtime = runtime_for(action.kind if action is not None else "python:3")    # UnsupportedKind
        self.spec = spec
        self.start_timeout_s = start_timeout_s
        self.extra_env = dict(extra_env or {})   # e.g. ESG_ACTION_THREADS, set before the worker starts
        self.devices = devices
        self.init_ms: float | None = None
        self.batch_capable = False
        self.proc: subprocess.Popen | None = None
        self.client: RuntimeClient | None = None
        self.uid: int | None = None
        # Owned by this agent: its log (outside the sandbox, written by the worker's inherited descriptor)
        # and ``run/`` for the runtime's socket, the one directory the sandbox shares. If the agent is killed
        # the worker dies with it and the next agent's start, or its next worker's, sweeps the directory.
        self.dir = scratch.make("worker-")
        self.dir.chmod(0o711)           # the worker's uid may pass through to run/, not list or read
        self.run_dir = self.dir / "run"
        self.run_dir.mkdir()
        self.log_path = self.dir / "action.log"
        self._log_offset = 0
        self._log_fd: int | None = None
        self._sandbox = None
        self._lifeline: int | None = None
        """The agent's end of the runtime's lifeline: closed, the runtime exits (:mod:`invoker_agent.sandbox`)."""
        self._closing = threading.Lock()

    def start(self) -> None:
        check_vcpus(self.spec.vcpus)
        box = sandbox()
        limits = Limits(self.spec.memory_mb, self.spec.vcpus)
        env = worker_env(self.spec, self.extra_env)
        devices = self.devices(self.spec.mig_uuid) if self.devices is not None and self.spec.mig_uuid else []
        log = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        try:
            started = box.start(self.runtime.command, self.run_dir, [*self.runtime.mounts, *devices], limits, env,
                                log)
        finally:
            os.close(log)
        self.proc, self.uid, self._lifeline = started.proc, started.uid, started.lifeline
        self._sandbox = box
        ready = self.run_dir / "ready"
        deadline = time.monotonic() + self.start_timeout_s
        while not ready.exists():
            if self.proc.poll() is not None:
                raise WorkerStartError(f"worker exited at start with code {self.proc.returncode}: "
                                       f"{self.log_tail()}")
            if time.monotonic() > deadline:
                self.kill()
                raise WorkerStartError(f"worker not ready after {self.start_timeout_s:.0f} s")
            time.sleep(0.002)
        self.client = RuntimeClient(f"unix:{self.run_dir / 'rt.sock'}")

    def pin(self, vcpus: tuple[int, ...]) -> None:
        if self.proc is not None and vcpus != self.spec.vcpus:
            check_vcpus(vcpus)
            pin_tree(self.proc.pid, vcpus)
            self.spec = WorkerSpec(vcpus, self.spec.mig_uuid, self.spec.memory_mb)

    def init(self, payload: dict[str, Any], timeout_s: float) -> tuple[int, Any]:
        status, body = self.client.post("/init", payload, timeout_s)
        if status == 200 and isinstance(body, dict):
            self.batch_capable = bool(body.get("esg_batch"))
        return status, body

    def run(self, payload: dict[str, Any], timeout_s: float) -> tuple[int, Any]:
        return self.client.post("/run", payload, timeout_s)

    @property
    def last_body(self) -> bytes:
        return self.client.last_body if self.client is not None else b""

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def exit_detail(self) -> str:
        if self.proc is None:
            return "not started"
        try:
            code = self.proc.wait(timeout=0.5)      # a crashed worker is reaped within moments
        except subprocess.TimeoutExpired:
            code = None
        return "still running" if code is None else f"exit code {code}"

    def log_tail(self, n: int = 400) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:].strip()
        except OSError:
            return ""

    def take_logs(self, limit: int = 1000) -> list[str]:
        """Lines the action printed since the last call (activation sentinels dropped, at most ``limit``)."""
        chunks = []
        try:
            if self._log_fd is None:    # kept open: a read per activation, not an open, a seek and a close
                self._log_fd = os.open(self.log_path, os.O_RDONLY | os.O_CLOEXEC)
            while chunk := os.pread(self._log_fd, LOG_READ, self._log_offset):
                chunks.append(chunk)
                self._log_offset += len(chunk)
                if len(chunk) < LOG_READ:
                    break
        except OSError:
            pass
        if self._log_offset > LOG_KEEP:     # read: the file starts again (the worker appends), so what it
            try:                            # prints over its life never fills the disk, only one run can
                os.truncate(self.log_path, 0)
                self._log_offset = 0
            except OSError:
                pass
        data = b"".join(chunks)
        lines = [ln for ln in data.decode(errors="replace").splitlines() if ln != SENTINEL]
        return stamped(lines[-limit:])

    def kill(self) -> None:
        if self.client is not None:
            self.client.close()
        with self._closing:         # two threads may kill it at once (a shutdown, a crash): one closes each
            fds = [fd for fd in (self._log_fd, self._lifeline) if fd is not None]
            self._log_fd = self._lifeline = None
        for fd in fds:
            os.close(fd)
        if self.proc is not None and self.proc.poll() is None:
            # every process of the sandbox is killed here, so none is left when this returns (the kernel's
            # part is asynchronous), not even one bwrap is still creating
            kill_tree(self.proc.pid)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        if self.uid is not None and self._sandbox is not None:
            self._sandbox.uids.give_back(self.uid)
            self.uid = None
        shutil.rmtree(self.dir, ignore_errors=True)


WorkerFactory = Callable[[WorkerSpec, ActionCode], Worker]


def _discard(worker: Worker | None) -> None:
    """A worker that failed to start: whatever it made (its directory, a half-started process) goes."""
    if worker is not None:
        try:
            worker.kill()
        except Exception:  # noqa: BLE001 - clean-up of a worker that is already broken
            pass


@dataclass
class _Entry:
    worker: Worker
    last_used: float
    busy: bool = False
    ttl_s: float | None = None
    """How long it may stay idle (None: the pool's ``idle_ttl_s``)."""
    epoch: int = 0
    """The pool's :attr:`WorkerPool._epoch` when it started (an older one: a shutdown killed it)."""


@dataclass(frozen=True)
class PrewarmOutcome:
    """What a pre-warm did: ``started`` a worker (its cold start ``init_ms``), found one ``warm`` already,
    or failed (``error``); ``reconfigured``: MIG instances created or destroyed for it, in ``reconfig_ms``."""

    started: bool = False
    warm: bool = False
    init_ms: float | None = None
    error: str | None = None
    reconfigured: int = 0
    reconfig_ms: float | None = None

    @property
    def outcome(self) -> str:
        """Its name in a heartbeat (:data:`agent_channel.protocol.PREWARM_OUTCOMES`)."""
        return "failed" if self.error is not None else "warm" if self.warm else "started"


@dataclass
class _Slots:
    entries: list[_Entry] = field(default_factory=list)


class StartLog:
    """Worker starts that load the host (a process or container coming up: an interpreter starting,
    imports, a model loaded), counted so that a batch can tell whether one overlapped its run. Such a
    batch's run time measures the start-up's load as much as its configuration, and is not learned from
    (:meth:`WorkerPool.mark`, :meth:`WorkerPool.starts_since`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.begun = 0
        self.running = 0

    @contextmanager
    def starting(self, loads_host: bool) -> Iterator[None]:
        if not loads_host:
            yield
            return
        with self._lock:
            self.begun += 1
            self.running += 1
        try:
            yield
        finally:
            with self._lock:
                self.running -= 1

    def mark(self) -> tuple[int, int]:
        with self._lock:
            return self.begun, self.running

    def since(self, mark: tuple[int, int]) -> int:
        """Starts that overlapped the span from ``mark`` to now: those running at the mark and those begun since."""
        with self._lock:
            return self.begun - mark[0] + mark[1]


class WorkerPool:
    """Warm workers by :class:`WorkerKey`; runs batches and tracks which MIG slices are busy."""

    def __init__(self, factory: WorkerFactory = ProcessWorker, idle_ttl_s: float = KEEP_ALIVE_MS / 1000,
                 slice_exists: Callable[[str], bool] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.factory = factory
        self.idle_ttl_s = idle_ttl_s
        self.slice_exists = slice_exists
        self.clock = clock
        self._lock = threading.Lock()
        self._workers: dict[WorkerKey, _Slots] = {}
        self._busy: Counter[str] = Counter()
        self.cold_starts = 0
        self._starts = StartLog()
        self._epoch = 0
        """Counts :meth:`shutdown` calls: a worker whose start began before one is killed as its start
        ends (shutdown could not see it), instead of joining a pool nobody will stop again."""

    # --- what the reconciler and heartbeats ask ---------------------------------------------------
    def busy_slices(self) -> set[str]:
        with self._lock:
            return {u for u, n in self._busy.items() if n > 0}

    def warm_count(self, key: WorkerKey | None = None) -> int:
        with self._lock:
            keys = [key] if key is not None else list(self._workers)
            return sum(len(self._workers[k].entries) for k in keys if k in self._workers)

    def idle_counts(self) -> dict[WorkerKey, int]:
        """Idle (not running a batch) live workers by key."""
        with self._lock:
            counts = {k: sum(1 for e in s.entries if not e.busy and e.worker.alive())
                      for k, s in self._workers.items()}
        return {k: n for k, n in counts.items() if n}

    def evict_idle(self) -> int:
        """Kill workers idle longer than their TTL; returns how many went."""
        now = self.clock()
        gone: list[Worker] = []
        with self._lock:
            for key in list(self._workers):
                slots = self._workers[key]
                keep = []
                for e in slots.entries:
                    ttl = self.idle_ttl_s if e.ttl_s is None else e.ttl_s
                    if not e.busy and now - e.last_used > ttl:
                        gone.append(e.worker)
                    else:
                        keep.append(e)
                slots.entries = keep
                if not keep:
                    del self._workers[key]
        for w in gone:
            w.kill()
        return len(gone)

    def evict_slice(self, mig_uuid: str) -> int:
        """Kill idle workers on a MIG slice (before the reconciler destroys it)."""
        gone = []
        with self._lock:
            for key in [k for k in self._workers if k.slice_uuid == mig_uuid]:
                slots = self._workers[key]
                gone += [e.worker for e in slots.entries if not e.busy]
                slots.entries = [e for e in slots.entries if e.busy]
                if not slots.entries:
                    del self._workers[key]
        for w in gone:
            w.kill()
        return len(gone)

    def stop_idle(self, keys: Collection[WorkerKey], count: int) -> int:
        """Kill at most ``count`` idle live workers of ``keys``, those whose keep-alive runs out first
        first (as :meth:`evict_idle` would take them), never a busy one; returns how many went."""
        if count <= 0 or not keys:
            return 0
        with self._lock:
            idle = [(key, e) for key in keys if key in self._workers
                    for e in self._workers[key].entries if not e.busy and e.worker.alive()]
            idle.sort(key=lambda ke: (self._expiry(ke[1]), ke[1].last_used))
            gone = idle[:count]
            for key, e in gone:
                slots = self._workers[key]
                slots.entries.remove(e)
                if not slots.entries:
                    del self._workers[key]
        for _, e in gone:
            e.worker.kill()
        return len(gone)

    def shutdown(self) -> None:
        """Kill every worker, busy or idle; a start under way is killed as it ends. (The pool may be used
        again: ``esg profile`` empties it between configurations.)"""
        with self._lock:
            self._epoch += 1
            workers = [e.worker for s in self._workers.values() for e in s.entries]
            self._workers.clear()
        for w in workers:
            w.kill()

    # --- running ---------------------------------------------------------------------------------
    def _checkout(self, key: WorkerKey) -> _Entry | None:
        """An idle live worker of ``key``, taken: the one that would stay longest (the others keep their
        expiry order, as the emulator takes them)."""
        with self._lock:
            slots = self._workers.get(key)
            if slots is None:
                return None
            now = self.clock()
            # one past its keep-alive is gone, as in the emulator, though eviction waits for a heartbeat
            idle = [e for e in slots.entries if not e.busy and self._expiry(e) > now]
            # whether a worker is alive is a system call (waitpid): asked of the chosen one, and of the
            # next only if that one died, not of every idle worker at every batch
            for e in sorted(idle, key=self._expiry, reverse=True):
                if e.worker.alive():
                    e.busy = True
                    return e
            return None

    def _expiry(self, e: _Entry) -> float:
        return e.last_used + (self.idle_ttl_s if e.ttl_s is None else e.ttl_s)

    def _checkin(self, key: WorkerKey, entry: _Entry, keep: bool, ttl_s: float | None = None) -> None:
        with self._lock:
            entry.busy = False
            if entry.epoch != self._epoch:
                return      # a shutdown killed it, busy or not, and emptied the pool
            entry.last_used = self.clock()
            entry.ttl_s = ttl_s
            slots = self._workers.setdefault(key, _Slots())
            if keep and entry not in slots.entries:
                slots.entries.append(entry)
            elif not keep and entry in slots.entries:
                slots.entries.remove(entry)
                if not slots.entries:
                    del self._workers[key]

    def run(self, key: WorkerKey, spec: WorkerSpec, action: ActionCode, requests: Sequence[RunRequest],
            time_limit_ms: int | None = None, keep_alive_s: float | None = None,
            before_start: Callable[[], None] | None = None) -> list[RuntimeResult]:
        """Run ``requests`` as one batch of ``action`` on a warm (or new) worker; one result each. The
        worker then waits idle for at most ``keep_alive_s`` (None: the pool's ``idle_ttl_s``).
        ``before_start`` is called before each new worker starts (none is called for a warm one)."""
        if not requests:
            return []
        limit_ms = int(time_limit_ms or action.timeout_ms)
        if key.slice_uuid is not None and self.slice_exists is not None and not self.slice_exists(key.slice_uuid):
            return [_fail(r, STATUS_WHISK_ERROR, {"error": f"MIG slice {key.slice_uuid} does not exist on this node"},
                          len(requests)) for r in requests]
        with self._slice_busy(key):
            return self._run(key, spec, action, list(requests), limit_ms, keep_alive_s, before_start)

    def mark(self) -> tuple[int, int]:
        """Where the pool's worker starts stand now, for :meth:`starts_since`."""
        return self._starts.mark()

    def starts_since(self, mark: tuple[int, int]) -> int:
        """Worker starts that loaded the host between :meth:`mark` and now (a batch's own included)."""
        return self._starts.since(mark)

    def prewarm(self, key: WorkerKey, spec: WorkerSpec, action: ActionCode, keep_alive_s: float | None,
                init_env: dict[str, Any] | None = None, time_limit_ms: int | None = None,
                api_key: str | None = None) -> PrewarmOutcome:
        """Start and ``/init`` a worker for ``key`` without running anything; it then waits idle for at
        most ``keep_alive_s`` (None: the pool's ``idle_ttl_s``). An idle worker of ``key`` already there is
        left as it is (``warm``), kept at least that long."""
        with self._lock:
            slots = self._workers.get(key)
            now = self.clock()
            idle = [] if slots is None else [e for e in slots.entries
                                             if not e.busy and e.worker.alive() and self._expiry(e) > now]
            if idle:    # (a stale view: the scheduler places none beside an idle worker) it stays this long
                e = max(idle, key=self._expiry)
                if self._expiry(e) < now + (self.idle_ttl_s if keep_alive_s is None else keep_alive_s):
                    e.last_used, e.ttl_s = now, keep_alive_s
                return PrewarmOutcome(warm=True)
        if key.slice_uuid is not None and self.slice_exists is not None and not self.slice_exists(key.slice_uuid):
            return PrewarmOutcome(error=f"MIG slice {key.slice_uuid} does not exist on this node")
        limit_ms = int(time_limit_ms or action.timeout_ms)
        with self._slice_busy(key):
            entry, init_ms, failure = self._ready_worker(key, spec, action, limit_ms, init_env, api_key)
        if failure is not None:
            return PrewarmOutcome(init_ms=init_ms, error=str(failure[1].get("error", failure[1])))
        if init_ms is None:         # an idle worker appeared meanwhile and was taken: back idle, kept this long
            self._checkin(key, entry, keep=True, ttl_s=keep_alive_s)
            return PrewarmOutcome(warm=True)
        self._checkin(key, entry, keep=True, ttl_s=keep_alive_s)
        return PrewarmOutcome(started=True, init_ms=init_ms)

    @contextmanager
    def _slice_busy(self, key: WorkerKey) -> Iterator[None]:
        """The key's MIG slice counts as busy while the block runs (the reconciler leaves it alone)."""
        with self._lock:
            if key.slice_uuid:
                self._busy[key.slice_uuid] += 1
        try:
            yield
        finally:
            with self._lock:
                if key.slice_uuid:
                    self._busy[key.slice_uuid] -= 1
                    if self._busy[key.slice_uuid] <= 0:
                        del self._busy[key.slice_uuid]

    def _run(self, key, spec, action, requests, limit_ms, keep_alive_s=None,
             before_start=None) -> list[RuntimeResult]:
        results: list[RuntimeResult] = []
        pending = list(requests)
        while pending:
            entry, init_ms, failure = self._ready_worker(key, spec, action, limit_ms, pending[0].init_env,
                                                         pending[0].api_key, before_start)
            if failure is not None:
                code, body, timed_out = failure
                results += [_fail(r, code, body, len(requests), timeout=timed_out, init_ms=init_ms)
                            for r in pending]
                break
            worker = entry.worker
            if worker.batch_capable and len(pending) > 1:
                batch, pending = pending, []
                results += self._run_batch(worker, action, batch, limit_ms, init_ms)
            else:
                req = pending.pop(0)
                results.append(self._run_one(worker, action, req, limit_ms, init_ms, len(requests)))
            alive = worker.alive() and not results[-1].timeout  # a crashed worker was killed
            if not alive:
                worker.kill()
            self._checkin(key, entry, keep=alive, ttl_s=keep_alive_s)
        return results

    def _ready_worker(self, key, spec, action, limit_ms, init_env=None, api_key: str | None = None,
                      before_start: Callable[[], None] | None = None):
        """A warm worker, or a new one started and /init-ed (with its cold start time), or a failure
        (``before_start`` called before a new one is made).
        A new worker's environment is ``init_env`` (the activation's init arguments) and OpenWhisk's
        ``__OW_*`` values -- the key's calling namespace, the caller's ``api_key`` where the action is
        given it -- which win (``ContainerProxy``: ``env ++ owEnv``); a warm one keeps its own."""
        entry = self._checkout(key)
        if entry is not None:
            try:
                entry.worker.pin(spec.vcpus)
            except (OSError, WorkerStartError):
                pass
            if spec.config is not None and hasattr(entry.worker, "config"):
                entry.worker.config = spec.config     # a twin worker times the batch by it
            return entry, None, None
        if before_start is not None:
            before_start()
        t0 = time.perf_counter()
        epoch = self._epoch
        worker = None
        try:
            worker = self.factory(spec, action)
            with self._starts.starting(getattr(worker, "start_loads_host", True)):
                worker.start()
        except UnsupportedKind as e:       # the action's kind: the developer's error, not the invoker's
            _discard(worker)
            return None, None, (STATUS_DEVELOPER_ERROR, {"error": str(e)}, False)
        except WorkerStartError as e:
            _discard(worker)
            return None, None, (STATUS_WHISK_ERROR, {"error": f"could not start a worker: {e}"}, False)
        except Exception as e:  # noqa: BLE001 - never let a runner bug kill the agent
            _discard(worker)
            return None, None, (STATUS_WHISK_ERROR, {"error": f"could not start a worker: {type(e).__name__}: {e}"},
                                False)
        self.cold_starts += 1
        payload = {"value": {"name": action.name, "main": action.main, "binary": action.binary,
                             "code": action.code, "env": {**(init_env or {}), **_init_env(action, key.namespace, api_key)}}}
        try:
            status, body = worker.init(payload, limit_ms / 1000)
        except RuntimeTimeout:
            worker.kill()
            return None, None, (STATUS_DEVELOPER_ERROR, timeout_result(limit_ms), True)
        except RuntimeCrashed as e:
            detail = worker.exit_detail()
            worker.kill()
            return None, None, (STATUS_DEVELOPER_ERROR, crash_result(f"during init: {e}, {detail}"), False)
        init_ms = (time.perf_counter() - t0) * 1000
        if status != 200:
            worker.kill()
            msg = body.get("error") if isinstance(body, dict) else None
            return None, init_ms, (STATUS_DEVELOPER_ERROR, {"error": msg or f"Initialization failed (HTTP {status})."},
                                   False)
        worker.init_ms = init_ms
        entry = _Entry(worker, self.clock(), busy=True, epoch=epoch)
        with self._lock:
            closed = self._epoch != epoch
            if not closed:
                self._workers.setdefault(key, _Slots()).entries.append(entry)
        if closed:      # shut down while it started: the pool's shutdown never saw it
            worker.kill()
            return None, init_ms, (STATUS_WHISK_ERROR, {"error": SHUT_DOWN}, False)
        return entry, init_ms, None

    def _run_one(self, worker, action, req, limit_ms, init_ms, batch_size) -> RuntimeResult:
        t0 = time.perf_counter()
        try:
            status, body = worker.run(_run_body(action, req, req.value), limit_ms / 1000)
        except RuntimeTimeout:
            worker.kill()
            return _fail(req, STATUS_DEVELOPER_ERROR, timeout_result(limit_ms), batch_size, True, init_ms, t0)
        except RuntimeCrashed as e:
            detail = worker.exit_detail()
            worker.kill()
            return _fail(req, STATUS_DEVELOPER_ERROR, crash_result(f"{e}, {detail}"), batch_size, False, init_ms, t0)
        code, result = classify(status, body)
        raw = worker.last_body if code == 0 and result is body else None   # the result's JSON, as sent
        return RuntimeResult(req.activation_id, code, result, _ms(t0), init_ms, False, batch_size,
                         started_ms=_epoch_ms(t0), logs=_take_logs(worker), raw=raw)

    def _run_batch(self, worker, action, batch, limit_ms, init_ms) -> list[RuntimeResult]:
        t0 = time.perf_counter()
        n = len(batch)
        body = _run_body(action, batch[0], {BATCH_KEY: [r.value for r in batch]})
        body["activation_ids"] = [r.activation_id for r in batch]
        try:
            status, reply = worker.run(body, limit_ms / 1000)
        except RuntimeTimeout:
            worker.kill()
            return [_fail(r, STATUS_DEVELOPER_ERROR, timeout_result(limit_ms), n, True, init_ms, t0) for r in batch]
        except RuntimeCrashed as e:
            detail = worker.exit_detail()
            worker.kill()
            return [_fail(r, STATUS_DEVELOPER_ERROR, crash_result(f"{e}, {detail}"), n, False, init_ms, t0) for r in batch]
        items = reply.get(BATCH_KEY) if status == 200 and isinstance(reply, dict) else None
        if not isinstance(items, list) or len(items) != n:
            code, result = classify(status, reply) if status != 200 else (
                STATUS_DEVELOPER_ERROR, {"error": "The batch entry point did not return one result per request."})
            if code == 0:
                code, result = STATUS_DEVELOPER_ERROR, {"error": "The batch reply is malformed."}
            return [_fail(r, code, result, n, False, init_ms, t0) for r in batch]
        out = []
        logs = _take_logs(worker)                 # one /run for the whole batch: each result gets its logs
        for r, item in zip(batch, items, strict=True):
            code, result = classify(200, item) if isinstance(item, dict) else (
                STATUS_DEVELOPER_ERROR, {"error": "The action did not return a dictionary."})
            out.append(RuntimeResult(r.activation_id, code, result, _ms(t0), init_ms, False, n,
                                 started_ms=_epoch_ms(t0), logs=logs))
        return out


def _ms(t0: float) -> float:
    return (time.perf_counter() - t0) * 1000


def _epoch_ms(t0: float | None) -> float:
    """Wall-clock epoch ms of the monotonic instant ``t0`` (now when None)."""
    now = time.time() * 1000
    return now if t0 is None else now - _ms(t0)


_STAMPED = re.compile(r"\A\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z *std(out|err): ")


def stamped(lines: list[str]) -> list[str]:
    """Log lines as OpenWhisk shows them: a worker stamps each line its Python streams print
    (:func:`invoker_agent.action_worker.log_line`); a line written past them (by native code, straight to
    the file descriptor) is stamped now, on ``stdout``."""
    now = time.time_ns()
    return [ln if _STAMPED.match(ln) else log_line("stdout", ln, now) for ln in lines]


def _take_logs(worker: Worker) -> list[str]:
    take = getattr(worker, "take_logs", None)
    try:
        return list(take()) if take is not None else []
    except Exception:  # noqa: BLE001 - logs are best effort
        return []


def _fail(req: RunRequest, code: int, body: dict, batch_size: int, timeout: bool = False,
          init_ms: float | None = None, t0: float | None = None) -> RuntimeResult:
    return RuntimeResult(req.activation_id, code, body, _ms(t0) if t0 else 0.0, init_ms, timeout, batch_size,
                     {"timeout": True} if timeout else {}, started_ms=_epoch_ms(t0))


def provides_api_key(action: ActionCode) -> bool:
    """Whether the action is given its caller's API key: OpenWhisk's ``provide-api-key`` annotation,
    truthy or absent (``ContainerProxy``; the controller adds it as false to actions it creates)."""
    if "provide-api-key" not in action.annotations:
        return True
    value = action.annotations["provide-api-key"]
    if isinstance(value, str):
        return value != ""
    return bool(value) if isinstance(value, bool | int | float) or value is None else True


def _init_env(action: ActionCode, namespace: str = "", api_key: str | None = None) -> dict[str, str]:
    """OpenWhisk's ``__OW_*`` values at ``/init``: ``namespace`` is the caller's (the action's own when
    not said)."""
    env = {"__OW_NAMESPACE": namespace or action.namespace, "__OW_ACTION_NAME": action.fqn,
           "__OW_ACTION_VERSION": action.revision}
    if api_key and provides_api_key(action):
        env["__OW_API_KEY"] = api_key
    return env


def _run_body(action: ActionCode, req: RunRequest, value: Any) -> dict[str, Any]:
    """A ``/run`` body, as ``ContainerProxy`` sends it: ``namespace`` is the caller's."""
    body: dict[str, Any] = {"value": value, "namespace": req.namespace or action.namespace, "action_name": action.fqn,
                            "action_version": action.revision, "activation_id": req.activation_id,
                            "transaction_id": req.transaction_id}
    if req.time_limit_at_ms is not None:
        body["deadline"] = str(int(req.time_limit_at_ms))
    if req.api_key and provides_api_key(action):
        body["api_key"] = req.api_key
    return body
