"""The action kinds ``--runner process`` runs, and the runtime that serves each inside a worker's sandbox.

Each runtime speaks OpenWhisk's action runtime protocol (``/init``, ``/run``, the log sentinels) on a
Unix socket in the sandbox's ``/run/esg`` and writes ``/run/esg/ready`` once it listens:

- ``python:3`` and every ``python:3.x`` kind: :mod:`invoker_agent.action_worker` on this agent's Python
  (its environment's libraries are the actions' libraries; the kind's minor version is not matched);
- ``nodejs:N`` (``nodejs:20``, ``nodejs:18``, the compose file's ``nodejs:14``...): ``node_runtime.js``
  on the machine's Node.js (``node`` on ``PATH``), whatever its version.

Any other kind (``blackbox``, ``java:8``, ``go:1.x`` ...) is refused with :class:`UnsupportedKind`, which the
pool answers as the developer's error naming the kind, never as a fault of the invoker.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from invoker_agent.runtime_client import UnsupportedKind
from invoker_agent.sandbox import RUN_DIR, RUNTIME_DIR, Mount, interpreter_mounts

HERE = Path(__file__).resolve().parent
PYTHON_RUNTIME = HERE / "action_worker.py"
NODE_RUNTIME = HERE / "node_runtime.js"
SOCKET = f"{RUN_DIR}/rt.sock"
READY = f"{RUN_DIR}/ready"
#: What the process runner says it runs, in messages.
KINDS = "python:3, python:3.x and nodejs:N"


@dataclass(frozen=True)
class Runtime:
    """How to start the runtime of one kind in a sandbox: its command (paths as seen inside) and what
    must be mounted for it."""

    family: str
    command: tuple[str, ...]
    mounts: tuple[Mount, ...]


def family_of(kind: str) -> str | None:
    """``python`` or ``nodejs`` for a kind the process runner runs, else None."""
    if kind == "python:3" or kind.startswith("python:3."):
        return "python"
    name, _, version = kind.partition(":")
    if name == "nodejs" and version.isdigit():
        return "nodejs"
    return None


def runtime_for(kind: str) -> Runtime:
    """The runtime of ``kind`` (an empty kind is ``python:3``); :class:`UnsupportedKind` for any other."""
    family = family_of(kind or "python:3")
    if family == "python":
        inside = f"{RUNTIME_DIR}/{PYTHON_RUNTIME.name}"
        return Runtime("python", (sys.executable, "-u", inside, "--socket", SOCKET, "--ready-file", READY),
                       (Mount(str(PYTHON_RUNTIME), inside), *interpreter_mounts()))
    if family == "nodejs":
        node = shutil.which("node") or shutil.which("nodejs")
        if node is None:
            raise UnsupportedKind(f"action kind {kind!r} needs Node.js, which this node does not have "
                                  f"(--runner process runs {KINDS} where the runtime is installed)")
        inside = f"{RUNTIME_DIR}/{NODE_RUNTIME.name}"
        real = os.path.realpath(node)
        prefix = str(Path(real).parent.parent)
        extra = () if real.startswith("/usr/") else (Mount(prefix, prefix),)
        return Runtime("nodejs", (real, inside, SOCKET, READY), (Mount(str(NODE_RUNTIME), inside), *extra))
    raise UnsupportedKind(f"action kind {kind!r} is not supported by this invoker: --runner process runs "
                          f"{KINDS}")
