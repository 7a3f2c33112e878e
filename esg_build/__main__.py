"""``python -m esg_build build|clean|status``: compile the core's hot modules with mypyc, remove them, or
say which variant runs. ``build`` prints one line and exits 0 whether it compiled or fell back to pure
Python (no C compiler, no Python headers, no mypyc, ``ESG_PURE=1``, or a failed build: its log is
build/mypyc/build.log); it does nothing when the last build still matches the sources."""

from __future__ import annotations

import ast
import hashlib
import os
import re
import shutil
import subprocess
import sys
import sysconfig

from esg_build import (
    BUILD,
    COMPILED,
    GROUP,
    PURE_ENV,
    ROOT,
    compiled_files,
    read_manifest,
    sources_hash,
    state,
    write_manifest,
)

LOG = os.path.join(BUILD, "build.log")
SETUP = f"""
from setuptools import setup
from mypyc.build import mypycify
# type errors count in the compiled modules only (the others stay Python: mypyc just reads their types)
flags = ["--follow-imports=silent", "--cache-dir=build/mypyc/cache"]
setup(name="{GROUP}", ext_modules=mypycify(flags + {list(COMPILED)!r}, opt_level="3", group_name="{GROUP}",
                                          target_dir="build/mypyc/c"),
      script_args=["build_ext", "--inplace", "--build-temp", "build/mypyc/temp", "--build-lib", "build/mypyc/lib"])
"""
# mypyc builds a generator expression it cannot keep lazy as a list: harmless for a finite, side-effect
# free one, wrong for anything else -- so any such warning (or any other) fails the build.
MYPYC_WARNING = re.compile(r"^(esg/\S+:\d+): warning: (.*)$", re.M)


def missing_toolchain() -> str | None:
    """Why the build cannot run here (None: it can)."""
    include = sysconfig.get_path("include")
    if not include or not os.path.exists(os.path.join(include, "Python.h")):
        return "no Python headers"
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(cc) is None:
        return f"no C compiler ({cc})"
    try:
        import mypyc.build  # noqa: F401
        import setuptools  # noqa: F401
    except ImportError:
        return "no mypyc (pip install -e '.[compiled]')"
    return None


NATIVE_DECORATORS = ("dataclass", "mypyc_attr")
"""Class decorators that leave a class native to mypyc (``mypyc_attr`` only sets its compile options)."""


def identity_eq_classes() -> list[str]:
    """Classes of the compiled modules that mypyc would compare by identity: one with a decorator other
    than ``@dataclass`` or ``@mypyc_attr`` is a plain Python class to mypyc, and compiled ``a == b`` on two of them is
    ``a is b`` unless the class body defines ``__eq__`` (mypy 2.4's mypyc)."""
    found = []
    for rel in COMPILED:
        with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
            tree = ast.parse(f.read(), rel)
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            others = [d for d in node.decorator_list
                      if ast.unparse(d.func if isinstance(d, ast.Call) else d) not in NATIVE_DECORATORS]
            defines_eq = any(isinstance(b, ast.FunctionDef) and b.name == "__eq__" for b in node.body)
            if others and not defines_eq:
                found.append(f"{rel}:{node.lineno} {node.name}")
    return found


def build_key() -> str:
    """What a build depends on: the sources, the module list, this package, mypy and Python."""
    import mypy.version

    h = hashlib.sha256()
    for part in (sources_hash(), repr(COMPILED), mypy.version.__version__, sys.version, _own_hash()):
        h.update(part.encode())
    return h.hexdigest()


def _own_hash() -> str:
    h = hashlib.sha256()
    here = os.path.dirname(os.path.abspath(__file__))
    for name in sorted(os.listdir(here)):
        if name.endswith(".py"):
            with open(os.path.join(here, name), "rb") as f:
                h.update(f.read())
    return h.hexdigest()


def clean() -> None:
    clean_outputs_only()
    shutil.rmtree(BUILD, ignore_errors=True)


def build() -> str:
    """Build (or keep) the compiled core; the one line saying which variant runs."""
    if os.environ.get(PURE_ENV, "") not in ("", "0"):
        clean()
        return f"core: pure Python ({PURE_ENV}=1)"
    why = missing_toolchain()
    if why is not None:
        clean()
        return f"core: pure Python ({why})"
    unsafe = identity_eq_classes()
    if unsafe:
        clean()
        return f"core: pure Python ({unsafe[0]}: a decorated class needs its __eq__ written out for mypyc)"
    key = build_key()
    manifest = read_manifest()
    if manifest is not None and manifest.get("key") == key and state()[0] == "compiled":
        return f"core: compiled with mypyc ({len(COMPILED)} modules, up to date)"
    clean()
    os.makedirs(BUILD, exist_ok=True)
    with open(LOG, "w", encoding="utf-8") as log:
        done = subprocess.run([sys.executable, "-c", SETUP], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    with open(LOG, encoding="utf-8") as f:
        warnings = MYPYC_WARNING.findall(f.read())
    if done.returncode != 0 or warnings:
        clean_outputs_only()
        reason = f"mypyc warned at {warnings[0][0]}: {warnings[0][1]}" if warnings else "the build failed"
        return f"core: pure Python ({reason}; log: {os.path.relpath(LOG, ROOT)})"
    write_manifest(sorted(COMPILED), key)
    return f"core: compiled with mypyc ({len(COMPILED)} modules)"


def clean_outputs_only() -> None:
    """Remove the compiled files but keep the log (the build failed: it says why)."""
    for rel in compiled_files():
        os.remove(os.path.join(ROOT, rel))
    for sub in ("c", "temp", "lib"):
        shutil.rmtree(os.path.join(BUILD, sub), ignore_errors=True)


def main(argv: list[str]) -> int:
    if argv == ["build"]:
        print(build())
    elif argv == ["clean"]:
        clean()
    elif argv == ["status"]:
        kind, why = state()
        print(f"{kind}: {why}")
    else:
        print("usage: python -m esg_build build|clean|status", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
