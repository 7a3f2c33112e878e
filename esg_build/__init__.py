"""The optional compiled build of the core's hot modules (mypyc), and the guard that keeps it honest.

``python -m esg_build build`` compiles :data:`COMPILED` in place: each module gets a C extension next
to its ``.py`` (Python imports an extension before the source), plus one shared runtime library at the
top level. ``scripts/setup`` runs it when a C compiler and the Python headers are present; otherwise, or
with ``ESG_PURE=1``, the core runs as the pure Python it is (the outputs are the same, only slower).

A compiled module that no longer matches its source would silently run old code, so the build records
a hash of every ``esg/**/*.py`` (:file:`build/mypyc/manifest.json`) and :func:`guard` -- run at every
start of the project's interpreter by the ``esg_build.pth`` file ``scripts/setup`` puts in the venv --
compares it with the sources: when they differ (or ``ESG_PURE=1`` is set) the ``esg`` package is
imported from its ``.py`` files only. A stale build costs speed, never correctness; ``scripts/setup``
rebuilds it.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORE = os.path.join(ROOT, "esg")
BUILD = os.path.join(ROOT, "build", "mypyc")
MANIFEST = os.path.join(BUILD, "manifest.json")
GROUP = "esg_core"
"""The shared runtime library's name (``esg_core__mypyc.*.so`` at the top level)."""

COMPILED = (
    # the kernel: value types, MIG geometry, the cluster index and snapshot, the search, the queues,
    # the emulator's clock and node model
    "esg/model.py",
    "esg/state.py",
    "esg/events.py",
    "esg/mig.py",
    "esg/index.py",
    "esg/cluster.py",
    "esg/search.py",
    "esg/queues.py",
    "esg/emulator/clock.py",
    "esg/emulator/nodes.py",
    # the step and its drivers' hot loop
    "esg/scheduler.py",
    "esg/placement.py",
    "esg/waits.py",
    "esg/dispatch.py",
    "esg/prewarm.py",
    "esg/defaults.py",
    "esg/emulator/runner.py",
    "esg/emulator/metrics.py",
    # the policies and ESG's rules: compiled for speed only (measured: interpreted, the emulator ran at
    # 0.42-0.5x the requests per second)
    "esg/policies/base.py",
    "esg/policies/context.py",
    "esg/policies/placer.py",
    "esg/policies/plan_cache.py",
    "esg/policies/common.py",
    "esg/policies/esg_policy.py",
    "esg/policies/infless.py",
    "esg/policies/orion.py",
    "esg/policies/fastgshare.py",
    "esg/policies/rules/shared.py",
    "esg/policies/rules/jit_prewarm.py",
    "esg/policies/rules/wait_for_busy.py",
    "esg/policies/rules/spare_instances.py",
    "esg/policies/rules/pool_sizing.py",
)
"""The modules compiled, in three groups. The kernel -- value types, MIG geometry, the cluster index and
the snapshot that changes the states it indexes, the configuration search, the AFW queues, the
emulator's clock and node model -- is where the step spends its time on every node and every queued
job. The step and the emulator's loop call into it at every event. The policies and ESG's rules decide,
and would be plain Python a researcher changes but for speed: measured, with them interpreted the
emulator ran at 0.42-0.5x the requests per second of the compiled build (the 16-node heavy replay at
0.42x), as every step asks them about every queue's head. The extension points the rules plug into
(``esg/policies/points.py``: protocols only) and Aquatope's policy (it drives Optuna, off the hot path)
stay pure, like the rest of the core. The classes Python code subclasses (the shared ``Placer``, the
emulation's ``Emulation``, the policies' classes the baselines and tests extend,
``esg_cli.agreement``'s recording emulation) are marked
``@mypyc_attr(allow_interpreted_subclasses=True)``. A compiled class's methods cannot be replaced on an
instance or on the class (compiled callers would keep its own): a test or tool that changes what a
policy does subclasses it. esg/model.py's classes that check their arguments (``Config``, ``App``) take
them untyped in a written-out ``__init__`` and check them before storing them, so a bad one is the same
error compiled or not."""

PURE_ENV = "ESG_PURE"


def sources_hash(root: str = ROOT) -> str:
    """A hash of every source of the ``esg`` package (names and contents): compiled code may inline what
    it imports from the other modules, so any change to any of them makes the build stale."""
    h = hashlib.sha256()
    core = os.path.join(root, "esg")
    for dirpath, dirnames, filenames in os.walk(core):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            if name.endswith(".py"):
                path = os.path.join(dirpath, name)
                h.update(os.path.relpath(path, root).encode())
                with open(path, "rb") as f:
                    h.update(hashlib.sha256(f.read()).digest())
    return h.hexdigest()


def compiled_files(root: str = ROOT) -> list[str]:
    """The compiled extensions present: the core's and the shared runtime library (relative paths)."""
    found = [os.path.relpath(os.path.join(d, n), root)
             for d, _, names in os.walk(os.path.join(root, "esg")) for n in names if _is_extension(n)]
    found += [n for n in os.listdir(root) if n.startswith(GROUP + "__mypyc") and _is_extension(n)]
    return sorted(found)


def _is_extension(name: str) -> bool:
    return name.endswith((".so", ".pyd"))


