"""Measure one function over a configuration grid through the invoker agent's process runner.

For each (vCPUs, GPU) group a warm worker is started through :class:`invoker_agent.workers.WorkerPool`
exactly as the agent starts one (``ProcessWorker``: CPU affinity to the first ``vcpus`` vCPU ids,
``CUDA_VISIBLE_DEVICES`` = the MIG slice or empty), with ``ESG_ACTION_THREADS=vcpus``. Its cold start
(worker start + ``/init`` + the first request, which builds the model) is measured once per group. Every
configuration then gets ``warmup`` unmeasured batches and ``runs`` timed batches of ``batch`` requests;
a batch's time is the wall time of the pool's ``run`` call (one ``/run`` with the batch envelope, as
the agent sends it). ``latency_ms`` is the median (p50); ``p95_ms``, ``p99_ms``, the samples and their
spread ``latency_cv`` (sample standard deviation over mean; with two runs or more) are kept: planning at
a percentile (``--slo-percentile``, ``esg.tail``) reads them.

On a GPU, once a group has run its configurations (its largest batch last), the GPU memory its worker
holds is read through NVML (:mod:`profiles.gpu_memory`) and kept per group (``worker_gpu_memory``); the
table's ``gpu_memory_mb`` is the largest of them. A CPU-only run, or one where NVML cannot say, has none.

A configuration whose action answers an error (any status code other than 0) is recorded as failed,
with the error, and the run goes on. Configurations the machine cannot run (more vCPUs than it has,
a MIG profile with no GPU or no such slice) are skipped with a message and listed in the table.
"""

from __future__ import annotations

import datetime as dt
import json
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from agent_channel.protocol import RunRequest
from esg.mig import is_whole
from esg.model import Config
from esg.profiles import profile_from_dict
from invoker_agent.actions import ActionCode
from invoker_agent.runtime_client import RuntimeResult
from invoker_agent.sandbox import tree
from invoker_agent.workers import ProcessWorker, WorkerKey, WorkerPool, WorkerSpec
from profiles.gpu_memory import MemoryProbe, nvml_memory_probe
from profiles.grid import Grid
from profiles.host import Host, library_versions
from profiles.store import PartialStore, group_label, write_json_atomic
from profiles.targets import Target


@dataclass(frozen=True)
class ProfilerSettings:
    grid: Grid
    runs: int
    gpu_model: str                  # canonical esg.mig model name written into the table
    out: Path
    warmup: int = 1
    fresh: bool = False             # ignore earlier partial results
    progress: bool | None = None    # tqdm's disable=None rule: a bar only on a terminal
    stop_after: int | None = None   # test hook: act as Ctrl-C after this many configurations


@dataclass
class Report:
    function: str
    table: Path | None = None
    measured: list[Config] = field(default_factory=list)    # measured in this call
    resumed: list[Config] = field(default_factory=list)     # already in the partial file
    failed: list[dict] = field(default_factory=list)
    skipped: list[dict] = field(default_factory=list)
    batches_run: int = 0                                    # every batch sent in this call

    @property
    def all_failed(self) -> bool:
        return bool(self.failed) and self.table is None


def partial_path(out: Path, function: str) -> Path:
    return out / f".{function}.partial.json"


def _error(results: list[RuntimeResult]) -> str | None:
    for r in results:
        if r.status_code != 0:
            msg = r.result.get("error") if isinstance(r.result, dict) else None
            return f"status {r.status_code}: {msg or r.result}"
    return None


def _skip_reason(config: Config, host: Host) -> tuple[str, str] | None:
    """(what is skipped, why) when this machine cannot run ``config``; one message per such group."""
    if config.gpu is not None:
        if host.gpu is None:
            return f"MIG profile {config.gpu}", f"no NVIDIA GPU on this machine ({host.gpu_error})"
        if not host.gpu.mig_enabled and not is_whole(host.gpu.model):
            return f"MIG profile {config.gpu}", f"MIG mode is off on {host.gpu.name}"
        if not host.gpu.slices.get(config.gpu):
            return (f"MIG profile {config.gpu}", f"no MIG slice of that profile on {host.gpu.name} "
                                                 f"(create one, e.g. nvidia-smi mig -cgi {config.gpu} -C)")
    if config.vcpus > len(host.cpu_ids):
        return f"{config.vcpus} vCPUs", f"needs {config.vcpus} vCPUs, this machine has {len(host.cpu_ids)}"
    return None


