"""Profile tables (``docs/architecture.md`` §6): per function, the measured latency of each configuration.

A table is one JSON file ``<dir>/<function>.json`` (read by :mod:`esg_files`; :func:`profile_from_dict`
parses its object). Unknown fields are kept (``extra``) and ignored; a malformed table is rejected with
a :class:`ProfileError` naming the file and the field.

Optional spread fields, read only when planning at a latency percentile (:mod:`esg.tail`):
``latency_cv`` (a non-negative number: the run time's coefficient of variation), on the table or on a
row, and a row's measured percentiles ``p<q>_ms`` (a positive number: ``p95_ms``, ``p99_ms``) with the
``samples`` they come from. They are checked here, so a bad one is named when the table is read.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

from esg.errors import MigError, ProfileError
from esg.mig import geometry, unshared
from esg.model import Config


@dataclass(frozen=True)
class ProfileEntry:
    config: Config
    latency_ms: float
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class Profile:
    function: str
    gpu_model: str
    entries: tuple[ProfileEntry, ...]
    cold_start_ms: float = 0.0
    output_bytes: int = 0
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False)
    gpu_memory_mb: int = 0
    """The GPU memory one warm worker of the function holds on its MIG instance (MiB: runtime context,
    weights and the allocator's peak at the table's largest batch); 0: not known, not limited. A row
    may say it for its own batch (its ``gpu_memory_mb``): :meth:`worker_memory` reads those first."""

    def latency(self, config: Config) -> float:
        try:
            return self._latency_index[config]
        except KeyError:
            raise ProfileError(f"profile {self.function!r} has no configuration {config.label()}") from None

    def has(self, config: Config) -> bool:
        """Whether this table holds ``config``."""
        return config in self._latency_index

    def worker_memory(self) -> dict[str, int]:
        """Per MIG profile, the GPU memory a worker of the function holds on an instance of it (MiB): the
        largest row figure on that profile, else the table's; profiles with no figure are left out."""
        return self._worker_memory

    @cached_property
    def _worker_memory(self) -> dict[str, int]:
        found: dict[str, int] = {}
        for e in self.entries:
            gpu = e.config.gpu
            if gpu is not None:
                mb = row_memory_mb(e, self.gpu_memory_mb)
                if mb > found.get(gpu, 0):
                    found[gpu] = mb
        return found

    @cached_property
    def _latency_index(self) -> dict[Config, float]:
        index: dict[Config, float] = {}
        for e in self.entries:
            index.setdefault(e.config, e.latency_ms)
        return index

    @property
    def configs(self) -> tuple[Config, ...]:
        return tuple(e.config for e in self.entries)

    def to_dict(self) -> dict[str, Any]:
        out = dict(self.extra)
        out.update({
            "function": self.function, "gpu_model": self.gpu_model,
            "configs": [{**e.extra, **e.config.to_dict(), "latency_ms": e.latency_ms} for e in self.entries],
            "cold_start_ms": self.cold_start_ms, "output_bytes": self.output_bytes,
        })
        if self.gpu_memory_mb:
            out[GPU_MEMORY_FIELD] = self.gpu_memory_mb
        return out


