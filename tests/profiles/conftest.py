"""Helpers for the profiler tests: run ``esg`` in-process and capture its streams."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from esg_cli.main import main


@dataclass
class Cli:
    code: int
    out: str
    err: str


@pytest.fixture
def esg(capsys):
    def run(*argv: str) -> Cli:
        code = main([str(a) for a in argv])
        cap = capsys.readouterr()
        return Cli(code, cap.out, cap.err)
    return run

