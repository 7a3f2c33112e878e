"""The reconciler's crash journal: the MIG step in progress on each GPU, in one JSON file.

An entry is written (temporary file, fsync, atomic rename) *before* each step and cleared after it,
so after a crash the file names exactly the step that may be half done. The file is the agent's alone
(mode 0600), and no worker's sandbox mounts it: no action can rewrite it to keep the agent from
restarting.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any


class Journal:
    """Step-in-progress per GPU. ``path=None`` keeps it in memory only (no crash safety)."""

    def __init__(self, path: str | os.PathLike | None = None) -> None:
        self.path = Path(path) if path is not None else None
        self._lock = threading.Lock()
        self._entries: dict[int, dict[str, Any]] = {}
        if self.path is not None and self.path.exists():
            try:
                data = json.loads(self.path.read_text())
                self._entries = {int(k): v for k, v in data.get("gpus", {}).items()}
            except (OSError, ValueError, AttributeError) as e:
                raise ValueError(f"MIG journal {self.path} is unreadable: {e}") from e

    def entries(self) -> dict[int, dict[str, Any]]:
        with self._lock:
            return {k: dict(v) for k, v in self._entries.items()}

    def write(self, gpu: int, entry: dict[str, Any]) -> None:
        with self._lock:
            self._entries[gpu] = dict(entry)
            self._flush()

    def clear(self, gpu: int) -> None:
        with self._lock:
            if self._entries.pop(gpu, None) is not None:
                self._flush()

    def _flush(self) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
            json.dump({"version": 1, "gpus": {str(k): v for k, v in self._entries.items()}}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