def median_latency(profile: Profile, even: Literal["upper", "mean"]) -> float:
    """The median of a table's latencies. With an even number of rows ``even`` says which: ``"upper"``,
    the upper of the two middle rows -- the latency of a configuration the table has (the planner's
    estimate of a function, :mod:`esg.slo_split`) -- or ``"mean"``, the two middle rows' mean (the
    statistical median: the reference latency L of ``profiles/tables/a100/SOURCES.md``)."""
    lats = sorted(e.latency_ms for e in profile.entries)
    n = len(lats)
    if n % 2 or even == "upper":
        return lats[n // 2]
    return (lats[n // 2 - 1] + lats[n // 2]) / 2


GPU_MEMORY_FIELD = "gpu_memory_mb"
"""A table's (top level) GPU memory per worker, MiB (:attr:`Profile.gpu_memory_mb`)."""
_TOP_FIELDS = {"function", "gpu_model", "configs", "cold_start_ms", "output_bytes", GPU_MEMORY_FIELD}
_ENTRY_FIELDS = {"batch", "vcpus", "gpu", "latency_ms"}
SPREAD_FIELD = "latency_cv"
"""A table's (top level) or a row's spread: the coefficient of variation of the run time."""
ROW_SAMPLES_FIELD = "samples"
"""How many timed batches a row's figures come from (``esg profile``, learned tables)."""
QUANTILE_FIELD = re.compile(r"^p(\d+(?:\.\d+)?)_ms$")
"""A row's measured percentile of the run time: ``p95_ms``, ``p99_ms``, ``p99.9_ms``."""


def profile_from_dict(data: Any, source: str) -> Profile:
    if not isinstance(data, dict):
        raise ProfileError(f"{source}: a profile table must be a JSON object")
    for key in ("function", "gpu_model", "configs"):
        if key not in data:
            raise ProfileError(f"{source}: missing field {key!r}")
    function, model = data["function"], data["gpu_model"]
    if not isinstance(function, str) or not function:
        raise ProfileError(f"{source}: field 'function' must be a non-empty string")
    if not isinstance(model, str):
        raise ProfileError(f"{source}: field 'gpu_model' must be a string")
    try:
        geo = geometry(model)
    except MigError as exc:
        raise ProfileError(f"{source}: field 'gpu_model': {exc}") from None
    if unshared(geo.model) != geo.model:
        raise ProfileError(f"{source}: field 'gpu_model': a table is measured on the whole GPU alone, "
                           f"{unshared(geo.model)!r}; sharing it between batches is the agents' setting")
    configs = data["configs"]
    if not isinstance(configs, list) or not configs:
        raise ProfileError(f"{source}: field 'configs' must be a non-empty list")
    entries = [_entry(c, i, source, geo) for i, c in enumerate(configs)]
    seen: set[Config] = set()
    for i, e in enumerate(entries):
        if e.config in seen:
            raise ProfileError(f"{source}: configs[{i}] repeats configuration {e.config.label()}")
        seen.add(e.config)
    cold = _number(data.get("cold_start_ms", 0.0), "cold_start_ms", source, allow_zero=True)
    out_bytes = data.get("output_bytes", 0)
    if isinstance(out_bytes, bool) or not isinstance(out_bytes, int) or out_bytes < 0:
        raise ProfileError(f"{source}: field 'output_bytes' must be a non-negative integer")
    memory = data.get(GPU_MEMORY_FIELD, 0)
    if isinstance(memory, bool) or not isinstance(memory, int) or memory < 0:
        raise ProfileError(f"{source}: field {GPU_MEMORY_FIELD!r} must be a non-negative integer (MiB)")
    entries = _held_by_their_instances(entries, memory, geo, source)
    extra = {k: v for k, v in data.items() if k not in _TOP_FIELDS}
    _check_spread(extra, source)
    return Profile(function, geo.model, tuple(entries), cold, out_bytes, extra, memory)


def _entry(c: Any, i: int, source: str, geo) -> ProfileEntry:
    where = f"{source}: configs[{i}]"
    if not isinstance(c, dict):
        raise ProfileError(f"{where} must be an object")
    for key in ("batch", "vcpus", "latency_ms"):
        if key not in c:
            raise ProfileError(f"{where}: missing field {key!r}")
    for key in ("batch", "vcpus"):
        v = c[key]
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise ProfileError(f"{where}: field {key!r} must be a positive integer, got {v!r}")
    gpu = c.get("gpu")
    if gpu is not None:
        if not isinstance(gpu, str):
            raise ProfileError(f"{where}: field 'gpu' must be a MIG profile name, '<MODEL>:whole' or null")
        try:
            geo.profile(gpu)
        except MigError as exc:
            raise ProfileError(f"{where}: field 'gpu': {exc}") from None
    latency = _number(c["latency_ms"], "latency_ms", where)
    extra = {k: v for k, v in c.items() if k not in _ENTRY_FIELDS}
    _check_spread(extra, where)
    mb = extra.get(GPU_MEMORY_FIELD)
    if mb is not None and (isinstance(mb, bool) or not isinstance(mb, int) or mb < 0):
        raise ProfileError(f"{where}: field {GPU_MEMORY_FIELD!r} must be a non-negative integer (MiB)")
    return ProfileEntry(Config(c["batch"], c["vcpus"], gpu), latency, extra)


def row_memory_mb(entry: ProfileEntry, table_mb: int) -> int:
    """A row's worker GPU memory (MiB): its own figure, else the table's (0: not known)."""
    mb = entry.extra.get(GPU_MEMORY_FIELD)
    return mb if isinstance(mb, int) and mb > 0 else table_mb


def _held_by_their_instances(entries: list[ProfileEntry], table_mb: int, geo, source: str) -> list[ProfileEntry]:
    """The rows whose worker fits the GPU memory of their MIG instance: a row whose worker does not is
    no configuration of the function (it cannot run), so it is left out. None left: an error."""
    kept = [e for e in entries if e.config.gpu is None
            or row_memory_mb(e, table_mb) <= geo.profile(e.config.gpu).memory_mb]
    if not kept:
        raise ProfileError(f"{source}: field {GPU_MEMORY_FIELD!r}: no configuration's MIG instance holds "
                           f"a worker's GPU memory")
    return kept


def _check_spread(fields: Mapping[str, Any], where: str) -> None:
    """The spread fields of a table or a row: ``latency_cv`` a non-negative number, ``p<q>_ms`` positive."""
    if SPREAD_FIELD in fields:
        _number(fields[SPREAD_FIELD], SPREAD_FIELD, where, allow_zero=True)
    for name, value in fields.items():
        if QUANTILE_FIELD.match(name):
            _number(value, name, where)


def _number(v: Any, name: str, where: str, allow_zero: bool = False) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0 \
            or (v == 0 and not allow_zero):
        need = "a non-negative" if allow_zero else "a positive"
        raise ProfileError(f"{where}: field {name!r} must be {need} number, got {v!r}")
    return float(v)
