"""The core touches no file: it parses what it is given and :mod:`esg_files` does the reading and writing.

The import contracts (``pyproject.toml``) keep ``os``, ``io``, ``pathlib`` and friends out of ``esg/``; the
built-in ``open`` needs no import, so the sources themselves are read for it here.
"""

from __future__ import annotations

import re
from pathlib import Path

CORE = Path(__file__).resolve().parents[2] / "esg"
FILE_ACCESS = re.compile(r"\bopen\(|\.(read_text|write_text|read_bytes|write_bytes)\(")


def test_no_module_of_the_core_opens_reads_or_writes_a_file():
    found = [f"{path.relative_to(CORE.parent)}:{n}: {line.strip()}"
             for path in sorted(CORE.rglob("*.py"))
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
             if FILE_ACCESS.search(line)]
    assert found == []