def read_manifest(root: str = ROOT) -> dict | None:
    try:
        with open(os.path.join(root, "build", "mypyc", "manifest.json"), encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def state(root: str = ROOT) -> tuple[str, str]:
    """(``"none"`` | ``"pure"`` | ``"compiled"`` | ``"stale"``, why) for the checkout at ``root``:
    no compiled file; compiled files present but ``ESG_PURE`` set; a build that matches the sources;
    compiled files that do not (or whose record is gone)."""
    files = compiled_files(root)
    if not files:
        return "none", "no compiled module"
    if os.environ.get(PURE_ENV, "") not in ("", "0"):
        return "pure", f"{PURE_ENV} is set"
    manifest = read_manifest(root)
    if manifest is None:
        return "stale", "compiled modules without a build record"
    if manifest.get("files") != files:
        return "stale", "the compiled files are not those the build made"
    if manifest.get("sources") != sources_hash(root):
        return "stale", "esg/ changed since the build"
    return "compiled", f"{len(manifest.get('modules', []))} modules compiled"


class _SourceOnly:
    """A meta-path finder that imports ``esg``'s submodules from their ``.py`` files, never from a
    compiled extension beside them."""

    def find_spec(self, name: str, path, target=None):  # noqa: ANN001 -- the finder protocol
        if not name.startswith("esg.") or path is None:
            return None
        from importlib.machinery import SOURCE_SUFFIXES, FileFinder, SourceFileLoader

        for entry in path:
            spec = FileFinder(entry, (SourceFileLoader, SOURCE_SUFFIXES)).find_spec(name, target)
            if spec is not None:
                return spec
        return None


class _CopyableFrozen:
    """A meta-path finder that loads the compiled modules as usual (the shared runtime library from the
    checkout's top level, wherever the process runs), then gives each frozen dataclass
    compiled to a native class a ``__reduce__`` that rebuilds it from its fields: mypyc's own restores
    the fields one ``setattr`` at a time, which a frozen dataclass refuses, so ``copy.deepcopy`` and
    ``pickle`` of, e.g., a :class:`esg.cluster.Fit` would fail where the pure core's succeed."""

    def find_spec(self, name: str, path, target=None):  # noqa: ANN001 -- the finder protocol
        from importlib.machinery import EXTENSION_SUFFIXES, PathFinder

        if name == GROUP + "__mypyc":  # the shared runtime library, at the checkout's top level, which
            return PathFinder.find_spec(name, [ROOT])  # need not be on sys.path (an installed project)
        if not name.startswith("esg.") or path is None:
            return None

        spec = PathFinder.find_spec(name, path, target)
        if spec is None or spec.loader is None or not str(spec.origin).endswith(tuple(EXTENSION_SUFFIXES)):
            return spec
        loader = spec.loader
        exec_module = loader.exec_module

        def exec_and_patch(module) -> None:  # noqa: ANN001
            exec_module(module)
            patch_frozen_dataclasses(module)
            # the compiled modules it imported were loaded by the compiled code itself, past this finder
            for other in list(sys.modules.values()):
                if (getattr(other, "__name__", "").startswith("esg.") and other.__name__ not in _PATCHED
                        and str(getattr(other, "__file__", "")).endswith(tuple(EXTENSION_SUFFIXES))):
                    patch_frozen_dataclasses(other)

        loader.exec_module = exec_and_patch  # type: ignore[method-assign]
        return spec


_PATCHED: set = set()
"""The compiled modules :func:`patch_frozen_dataclasses` has seen (their names)."""


def patch_frozen_dataclasses(module) -> None:  # noqa: ANN001
    import dataclasses

    _PATCHED.add(module.__name__)

    for cls in list(vars(module).values()):
        if not (isinstance(cls, type) and cls.__module__ == module.__name__ and dataclasses.is_dataclass(cls)):
            continue
        params = getattr(cls, "__dataclass_params__", None)
        fields = dataclasses.fields(cls)
        if params is None or not params.frozen or "__dict__" in dir(cls) or not all(f.init for f in fields):
            continue
        names = tuple(f.name for f in fields)

        def __reduce__(self, names=names):  # noqa: ANN001, ANN202, N807
            return type(self), tuple(getattr(self, n) for n in names)

        cls.__reduce__ = __reduce__


def force_pure() -> None:
    """Import the core from its sources in this process (before ``esg``'s submodules are imported)."""
    if not any(isinstance(f, _SourceOnly) for f in sys.meta_path):
        sys.meta_path.insert(0, _SourceOnly())


_guarded = False


def guard() -> None:
    """At interpreter start: run the core pure when its compiled modules are stale (saying so, once, on
    stderr) or ``ESG_PURE`` is set; leave everything as is otherwise. Never raises: a guard that broke
    the interpreter would be worse than a slow core. Once per process (a venv's site-packages can be
    processed twice, through ``lib`` and its ``lib64`` link)."""
    global _guarded
    if _guarded:
        return
    _guarded = True
    try:
        kind, why = state()
    except Exception as e:  # noqa: BLE001
        kind, why = "stale", f"cannot check the compiled modules ({e})"
    if kind in ("pure", "stale"):
        force_pure()
    elif kind == "compiled":
        sys.meta_path.insert(0, _CopyableFrozen())
    if kind == "stale":
        print(f"esg: running the core as pure Python: {why} (scripts/setup rebuilds it)", file=sys.stderr)


def write_manifest(modules: list[str], key: str, root: str = ROOT) -> None:
    """Record a finished build: its modules, the sources' hash, the files it made and ``key`` (what
    ``python -m esg_build build`` compares to skip an unchanged build)."""
    os.makedirs(os.path.join(root, "build", "mypyc"), exist_ok=True)
    record = {"modules": modules, "sources": sources_hash(root), "files": compiled_files(root), "key": key}
    with open(os.path.join(root, "build", "mypyc", "manifest.json"), "w", encoding="utf-8") as f:
        json.dump(record, f, indent=1)
