"""Importing the core changes no process-wide setting: optuna's logging stays as optuna leaves it, and
Aquatope's search quiets optuna only while it runs."""

from __future__ import annotations

import subprocess
import sys

import optuna

from esg.model import App
from esg.policies import PolicyContext, make_policy
from tests.core.helpers import profile

_CHECK = """
import logging, optuna
before = (optuna.logging.get_verbosity(), logging.getLogger("optuna").level)
import esg.policies, esg.policies.aquatope, esg.emulator
after = (optuna.logging.get_verbosity(), logging.getLogger("optuna").level)
assert before == after, (before, after)
"""


def test_importing_the_policies_leaves_logging_alone():
    done = subprocess.run([sys.executable, "-c", _CHECK], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_aquatope_restores_optuna_verbosity_after_its_search():
    app = App("one", 500.0, ("f",), ())
    table = profile("f", [(1, 1, None, 100.0), (1, 2, "1g.5gb", 40.0), (2, 2, "3g.20gb", 30.0)])
    policy = make_policy("aquatope", PolicyContext(apps={"one": app}, profiles={"f": table}))
    old = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.DEBUG)
    try:
        policy.proposer.optimise(app)
        assert optuna.logging.get_verbosity() == optuna.logging.DEBUG
    finally:
        optuna.logging.set_verbosity(old)
