"""What ``esg profile`` measures: resolve ``ACTION_OR_APP`` into functions with code and an input.

- a function name of ``actions/`` (``resnet50``): its action zip, packaged as ``esg deploy``
  sends it to OpenWhisk (``actions/package.py``);
- an app name (``image-classification``, from ``apps/``) or an app file path: all its functions;
- a Python action file path (``my_action.py``): a source action named after the file's stem
  (``my-action`` for ``my_action.py``), run on ``--params`` -- for custom and test actions.

A function's input is deterministic: an entry function gets ``--params`` (default ``{"seed": 0}``);
a downstream function gets what its predecessors produce from those params, computed once locally with
``actions/local_run.py``'s data rules. A batch of ``b`` repeats that input ``b`` times.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from invoker_agent.actions import ActionCode


class TargetError(ValueError):
    """ACTION_OR_APP names nothing profilable, or its input could not be produced."""


@dataclass(frozen=True)
class Target:
    function: str                   # the profile name: the table is <out>/<function>.json
    action: ActionCode
    args: dict[str, Any]            # one request's parameters
    code_sha: str                   # identifies the code measured (a change invalidates partial results)
    params: dict[str, Any]          # the entry parameters the input derives from
    via: tuple[str, ...] = ()       # the predecessors run locally to produce the input

    def args_sha(self) -> str:
        return _sha(json.dumps(self.args, sort_keys=True).encode())

    def args_summary(self) -> dict[str, Any]:
        return {"params": self.params, "via": list(self.via)}


def _catalog():
    try:
        from actions import MODULES
        from actions.package import APPS_DIR, action_zip
    except ImportError as e:
        raise TargetError(f"the actions package is not importable ({e}); run from the repository root "
                          f"with PYTHONPATH=. or install the 'actions' extra") from None
    return MODULES, APPS_DIR, action_zip


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def _action(function: str, code: str, binary: bool, sha: str, timeout_ms: int) -> ActionCode:
    return ActionCode(fqn=f"/_/{function}", revision=sha, kind="python:3", code=code, binary=binary,
                      timeout_ms=timeout_ms)


def _zip_sha(data: bytes) -> str:
    """A hash of the zip's member names and contents (the zip's own bytes carry timestamps)."""
    h = hashlib.sha256()
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        for name in sorted(z.namelist()):
            h.update(name.encode() + b"\0" + z.read(name) + b"\0")
    return h.hexdigest()[:16]


def catalog_action(function: str, timeout_ms: int) -> tuple[ActionCode, str]:
    _modules, _apps, action_zip = _catalog()
    data = action_zip(function)            # the zip esg deploy sends to OpenWhisk
    sha = _zip_sha(data)
    return _action(function, base64.b64encode(data).decode("ascii"), True, sha, timeout_ms), sha


def file_action(path: Path, timeout_ms: int) -> tuple[str, ActionCode, str]:
    text = path.read_text(encoding="utf-8")
    function = path.stem.replace("_", "-")
    sha = _sha(text.encode())
    return function, _action(function, text, False, sha, timeout_ms), sha


def _ancestors(function: str, edges: list[list[str]]) -> set[str]:
    out, todo = set(), [function]
    while todo:
        f = todo.pop()
        for a, b in edges:
            if b == f and a not in out:
                out.add(a)
                todo.append(a)
    return out


def _app_for(function: str) -> dict | None:
    """The first app in apps/ (by file name) that contains ``function``."""
    _modules, apps_dir, _zip = _catalog()
    for path in sorted(Path(apps_dir).glob("*.json")):
        app = json.loads(path.read_text(encoding="utf-8"))
        if function in app.get("functions", []):
            return app
    return None


def inputs_for(functions: list[str], app: dict | None, params: dict) -> dict[str, tuple[dict, tuple[str, ...]]]:
    """Each function's one-request input, and the predecessors run locally (``actions.local_run``) for it."""
    from actions.local_run import function_params, run_app

    out: dict[str, tuple[dict, tuple[str, ...]]] = {}
    for f in functions:
        spec = app if app is not None and f in app["functions"] else _app_for(f)
        edges = spec.get("edges", []) if spec else []
        needed = _ancestors(f, edges)
        if not needed:
            out[f] = params, ()
            continue
        order = [g for g in spec["functions"] if g in needed]
        sub = {"name": f"inputs-of-{f}", "functions": order,
               "edges": [e for e in edges if e[0] in needed and e[1] in needed]}
        run = run_app(sub, params)
        if run.error:
            raise TargetError(f"cannot produce the input of {f}: its predecessor {run.error} failed: "
                              f"{run.results[run.error].get('error')}")
        out[f] = function_params(f, edges, params, run.results), tuple(order)
    return out


def resolve(target: str, params: dict, timeout_ms: int = 60000) -> tuple[str, list[Target]]:
    """(what it is, the targets) for ACTION_OR_APP; :class:`TargetError` naming it when unknown."""
    modules, apps_dir, _zip = _catalog()
    path = Path(target)
    if path.suffix == ".py":
        if not path.is_file():
            raise TargetError(f"action file {target} does not exist")
        function, action, sha = file_action(path, timeout_ms)
        return f"action file {path}", [Target(function, action, params, sha, params)]
    if target in modules:
        functions, app, what = [target], None, f"function {target}"
    else:
        app_path = path if path.suffix == ".json" else Path(apps_dir) / f"{target}.json"
        if not app_path.is_file():
            apps = ", ".join(sorted(p.stem for p in Path(apps_dir).glob("*.json")))
            raise TargetError(f"unknown action or app {target!r}: not a function of actions/ "
                              f"({', '.join(sorted(modules))}), an app ({apps}), an app file or an "
                              f"action .py file")
        from esg_files import load_app
        checked = load_app(app_path)           # EsgError naming the file if malformed
        unknown = [f for f in checked.functions if f not in modules]
        if unknown:
            raise TargetError(f"{app_path}: functions without an action in actions/: {', '.join(unknown)}")
        app = json.loads(app_path.read_text(encoding="utf-8"))
        functions, what = list(checked.functions), f"app {checked.name} ({app_path})"
    inputs = inputs_for(functions, app, params)
    targets = []
    for f in functions:
        action, sha = catalog_action(f, timeout_ms)
        args, via = inputs[f]
        targets.append(Target(f, action, args, sha, params, via))
    return what, targets
