"""ESG_Dispatch: place a batch on a node by walking its configuration priority list.

For each configuration, best first, the nodes are tried in locality order -- the app's *home invoker*
for its entry functions (a stable hash of app and function over the node names), the predecessor's node
for the others, then every other node by free capacity -- and the first node where the configuration
fits is reserved. When no configuration fits anywhere, the batch waits and the caller learns why.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass

from esg.cluster import ClusterSnapshot, Fit
from esg.model import Config


def home_node(app: str, function: str, nodes: Sequence[str]) -> str:
    """A stable choice of node for (app, function): the same on every run and in every process."""
    ordered = sorted(nodes)
    return ordered[zlib.crc32(f"{app}/{function}".encode()) % len(ordered)]


def node_order(snapshot: ClusterSnapshot, preferred: Sequence[str], config: Config,
               idle: dict[str, int] | None = None) -> list[str]:
    """Preferred nodes first (in the given order), then the rest by free capacity for ``config``.

    ``idle`` (idle compute slices per node) may be passed in when the caller already computed it.
    """
    first = [n for n in dict.fromkeys(preferred) if n in snapshot.nodes]
    rest = [n for n in snapshot.nodes if n not in first]
    if config.gpu is None:
        rest.sort(key=lambda n: (-snapshot.nodes[n].vcpus_free, n))
    else:
        if idle is None:
            idle = {n: snapshot.nodes[n].idle_compute_slices() for n in rest}
        rest.sort(key=lambda n: (-idle[n], -snapshot.nodes[n].vcpus_free, n))
    return first + rest


@dataclass(frozen=True)
class Placement:
    config: Config
    fit: Fit


def dispatch(snapshot: ClusterSnapshot, priorities: Sequence[Config], preferred: Sequence[str]
             ) -> Placement | str:
    """The first (configuration, node) that fits, reserved on ``snapshot``; else the reason it waits."""
    if not priorities:
        return "no configuration meets the remaining budget"
    if not snapshot.nodes:
        return "no nodes"
    idle: dict[str, int] | None = None  # the snapshot does not change until the reserve that ends this
    for config in priorities:
        if config.gpu is not None and idle is None:
            idle = {n: s.idle_compute_slices() for n, s in snapshot.nodes.items()}
        for name in node_order(snapshot, preferred, config, idle):
            fit = snapshot.fit(name, config)
            if fit is not None:
                snapshot.reserve(config, fit)
                return Placement(config, fit)
    return f"none of {len(priorities)} configurations fits on any of {len(snapshot.nodes)} nodes"
