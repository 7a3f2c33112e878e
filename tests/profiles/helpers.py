"""Shared by the profiler tests: the test actions and a JSON reader."""

from __future__ import annotations

import json
from pathlib import Path

ACTIONS = Path(__file__).parent / "actions"


def read_json(path: Path) -> dict:
    return json.loads(path.read_text())
