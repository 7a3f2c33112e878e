"""GPU memory per MIG instance: how many warm workers one instance holds.

A warm worker keeps its GPU memory while it waits idle (its runtime's context, the model's weights, the
caching allocator's peak): a latency table says how much (``gpu_memory_mb`` per row, for that row's
batch, or for the whole table). :meth:`esg.profiles.Profile.worker_memory` gives a worker's figure per
MIG profile, the largest of its rows there (nothing where it is not known, which limits nothing); a row
whose worker does not fit its instance at all is no configuration of the function, and reading a table
leaves it out.

A MIG instance holds the workers whose memory adds up to at most its own (the MIG profile's,
:mod:`esg.mig`). A new worker that an idle instance has no room for goes to another idle instance of its
profile with room, else to a new instance where the GPU has space for one, else starts there only after
idle workers of other functions on that instance are stopped -- the fewest that free enough, those
holding the most memory first (:func:`evictions`). A batch goes to another node rather than evict
(:func:`esg.placement.place`), and a pre-warm never evicts. The same rule binds every policy, the
emulator's nodes and the live agents (the placement names the workers to stop, ``Fit.evict``).
"""

from __future__ import annotations

from collections.abc import Mapping

from esg import mig
from esg.state import NodeState, SliceRef


def instance_memory_mb(gpu_model: str, profile: str) -> int:
    """The GPU memory of one MIG instance of ``profile`` (MiB)."""
    return mig.geometry(gpu_model).profile(profile).memory_mb


def worker_mb(memory: Mapping[str, Mapping[str, int]], function: str, profile: str) -> int:
    """The GPU memory a worker of ``function`` holds on an instance of ``profile`` (0: not known)."""
    per = memory.get(function)
    return 0 if per is None else per.get(profile, 0)


def idle_on(node: NodeState, ref: SliceRef) -> dict[str, int]:
    """The idle workers on instance ``ref`` of ``node``: function -> how many."""
    idle: dict[str, int] = {}
    for (f, r), n in node.idle_workers.items():
        if r == ref and n > 0:
            idle[f] = n
    return idle


def held_mb(idle: Mapping[str, int], memory: Mapping[str, int]) -> int:
    """The memory the idle workers ``idle`` (function -> how many, on one instance) hold."""
    total = 0
    for function, n in idle.items():
        if n > 0:
            total += n * memory.get(function, 0)
    return total


def evictions(idle: Mapping[str, int], memory: Mapping[str, int], capacity_mb: int,
              need_mb: int) -> tuple[tuple[str, int], ...] | None:
    """The idle workers to stop on an instance of ``capacity_mb`` holding ``idle`` (function -> how
    many) so that a new worker of ``need_mb`` fits: () when it fits already, None when it cannot fit even
    on the empty instance. The fewest workers: those holding the most memory first (ties: the function
    with more idle workers there, then by name), as (function, how many) in that order."""
    if need_mb > capacity_mb:
        return None
    free = capacity_mb - held_mb(idle, memory)
    if need_mb <= free:
        return ()
    order = sorted((f for f, n in idle.items() if n > 0 and memory.get(f, 0) > 0),
                   key=lambda f: (-memory[f], -idle[f], f))
    out: list[tuple[str, int]] = []
    for f in order:
        each = memory[f]
        k = min(idle[f], -(-(need_mb - free) // each))
        out.append((f, k))
        free += k * each
        if need_mb <= free:
            return tuple(out)
    return None  # (unreachable: need fits the empty instance)
