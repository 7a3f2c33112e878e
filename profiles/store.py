"""The partial results file of a profile run: written after every configuration, atomically.

``<out>/.<function>.partial.json`` holds every configuration measured (or failed) so far, with the key
of what was measured (code, input, runs, GPU model). A rerun with the same key skips those configurations;
a different key (the action changed, other params or runs) starts over. An interrupted run (Ctrl-C,
a crash) leaves the last completely written version: never a half-written file.

A finished run writes the table (which records the same key under ``measured.key``) and removes the
partial file; a later run with the same key resumes from the table instead, so extending a grid
measures only the new configurations.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from esg.model import Config


def to_text(data: Any, compact_lists: bool = False) -> str:
    """Indented JSON; with ``compact_lists`` every element of a top-level list stays on one line."""
    if not compact_lists or not isinstance(data, dict):
        return json.dumps(data, indent=1) + "\n"
    parts = []
    for k, v in data.items():
        if isinstance(v, list) and v:
            items = ",\n".join(f"  {json.dumps(x)}" for x in v)
            parts.append(f" {json.dumps(k)}: [\n{items}]")
        else:
            parts.append(f" {json.dumps(k)}: {json.dumps(v)}")
    return "{\n" + ",\n".join(parts) + "\n}\n"


def write_json_atomic(path: Path, data: Any, compact_lists: bool = False) -> None:
    text = to_text(data, compact_lists)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(tmp, 0o644)               # a table is for everyone to read, unlike mkstemp's 0600
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _label(entry: dict) -> str:
    return Config(entry["batch"], entry["vcpus"], entry.get("gpu")).label()


def group_label(vcpus: int, gpu: str | None) -> str:
    return f"{vcpus}c/{gpu or 'cpu'}"


@dataclass
class PartialStore:
    path: Path
    key: dict[str, Any]
    results: dict[str, dict] = field(default_factory=dict)      # Config.label() -> table entry
    failed: dict[str, dict] = field(default_factory=dict)       # Config.label() -> failure record
    cold_starts: dict[str, dict] = field(default_factory=dict)  # group_label -> cold start record
    gpu_memory: dict[str, dict] = field(default_factory=dict)   # group_label -> worker GPU memory record
    output_bytes: int | None = None
    note: str | None = None                                     # why earlier results were not reused

    @classmethod
    def open(cls, path: Path, key: dict[str, Any], fresh: bool = False, table: Path | None = None
             ) -> PartialStore:
        """The results so far: from the partial file, else from a finished ``table`` of the same key."""
        store = cls(path, key)
        if fresh:
            return store
        if not path.exists():
            if table is not None and table.exists():
                store._from_table(table)
            return store
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            store.note = f"{path} is unreadable ({e}): starting over"
            return store
        if not isinstance(data, dict):
            store.note = f"{path} is not a partial results file: starting over"
            return store
        if data.get("key") != key:
            store.note = store._changed(path, data.get("key"))
            return store
        store.results = dict(data.get("results") or {})
        store.failed = dict(data.get("failed") or {})
        store.cold_starts = dict(data.get("cold_starts") or {})
        store.gpu_memory = dict(data.get("gpu_memory") or {})
        store.output_bytes = data.get("output_bytes")
        return store

    def _from_table(self, table: Path) -> None:
        try:
            data = json.loads(table.read_text(encoding="utf-8"))
            measured = data.get("measured") or {}
        except (OSError, ValueError, AttributeError):
            return  # not a table this profiler wrote: measure everything
        if not isinstance(measured, dict) or not isinstance(measured.get("key"), dict):
            return  # no key recorded (an older or hand-made table): measure everything
        if measured["key"] != self.key:
            self.note = self._changed(table, measured["key"])
            return
        try:
            results = {_label(e): e for e in data.get("configs") or []}
            failed = {_label(e): e for e in data.get("failed") or []}
            colds = {group_label(c["vcpus"], c.get("gpu")): c for c in data.get("cold_starts") or []}
            memory = {group_label(m["vcpus"], m.get("gpu")): m for m in data.get("worker_gpu_memory") or []}
        except (KeyError, TypeError, ValueError, AttributeError):
            return  # edited by hand beyond recognition: measure everything
        self.results, self.failed, self.cold_starts, self.gpu_memory = results, failed, colds, memory
        self.output_bytes = data.get("output_bytes")

    def _changed(self, where: Path, old: Any) -> str:
        old = old if isinstance(old, dict) else {}
        changed = sorted(k for k in set(self.key) | set(old) if old.get(k) != self.key.get(k))
        return f"{where} was measured with a different {', '.join(changed)}: starting over"

    def remove(self) -> None:
        """The run is finished and its table written: the partial file has done its job."""
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass

    def done(self, config: Config) -> bool:
        return config.label() in self.results or config.label() in self.failed

    def record(self, config: Config, entry: dict) -> None:
        self.results[config.label()] = entry
        self.failed.pop(config.label(), None)
        self.save()

    def record_failure(self, config: Config, error: str) -> None:
        self.failed[config.label()] = {**config.to_dict(), "error": error}
        self.save()

    def record_gpu_memory(self, vcpus: int, gpu: str, mib: int) -> None:
        """A (vCPUs, GPU) group's worker held ``mib`` MiB of GPU memory; a group measured again (a resumed
        or extended run) keeps the larger figure."""
        label = group_label(vcpus, gpu)
        old = self.gpu_memory.get(label, {}).get("gpu_memory_mb", 0)
        self.gpu_memory[label] = {"vcpus": vcpus, "gpu": gpu, "gpu_memory_mb": max(int(old), mib)}
        self.save()

    def save(self) -> None:
        write_json_atomic(self.path, {"key": self.key, "results": self.results, "failed": self.failed,
                                      "cold_starts": self.cold_starts, "gpu_memory": self.gpu_memory,
                                      "output_bytes": self.output_bytes})
