"""The platform's defaults (esg/defaults.py) are defined once and read by every part that uses them:
the scheduler plans with them, the agents keep workers by them, the emulator charges them."""

from __future__ import annotations

import re
from pathlib import Path

from esg.defaults import HOP_MS, KEEP_ALIVE_MS, MIG_RECONFIG_MS

ROOT = Path(__file__).resolve().parent.parent


def test_the_emulator_charges_the_platform_defaults():
    from esg.emulator.config import EmulatorParams

    p = EmulatorParams()
    assert (p.keep_alive_ms, p.hop_ms, p.mig_reconfig_ms) == (KEEP_ALIVE_MS, HOP_MS, MIG_RECONFIG_MS)


def test_the_scheduler_plans_with_them():
    from controller_plugin.settings import SchedulerSettings
    from esg.defaults import StartupCosts
    from esg.policies.context import PolicyContext

    assert SchedulerSettings.__dataclass_fields__["stage_overhead_ms"].default == HOP_MS
    assert StartupCosts().mig_reconfig_ms == MIG_RECONFIG_MS
    assert PolicyContext(apps={}, profiles={}).mig_reconfig_ms == MIG_RECONFIG_MS


def test_the_agent_keeps_idle_workers_by_them():
    from esg_cli.main import build_parser
    from invoker_agent.workers import WorkerPool

    assert WorkerPool().idle_ttl_s * 1000 == KEEP_ALIVE_MS
    args = build_parser().parse_args(["agent"])
    assert args.idle_ttl_s * 1000 == KEEP_ALIVE_MS


def test_no_other_module_writes_the_ten_minute_keep_alive():
    """A second literal is how the figures drifted apart before: the sources spell it once."""
    literal = re.compile(r"\b(600_000|600000)(\.0)?\b|idle_ttl_s: float = 600")
    found = [f"{p.relative_to(ROOT)}:{i}" for part in ("esg", "esg_cli", "controller_plugin", "invoker_agent",
                                                         "agent_channel", "profiles")
             for p in (ROOT / part).rglob("*.py") if p.name != "defaults.py"
             for i, line in enumerate(p.read_text().splitlines(), 1) if literal.search(line)]
    assert not found, f"the keep-alive written again: {found}"
