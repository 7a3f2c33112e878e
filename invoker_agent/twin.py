"""``--runner twin``: workers that take the time the profiles say and run nothing.

Everything else is the real agent's (dispatch stream, MIG reconcile on the backend, warm workers with
keep-alive, vCPU pinning, batches, heartbeats, results, data passing, draining). A twin worker:

* **starts** by waiting the function's cold start (its profile's ``cold_start_ms`` times the emulator's
  ``cold_start_scale``);
* **runs** a batch by waiting the profiled latency of the configuration it was dispatched with (batch
  size, vCPUs, MIG profile) times a log-normal factor of mean 1 (the emulator's ``noise_cv``), drawn
  from the agent's seeded generator, and answers each request with a small deterministic result
  (:func:`twin_output`: the emulator comparing itself with a twin cluster is given those sizes, not the
  profiled ``output_bytes``);
* each MIG instance the agent creates or destroys for a batch takes the emulator's ``mig_reconfig_ms``
  (:attr:`invoker_agent.slices.SliceManager.change_delay_s`).

The same model functions as the emulator (:mod:`esg.timing`), with the same defaults
(:class:`esg.emulator.config.EmulatorParams`), so a twin cluster is the emulated cluster run live. The
function's profile is the one the scheduler uses: the action's ``esg-profile`` annotation, else its name,
read from ``--profiles DIR``. A configuration the profile lacks is the action's error (code 2), named.
"""

from __future__ import annotations

import json
import threading
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from esg.emulator.config import EmulatorParams
from esg.errors import EsgError
from esg.model import Config
from esg.profiles import Profile
from esg.timing import cold_start_ms, lognormal_params
from esg_files import load_profile
from invoker_agent.actions import ActionCode
from invoker_agent.runtime_client import BATCH_KEY, RuntimeTimeout, WorkerStartError
from invoker_agent.workers import WorkerSpec


def twin_output(function: str, config: Config, index: int) -> dict[str, Any]:
    """What a twin worker answers for the ``index``-th request of a batch: a few dozen bytes, whatever the
    profile's ``output_bytes`` (so a twin cluster passes almost no data between its agents)."""
    return {"twin": function, "config": config.label(), "index": index}


class TwinError(EsgError):
    """The twin cannot run (profiles directory missing or unreadable)."""


class TwinProfiles:
    """The profile tables of ``directory`` by name, loaded (and checked) up front."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        if not self.directory.is_dir():
            raise TwinError(f"--profiles: {self.directory} is not a directory")
        self.tables: dict[str, Profile] = {}
        for path in sorted(self.directory.glob("*.json")):
            try:
                self.tables[path.stem] = load_profile(path)
            except EsgError as exc:
                raise TwinError(f"--profiles: {exc}") from None
        if not self.tables:
            raise TwinError(f"--profiles: {self.directory} holds no profile tables (*.json)")

    def of(self, action: ActionCode) -> Profile | None:
        name = action.annotations.get("esg-profile")
        if not isinstance(name, str) or not name:
            name = action.fqn.rsplit("/", 1)[-1]
        return self.tables.get(name)


class TwinClock:
    """The agent's seeded source of execution-time factors (one generator, drawn under a lock)."""

    def __init__(self, params: EmulatorParams, seed: int, node: str) -> None:
        self.params = params
        self._mu, self._sigma = lognormal_params(params.noise_cv)
        self._rng = np.random.default_rng([seed, zlib.crc32(node.encode())])
        self._lock = threading.Lock()

    def factor(self) -> float:
        with self._lock:
            return float(self._rng.lognormal(self._mu, self._sigma))


class TwinWorker:
    """A worker that waits instead of running (see the module docstring)."""

    batch_capable = True
    start_loads_host = False
    """Its start is a wait: a batch running beside it is measured as in the emulator."""

    def __init__(self, spec: WorkerSpec, action: ActionCode, profiles: TwinProfiles, clock: TwinClock,
                 profile_of_slice: Callable[[str], str | None], sleep: Callable[[float], None] = time.sleep) -> None:
        self.spec = spec
        self.action = action
        self.profile = profiles.of(action)
        self.clock = clock
        self.profile_of_slice = profile_of_slice
        self.sleep = sleep
        self.config: Config | None = spec.config
        self.init_ms: float | None = None
        self._alive = False
        self._last = b""
        self._slice_profile: str | None = None
        """Its MIG slice's profile, read once (a worker's slice is part of its key, and never changes)."""

    def start(self) -> None:
        if self.profile is None:
            raise WorkerStartError(f"the twin has no profile for {self.action.fqn} (annotation esg-profile, "
                                   "else the action's name, in --profiles)")
        self.sleep(cold_start_ms(self.profile, self.clock.params.cold_start_scale) / 1000)
        self._alive = True

    def init(self, payload: dict[str, Any], timeout_s: float) -> tuple[int, Any]:
        return 200, {"ok": True, "esg_batch": True}

    def run(self, payload: dict[str, Any], timeout_s: float) -> tuple[int, Any]:
        value = payload.get("value")
        batch = value.get(BATCH_KEY) if isinstance(value, dict) and BATCH_KEY in value else None
        n = len(batch) if isinstance(batch, list) else 1
        config = self._config(n)
        assert self.profile is not None
        try:
            latency = self.profile.latency(config)
        except EsgError as exc:
            return self._reply(502, {"error": f"twin: {exc}"})
        wait_s = latency * self.clock.factor() / 1000
        if wait_s > timeout_s:
            self.sleep(timeout_s)
            raise RuntimeTimeout(f"twin: {latency:.0f} ms profiled is over the time limit")
        self.sleep(wait_s)
        results = [twin_output(self.profile.function, config, i) for i in range(n)]
        return self._reply(200, {BATCH_KEY: results} if batch is not None else results[0])

    def _config(self, n: int) -> Config:
        """The batch's configuration: as dispatched (vCPUs, MIG profile), with the batch's size."""
        vcpus = self.config.vcpus if self.config is not None else len(self.spec.vcpus)
        if self.spec.mig_uuid and self._slice_profile is None:
            self._slice_profile = self.profile_of_slice(self.spec.mig_uuid)
        return Config(n, vcpus, self._slice_profile if self.spec.mig_uuid else None)

    def _reply(self, status: int, body: Any) -> tuple[int, Any]:
        self._last = json.dumps(body, separators=(",", ":")).encode()
        return status, body

    @property
    def last_body(self) -> bytes:
        return self._last

    def alive(self) -> bool:
        return self._alive

    def exit_detail(self) -> str:
        return "twin worker" + ("" if self._alive else " (stopped)")

    def pin(self, vcpus: tuple[int, ...]) -> None:
        self.spec = WorkerSpec(vcpus, self.spec.mig_uuid, self.spec.memory_mb, self.spec.config)

    def take_logs(self, limit: int = 1000) -> list[str]:
        return []

    def kill(self) -> None:
        self._alive = False


class TwinFactory:
    """The pool's worker factory for ``--runner twin``."""

    def __init__(self, profiles: TwinProfiles, clock: TwinClock,
                 profile_of_slice: Callable[[str], str | None] = lambda uuid: None) -> None:
        self.profiles = profiles
        self.clock = clock
        self.profile_of_slice = profile_of_slice

    def __call__(self, spec: WorkerSpec, action: ActionCode) -> TwinWorker:
        return TwinWorker(spec, action, self.profiles, self.clock, self.profile_of_slice)
