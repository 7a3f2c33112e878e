"""ESG_Dispatch: place a batch on a node by walking its configuration priority list.

For each configuration, best first, the nodes are tried in locality order -- the app's *home invoker*
for its entry functions (a stable hash of app and function over the node names), the predecessor's node
for the others, then every other node by free capacity -- and the first node where the configuration
fits is reserved. When no configuration fits anywhere, the batch waits and the caller learns why (a
:class:`Wait` with its reason: a placement's answer is a :class:`Placement` or a :class:`Wait`, never a
bare string).
"""

from __future__ import annotations

import zlib
from collections.abc import Collection, Iterator, Sequence, Set
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Final

from esg.cluster import ClusterSnapshot, Fit
from esg.model import Config, Job, set_field
from esg.waits import Until


def home_node(app: str, function: str, nodes: Collection[str]) -> str:
    """A stable choice of node for (app, function): the same on every run and in every process."""
    return _home_node(app, function, tuple(nodes))


@lru_cache(maxsize=4096)
def _home_node(app: str, function: str, nodes: tuple[str, ...]) -> str:
    ordered = sorted(nodes)
    return ordered[zlib.crc32(f"{app}/{function}".encode()) % len(ordered)]


def locality_order(app: str, head: Job, nodes: Collection[str]) -> list[str]:
    """ESG_Dispatch's locality: the predecessor's node for a job with one, else the app's home node for
    the function (nothing when there are no nodes). The rest follow by free capacity (:func:`node_order`)."""
    if not nodes:
        return []
    if head.pred_node is not None:
        return [head.pred_node]
    return [home_node(app, head.function, nodes)]


def node_order(snapshot: ClusterSnapshot, preferred: Sequence[str], config: Config) -> list[str]:
    """Preferred nodes first (in the given order), then the rest by free capacity for ``config``."""
    return snapshot.route(tuple(preferred), config.gpu is not None)


@dataclass(unsafe_hash=True)
class Placement:
    """Where a batch runs: ``config`` on ``fit.node`` (reserved on the snapshot it was found on). A value
    nothing changes once made; a plain dataclass, hashable by value, as the events made per batch are
    (:mod:`esg.events` says why)."""

    config: Config
    fit: Fit

    def __init__(self, config: Config, fit: Fit) -> None:
        # written out (the dataclass keeps it): compiled, the one the dataclass generates stays
        # interpreted, and one of these is made per placement
        self.config = config
        self.fit = fit


@dataclass(frozen=True)
class Wait:
    """The head batch of a queue is not placed now; ``reason`` says why (the scheduler reports it per
    queue in ``StepResult.waiting``) and ``until`` names the events that can end the wait
    (:mod:`esg.waits`; None: any change can, so the head is placed again at the next step)."""

    reason: str
    until: Until | None = field(default=None, compare=False)
    """(Not compared: two waits for one reason are one verdict.)"""

    def __init__(self, reason: str, until: Until | None = None) -> None:
        set_field(self, "reason", reason)  # (written out, as Placement's)
        set_field(self, "until", until)

    def ending(self, until: Until) -> Wait:
        """The same wait, ended by ``until``'s events."""
        return Wait(self.reason, until)


NO_CONFIGURATION: Final = Wait("no configuration meets the remaining budget")
"""The wait of a head with no configuration to try."""


def fits_nowhere(configs: int, nodes: int) -> Wait:
    """The wait of a head none of whose ``configs`` configurations fits on any of ``nodes`` nodes."""
    return Wait(f"none of {configs} configurations fits on any of {nodes} nodes")


def dispatch(snapshot: ClusterSnapshot, priorities: Sequence[Config], preferred: Sequence[str],
             no_fit: set[Config] | None = None) -> Placement | Wait:
    """The first (configuration, node) that fits, reserved on ``snapshot``; else why it waits.

    ``no_fit`` remembers, for the rest of one scheduling step, the configurations that fit nowhere:
    within a step capacity only shrinks, so they cannot fit later in it either.
    """
    if not priorities:
        return NO_CONFIGURATION
    if not snapshot.nodes:
        return Wait("no nodes")
    for config, fit in candidate_fits(snapshot, priorities, preferred, no_fit):
        snapshot.reserve(config, fit)
        return Placement(config, fit)
    return fits_nowhere(len(priorities), len(snapshot.nodes))


def candidate_fits(snapshot: ClusterSnapshot, priorities: Sequence[Config], preferred: Sequence[str],
                   no_fit: set[Config] | None = None, function: str | None = None,
                   warm_nodes: Set[str] | None = None) -> Iterator[tuple[Config, Fit]]:
    """(configuration, node) pairs that fit, in priority then locality order (nothing reserved).

    With ``warm_nodes`` (where idle warm workers of ``function`` wait) the walk of a configuration's
    nodes is cut short: once a node can start it cold without destroying anything, only nodes that could
    start it sooner are tried -- those in ``warm_nodes`` and, if that placement had to create its slice,
    those with an idle slice of the profile already.
    """
    nowhere = snapshot.nowhere
    fit_on = snapshot.fit
    idle_profiles = snapshot.idle_profiles
    for config in priorities:
        if no_fit is not None and config in no_fit:
            continue
        if config in nowhere:  # no node changed since a walk found it fits nowhere
            if no_fit is not None:
                no_fit.add(config)
            continue
        found = False
        settled: Fit | None = None
        gpu = config.gpu
        for name in node_order(snapshot, preferred, config):
            if settled is not None and name not in warm_nodes and not (  # type: ignore[operator]
                    settled.create and gpu in idle_profiles(name)):
                continue
            fit = fit_on(name, config, function)
            if fit is None:
                # the configuration fits here, but the function's worker has no room (its GPU memory):
                # it still counts as fitting somewhere, for every other function
                if function is not None and not found and fit_on(name, config) is not None:
                    found = True
                continue
            found = True
            if (warm_nodes is not None and settled is None and fit.warm_worker is None and not fit.destroy
                    and not fit.evict):
                settled = fit
            yield config, fit
        if not found:
            nowhere.add(config)
            if no_fit is not None:
                no_fit.add(config)
