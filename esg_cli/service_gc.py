"""The cyclic garbage collector's settings for the long-running services (``esg scheduler``, ``esg agent``).

Each activation leaves short-lived objects behind (decoded messages, records, dicts) that reference
counting frees; what a burst keeps in flight (thousands of activations, each with its run, request
and messages) survives the collector's young-generation passes, which CPython runs every 700
allocations, and is promoted and walked again by the older generations' passes. In a burst of 3,000
activations of a plain action the scheduler spent about a fifth of its CPU in those passes (0.16-0.18
ms per activation with CPython's settings, 0.13-0.14 with these; docs/results/2026-11-28-live-path-runs.md, run P).

:func:`settle` is called once a service has started: what it built by then (modules, plans, clients,
servers) lives as long as the process, and ``gc.freeze`` takes it out of every pass; the young
generation's threshold is raised so that a pass comes every :data:`GEN0_THRESHOLD` allocations. Cycles
are still collected, only less often; the older generations keep CPython's ratios.
"""

from __future__ import annotations

import gc

#: Container allocations (net of those freed) between two young-generation passes (CPython's: 700).
GEN0_THRESHOLD = 50_000


def settle() -> None:
    """Freeze what the process holds now and space the young-generation passes out (see the module)."""
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GEN0_THRESHOLD, older, oldest)
