"""ESG_Dispatch: place a batch on a node by walking its configuration priority list.

For each configuration, best first, the nodes are tried in locality order -- the app's *home invoker*
for its entry functions (a stable hash of app and function over the node names), the predecessor's node
for the others, then every other node by free capacity -- and the first node where the configuration
fits is reserved. When no configuration fits anywhere, the batch waits and the caller learns why.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache

from esg.cluster import ClusterSnapshot, Fit
from esg.model import Config


def home_node(app: str, function: str, nodes: Sequence[str]) -> str:
    """A stable choice of node for (app, function): the same on every run and in every process."""
    return _home_node(app, function, tuple(nodes))


@lru_cache(maxsize=4096)
def _home_node(app: str, function: str, nodes: tuple[str, ...]) -> str:
    ordered = sorted(nodes)
    return ordered[zlib.crc32(f"{app}/{function}".encode()) % len(ordered)]


def node_order(snapshot: ClusterSnapshot, preferred: Sequence[str], config: Config) -> list[str]:
    """Preferred nodes first (in the given order), then the rest by free capacity for ``config``."""
    return snapshot.route(tuple(preferred), config.gpu is not None)


@dataclass(frozen=True)
class Placement:
    config: Config
    fit: Fit


def dispatch(snapshot: ClusterSnapshot, priorities: Sequence[Config], preferred: Sequence[str],
             no_fit: set[Config] | None = None) -> Placement | str:
    """The first (configuration, node) that fits, reserved on ``snapshot``; else the reason it waits.

    ``no_fit`` remembers, for the rest of one scheduling step, the configurations that fit nowhere:
    within a step capacity only shrinks, so they cannot fit later in it either.
    """
    if not priorities:
        return "no configuration meets the remaining budget"
    if not snapshot.nodes:
        return "no nodes"
    for config, fit in candidate_fits(snapshot, priorities, preferred, no_fit):
        snapshot.reserve(config, fit)
        return Placement(config, fit)
    return f"none of {len(priorities)} configurations fits on any of {len(snapshot.nodes)} nodes"


def candidate_fits(snapshot: ClusterSnapshot, priorities: Sequence[Config], preferred: Sequence[str],
                   no_fit: set[Config] | None = None, function: str | None = None,
                   warm_nodes: frozenset[str] | None = None) -> Iterator[tuple[Config, Fit]]:
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
            if settled is not None and name not in warm_nodes and not (
                    settled.create and gpu in idle_profiles(name)):
                continue
            fit = fit_on(name, config, function)
            if fit is None:
                continue
            found = True
            if warm_nodes is not None and settled is None and fit.warm_worker is None and not fit.destroy:
                settled = fit
            yield config, fit
        if not found:
            nowhere.add(config)
            if no_fit is not None:
                no_fit.add(config)
