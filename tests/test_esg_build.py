"""The compiled core's guard (esg_build): a build is used only while it matches every source of esg/."""

from __future__ import annotations

import pytest

import esg_build


@pytest.fixture()
def tree(tmp_path, monkeypatch):
    """A checkout with one core module, its compiled extension and the record of that build."""
    monkeypatch.delenv(esg_build.PURE_ENV, raising=False)
    (tmp_path / "esg" / "sub").mkdir(parents=True)
    (tmp_path / "esg" / "__init__.py").write_text("")
    (tmp_path / "esg" / "hot.py").write_text("X = 1\n")
    (tmp_path / "esg" / "sub" / "cold.py").write_text("Y = 2\n")
    (tmp_path / "esg" / "hot.cpython-311-x86_64-linux-gnu.so").write_bytes(b"")
    (tmp_path / f"{esg_build.GROUP}__mypyc.cpython-311-x86_64-linux-gnu.so").write_bytes(b"")
    esg_build.write_manifest(["esg/hot.py"], "key", root=str(tmp_path))
    return tmp_path


def test_a_build_that_matches_the_sources_is_used(tree):
    assert esg_build.state(str(tree))[0] == "compiled"


@pytest.mark.parametrize("change", ["compiled module", "other module", "new module"])
def test_any_change_to_the_core_makes_the_build_stale(tree, change):
    target = {"compiled module": "hot.py", "other module": "sub/cold.py", "new module": "new.py"}[change]
    (tree / "esg" / target).write_text("X = 3\n")
    assert esg_build.state(str(tree)) == ("stale", "esg/ changed since the build")


def test_compiled_files_without_their_record_are_stale(tree):
    (tree / "build" / "mypyc" / "manifest.json").unlink()
    assert esg_build.state(str(tree))[0] == "stale"


def test_a_compiled_file_the_build_did_not_make_is_stale(tree):
    (tree / "esg" / "sub" / "cold.cpython-311-x86_64-linux-gnu.so").write_bytes(b"")
    assert esg_build.state(str(tree))[0] == "stale"


def test_esg_pure_wins_over_a_good_build(tree, monkeypatch):
    monkeypatch.setenv(esg_build.PURE_ENV, "1")
    assert esg_build.state(str(tree))[0] == "pure"


def test_no_compiled_file_no_build(tmp_path):
    (tmp_path / "esg").mkdir()
    (tmp_path / "esg" / "hot.py").write_text("X = 1\n")
    assert esg_build.state(str(tmp_path))[0] == "none"


def test_a_decorated_class_without_its_eq_refuses_the_build(tmp_path, monkeypatch):
    """mypyc compiles ``==`` on such a class to identity: the build must not make it (it falls back to
    pure Python, saying which class)."""
    import esg_build.__main__ as build

    (tmp_path / "esg").mkdir()
    (tmp_path / "esg" / "hot.py").write_text(
        "from dataclasses import dataclass\n\n\n@dataclass(frozen=True)\n@hash_once\nclass Ref:\n    x: int\n\n\n"
        "@dataclass(frozen=True)\n@hash_once\nclass Safe:\n    x: int\n\n    def __eq__(self, other):\n"
        "        return NotImplemented\n\n\n@dataclass\nclass Plain:\n    x: int\n")
    monkeypatch.setattr(build, "ROOT", str(tmp_path))
    monkeypatch.setattr(build, "COMPILED", ("esg/hot.py",))
    assert build.identity_eq_classes() == ["esg/hot.py:6 Ref"]


def test_the_shipped_compiled_modules_have_no_such_class():
    import esg_build.__main__ as build

    assert build.identity_eq_classes() == []


def test_frozen_classes_copy_whichever_module_is_imported_first():
    """A compiled module imported by another compiled one (not through the import system's finders)
    still gets the ``__reduce__`` that lets its frozen dataclasses be copied: ``esg.cluster`` imported
    by way of the emulation's runner, in a fresh interpreter (compiled where the core is built here)."""
    import os
    import subprocess
    import sys

    code = ("import copy, esg.emulator.runner; from esg.cluster import Fit; from esg.policies.context import Choice; "
            "assert copy.deepcopy(Fit('n', None, True)) == Fit('n', None, True); "
            "assert copy.deepcopy(Choice(())) == Choice(()); print(esg.emulator.runner.__file__)")
    env = {**os.environ, "PYTHONPATH": esg_build.ROOT}
    env.pop(esg_build.PURE_ENV, None)
    run = subprocess.run([sys.executable, "-c", code], env=env, cwd=esg_build.ROOT, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