class Profiler:
    """Runs one :class:`Target` over ``options.grid`` on ``host``; see the module docstring."""

    def __init__(self, target: Target, options: ProfilerSettings, host: Host,
                 log: Callable[[str], None] | None = None, memory_probe: MemoryProbe | None = None) -> None:
        self.target = target
        self.opt = options
        self.host = host
        self.log = log or (lambda msg: tqdm.write(msg, file=sys.stderr))
        self.report = Report(target.function)
        self._pool: WorkerPool | None = None
        self._group: tuple[int, str | None] | None = None
        # how a GPU group's worker memory is read: NVML where this machine has a GPU, else never
        self._probe = memory_probe or (nvml_memory_probe if host.gpu is not None else None)
        self._workers: list[Any] = []           # the workers started for the current group

    # --- workers -----------------------------------------------------------------------------------
    def _spec(self, config: Config) -> WorkerSpec:
        mig = self.host.gpu.slices[config.gpu][0] if config.gpu else None
        return WorkerSpec(tuple(self.host.cpu_ids[:config.vcpus]), mig, self.target.action.memory_mb)

    def _key(self, config: Config) -> WorkerKey:
        spec = self._spec(config)
        return WorkerKey(self.target.action.fqn, self.target.action.revision,
                         f"c{config.vcpus}-{config.gpu or 'cpu'}", spec.mig_uuid)

    def _run(self, config: Config, batch: int, tag: str) -> tuple[float, list[RuntimeResult]]:
        reqs = [RunRequest(f"profile-{self.target.function}-{tag}-{i}", value=self.target.args) for i in range(batch)]
        t0 = time.perf_counter()
        results = self._pool.run(self._key(config), self._spec(config), self.target.action, reqs)
        self.report.batches_run += 1
        return (time.perf_counter() - t0) * 1000.0, results

    def _enter_group(self, config: Config, store: PartialStore) -> None:
        """A fresh worker for this (vCPUs, GPU) group, its cold start measured if not yet known."""
        group = (config.vcpus, config.gpu)
        if group == self._group:
            return
        self._leave_group(store)
        self._pool.shutdown()          # free the previous group's worker before starting the next
        self._workers = []
        self._group = group
        _ms, results = self._run(Config(1, config.vcpus, config.gpu), 1, f"cold-{group_label(*group)}")
        r = results[0]
        label = group_label(*group)
        if r.ok and r.init_ms is not None and label not in store.cold_starts:
            store.cold_starts[label] = {"vcpus": config.vcpus, "gpu": config.gpu, "init_ms": round(r.init_ms, 3),
                                        "first_run_ms": round(r.duration_ms, 3),
                                        "cold_start_ms": round(r.init_ms + r.duration_ms, 3)}
        if r.ok and store.output_bytes is None:
            store.output_bytes = len(json.dumps(r.result).encode())

    def _new_worker(self, spec: WorkerSpec, action: ActionCode) -> ProcessWorker:
        worker = _worker(spec, action)
        self._workers.append(worker)
        return worker

    def _leave_group(self, store: PartialStore) -> None:
        """The GPU memory the current group's worker holds, once it has run the group's batches."""
        if self._group is None or self._group[1] is None or self._probe is None:
            return
        vcpus, gpu = self._group
        uuid = self._spec(Config(1, vcpus, gpu)).mig_uuid
        procs = [w.proc for w in self._workers if getattr(w, "proc", None) is not None and w.proc.poll() is None]
        if uuid is None or not procs:
            return
        mib = self._probe(uuid, [pid for p in procs for pid in tree(p.pid)])
        if mib:
            store.record_gpu_memory(vcpus, gpu, mib)
        else:
            self.log(f"{self.target.function}: the GPU memory of the {group_label(vcpus, gpu)} worker is not "
                     f"known (NVML reports no figure for its processes)")

    # --- one configuration -------------------------------------------------------------------------
    def _measure(self, config: Config, store: PartialStore) -> None:
        self._enter_group(config, store)
        for w in range(self.opt.warmup):
            _ms, results = self._run(config, config.batch, f"{config.label()}-warmup{w}")
            if (err := _error(results)) is not None:
                return self._fail(config, store, err)
        samples = []
        for i in range(self.opt.runs):
            ms, results = self._run(config, config.batch, f"{config.label()}-run{i}")
            if (err := _error(results)) is not None:
                return self._fail(config, store, err)
            samples.append(ms)
        store.record(config, {**config.to_dict(), **row_figures(samples)})
        self.report.measured.append(config)

    def _fail(self, config: Config, store: PartialStore, error: str) -> None:
        store.record_failure(config, error[:500])
        self.report.failed.append(store.failed[config.label()])
        self.log(f"{self.target.function}: {config.label()} failed: {error[:200]}")

    # --- the whole grid ----------------------------------------------------------------------------
    def run(self) -> Report:
        opt, fn = self.opt, self.target.function
        key = {"function": fn, "code_sha": self.target.code_sha, "params": self.target.args_sha(),
               "runs": opt.runs, "warmup": opt.warmup, "gpu_model": opt.gpu_model}
        store = PartialStore.open(partial_path(opt.out, fn), key, fresh=opt.fresh, table=opt.out / f"{fn}.json")
        if store.note:
            self.log(f"{fn}: {store.note}")
        todo: list[Config] = []
        skipped_groups: dict[tuple[str, str], list[Config]] = {}
        for config in opt.grid.configs():
            skip = _skip_reason(config, self.host)
            if skip is not None:
                self.report.skipped.append({**config.to_dict(), "reason": skip[1]})
                skipped_groups.setdefault(skip, []).append(config)
            elif store.done(config):
                self.report.resumed.append(config)
            else:
                todo.append(config)
        for (what, why), configs in skipped_groups.items():
            self.log(f"{fn}: skipped {len(configs)} configuration(s) of {what}: {why}")
        if self.report.resumed:
            self.log(f"{fn}: resuming: {len(self.report.resumed)} configuration(s) already in {store.path}")
        self._pool = WorkerPool(factory=self._new_worker)
        bar = tqdm(total=len(todo), desc=fn, unit="config", disable=None if opt.progress is None else not opt.progress,
                   file=sys.stderr, leave=True)
        try:
            for n, config in enumerate(todo):
                bar.set_postfix_str(config.label())
                self._measure(config, store)
                bar.update(1)
                if opt.stop_after is not None and n + 1 >= opt.stop_after:
                    raise KeyboardInterrupt
        finally:
            bar.close()
            try:
                self._leave_group(store)
            finally:
                self._pool.shutdown()
        self.report.failed = [store.failed[c.label()] for c in opt.grid.configs() if c.label() in store.failed]
        self._write_table(store, key)
        if self.report.table is not None:
            store.remove()
        return self.report

    def _write_table(self, store: PartialStore, key: dict[str, Any]) -> None:
        configs = [store.results[c.label()] for c in self.opt.grid.configs() if c.label() in store.results]
        if not configs:
            return
        colds = [c["cold_start_ms"] for c in store.cold_starts.values()]
        host = self.host
        table: dict[str, Any] = {
            "function": self.target.function, "gpu_model": self.opt.gpu_model, "configs": configs,
            "cold_start_ms": round(statistics.median(colds), 1) if colds else 0.0,
            "output_bytes": int(store.output_bytes or 0),
        }
        memory = [store.gpu_memory[k] for k in sorted(store.gpu_memory)]
        if memory:
            table["gpu_memory_mb"] = max(m["gpu_memory_mb"] for m in memory)
        table.update({
            "measured": {"host": host.hostname, "cpu": host.cpu, "cpus": len(host.cpu_ids),
                         "gpu": host.gpu.name if host.gpu else None,
                         "gpu_driver": host.gpu.driver if host.gpu else None,
                         "libraries": library_versions(),
                         "date": dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat(),
                         "runner": "process", "runs": self.opt.runs, "warmup": self.opt.warmup,
                         "grid": self.opt.grid.to_dict(), "params": self.target.args_summary(),
                         "code_sha": self.target.code_sha, "percentile": "p50", "key": key},
            "cold_starts": list(store.cold_starts.values()),
        })
        if memory:
            table["worker_gpu_memory"] = memory
        if self.report.failed:
            table["failed"] = self.report.failed
        if self.report.skipped:
            table["skipped"] = self.report.skipped
        path = self.opt.out / f"{self.target.function}.json"
        profile_from_dict(table, str(path))            # what the planner will accept, checked before writing
        write_json_atomic(path, table, compact_lists=True)
        self.report.table = path


