"""OpenWhisk's status codes, its result limit and an action's default limits are defined once, in :mod:`openwhisk_status`, with
OpenWhisk's numbers.

The import contracts (``pyproject.toml``) keep that module free of imports, so every part can use it;
that no other module writes the codes again is checked here, in the sources.
"""

from __future__ import annotations

import ast
from pathlib import Path

import openwhisk_status
from openwhisk_status import (
    STATUS_APPLICATION_ERROR,
    STATUS_DEVELOPER_ERROR,
    STATUS_SUCCESS,
    STATUS_WHISK_ERROR,
)

ROOT = Path(__file__).resolve().parents[1]
NAMES = {name for name in vars(openwhisk_status) if name.startswith("STATUS_")} | {"MAX_RESULT_BYTES", "DEFAULT_LIMITS"}


def test_the_codes_are_openwhisks():
    """``ActivationResponse``: Success 0, ApplicationError 1, DeveloperError 2, WhiskError 3."""
    assert (STATUS_SUCCESS, STATUS_APPLICATION_ERROR, STATUS_DEVELOPER_ERROR, STATUS_WHISK_ERROR) == (0, 1, 2, 3)
    assert openwhisk_status.STATUS_CODES == (0, 1, 2, 3)


def test_the_result_limit_is_openwhisks():
    """``whisk.activation.payload.max`` (1 MiB) and, for its Kafka messages, that plus
    ``whisk.activation.serdes-overhead`` (6068 B): the producers' ``max.request.size``."""
    from controller_plugin import wire

    assert openwhisk_status.MAX_RESULT_BYTES == 1024 * 1024
    assert wire.MAX_MESSAGE_BYTES == 1_054_644 == openwhisk_status.MAX_RESULT_BYTES + 6068


def test_no_other_module_defines_a_status_code_the_result_limit_or_the_default_limits():
    found = []
    for top in sorted(ROOT.iterdir()):
        if not top.is_dir() or top.name.startswith(".") or top.name == "openwhisk_status":
            continue
        for path in sorted(top.rglob("*.py")):
            for node in ast.parse(path.read_text(encoding="utf-8")).body:
                targets = (node.targets if isinstance(node, ast.Assign)
                           else [node.target] if isinstance(node, ast.AnnAssign) else [])
                found += [f"{path.relative_to(ROOT)}:{node.lineno}: {t.id}"
                          for t in targets if isinstance(t, ast.Name) and t.id in NAMES]
    assert found == []
