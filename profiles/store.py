"""The partial results file of a profile run: written after every configuration, atomically.

``<out>/.<function>.partial.json`` holds every configuration measured (or failed) so far, with the key
of what was measured (code, input, runs, GPU model). A rerun with the same key skips those configurations;
a different key (the action changed, other params or runs) starts over. An interrupted run (Ctrl-C,
a crash) leaves the last completely written version: never a half-written file.
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


def group_label(vcpus: int, gpu: str | None) -> str:
    return f"{vcpus}c/{gpu or 'cpu'}"


@dataclass
class PartialStore:
    path: Path
    key: dict[str, Any]
    results: dict[str, dict] = field(default_factory=dict)      # Config.label() -> table entry
    failed: dict[str, dict] = field(default_factory=dict)       # Config.label() -> failure record
    cold_starts: dict[str, dict] = field(default_factory=dict)  # group_label -> cold start record
    output_bytes: int | None = None
    note: str | None = None                                     # why earlier results were not reused

    @classmethod
    def open(cls, path: Path, key: dict[str, Any], fresh: bool = False) -> PartialStore:
        store = cls(path, key)
        if fresh or not path.exists():
            return store
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            store.note = f"{path} is unreadable ({e}): starting over"
            return store
        if data.get("key") != key:
            changed = sorted(k for k in set(key) | set(data.get("key") or {})
                             if (data.get("key") or {}).get(k) != key.get(k))
            store.note = f"{path} was measured with a different {', '.join(changed)}: starting over"
            return store
        store.results = dict(data.get("results") or {})
        store.failed = dict(data.get("failed") or {})
        store.cold_starts = dict(data.get("cold_starts") or {})
        store.output_bytes = data.get("output_bytes")
        return store

    def done(self, config: Config) -> bool:
        return config.label() in self.results or config.label() in self.failed

    def record(self, config: Config, entry: dict) -> None:
        self.results[config.label()] = entry
        self.failed.pop(config.label(), None)
        self.save()

    def record_failure(self, config: Config, error: str) -> None:
        self.failed[config.label()] = {**config.to_dict(), "error": error}
        self.save()

    def save(self) -> None:
        write_json_atomic(self.path, {"key": self.key, "results": self.results, "failed": self.failed,
                                      "cold_starts": self.cold_starts, "output_bytes": self.output_bytes})
