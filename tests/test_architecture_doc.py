"""docs/architecture.md's table of the parts ("may import") is checked, not written.

Three things must say the same: the table, the import contracts of ``pyproject.toml`` (which
``lint-imports`` enforces) and the real import graph (grimp, the graph import-linter builds). For every
top-level package of the repository:

- the table has a row, and the packages it may import are exactly those its modules import (a row that
  allows more than the code uses is as wrong as one that allows less);
- the forbidden contracts whose source is that package (and the independence contracts naming it) forbid
  every project package the row leaves out,
  so that a new import the table does not allow fails ``lint-imports`` before it reaches this test.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"
CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
PACKAGES: list[str] = CONFIG["root_packages"]


def documented() -> dict[str, set[str]]:
    """Each package row of the table: package -> the project packages its "may import" cell names."""
    text = DOC.read_text()
    header = re.search(r"^\| package \| holds \| may import \|$", text, re.M)
    assert header, "docs/architecture.md has no table of the parts (| package | holds | may import |)"
    rows: dict[str, set[str]] = {}
    for line in text[header.end():].lstrip("\n").splitlines()[1:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        names = [n.rstrip("/") for n in re.findall(r"`([^`]+)`", cells[0])]
        allowed = {n.rstrip("/") for n in re.findall(r"`([^`]+)`", cells[-1])}
        for name in names:
            if name in PACKAGES:
                rows[name] = allowed & set(PACKAGES)
    return rows


@pytest.fixture(scope="module")
def imports() -> dict[str, set[str]]:
    """The real graph, by top-level package: package -> the other project packages its modules import
    (at module level or inside a function alike)."""
    sys.path.insert(0, str(ROOT))
    try:
        graph = grimp.build_graph(*PACKAGES, cache_dir=None)
    finally:
        sys.path.remove(str(ROOT))
    out: dict[str, set[str]] = {p: set() for p in PACKAGES}
    for module in graph.modules:
        top = module.split(".")[0]
        for imported in graph.find_modules_directly_imported_by(module):
            other = imported.split(".")[0]
            if other != top and other in out:
                out[top].add(other)
    return out


def test_every_top_level_package_is_a_root_package_of_the_contracts():
    on_disk = {p.parent.name for p in ROOT.glob("*/__init__.py")} - {"tests"}   # the tests may import any part
    assert on_disk == set(PACKAGES), (f"packages without contracts: {sorted(on_disk - set(PACKAGES))}; "
                                      f"contracts naming no package: {sorted(set(PACKAGES) - on_disk)}")


def test_the_table_has_a_row_for_every_package():
    assert set(documented()) == set(PACKAGES)


@pytest.mark.parametrize("package", PACKAGES)
def test_the_table_says_what_the_package_imports(package, imports):
    allowed = documented()[package]
    assert imports[package] == allowed, (
        f"docs/architecture.md says {package}/ may import {sorted(allowed) or 'nothing'}, but it imports "
        f"{sorted(imports[package]) or 'nothing'} of the project")


@pytest.mark.parametrize("package", PACKAGES)
def test_the_contracts_forbid_what_the_table_leaves_out(package):
    forbidden = {m for c in CONFIG["contracts"] if c["type"] == "forbidden" and package in c["source_modules"]
                 for m in c["forbidden_modules"]}
    forbidden |= {m for c in CONFIG["contracts"] if c["type"] == "independence" and package in c["modules"]
                  for m in c["modules"] if m != package}
    left_out = set(PACKAGES) - documented()[package] - {package}
    assert left_out <= forbidden, (f"{package}: the table does not allow {sorted(left_out - forbidden)}, "
                                   f"but no import contract whose source is {package} forbids it")
    assert not (forbidden & documented()[package]), f"{package}: a contract forbids what the table allows"