def _worker(spec: WorkerSpec, action: ActionCode) -> ProcessWorker:
    """The agent's process worker, with the action's thread count set from the configuration."""
    env = {"ESG_ACTION_THREADS": str(len(spec.vcpus))}
    if spec.mig_uuid is None:
        env["ESG_ACTION_DEVICE"] = "cpu"
    return ProcessWorker(spec, action, extra_env=env)


def row_figures(samples: list[float]) -> dict[str, Any]:
    """A configuration's figures from its timed batches: the median as ``latency_ms`` (and ``p50_ms``),
    ``p95_ms``, ``p99_ms``, ``samples`` (the count), the spread ``latency_cv`` (sample standard deviation
    over mean, with two samples or more) and the samples themselves."""
    p50 = float(np.percentile(samples, 50))
    row: dict[str, Any] = {"latency_ms": round(p50, 3), "p50_ms": round(p50, 3),
                           "p95_ms": round(float(np.percentile(samples, 95)), 3),
                           "p99_ms": round(float(np.percentile(samples, 99)), 3)}
    if len(samples) >= 2:
        row["latency_cv"] = round(statistics.stdev(samples) / statistics.fmean(samples), 4)
    row.update({"samples": len(samples), "samples_ms": [round(s, 3) for s in samples]})
    return row
