"""What a policy is built from (:class:`PolicyContext`, :class:`FunctionSpec`) and what its proposing part
hands its placer (:class:`Choice`): the types both halves of a policy (:mod:`esg.policies.base`) share.

They sit here, below both the proposing part and the placer (:mod:`esg.policies.placer`), so neither
imports the other; :mod:`esg.policies.base` exports them with the policy interface.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from esg.cost import Prices
from esg.defaults import MIG_RECONFIG_MS
from esg.model import App, Config
from esg.profiles import Profile


@dataclass(frozen=True)
class FunctionSpec:
    """Per-function limits from annotations: ``esg-max-batch`` and ``esg-gpu``."""

    max_batch: int | None = None
    gpu: bool = True

    def allows(self, config: Config) -> bool:
        if self.max_batch is not None and config.batch > self.max_batch:
            return False
        return self.gpu or config.gpu is None


_ANY_FUNCTION: Final = FunctionSpec()
"""The spec of a function without annotations (one, not one per look-up: it is asked at every step)."""


@dataclass(frozen=True)
class PolicyContext:
    """What every policy is built from."""

    apps: Mapping[str, App]
    profiles: Mapping[str, Profile]
    prices: Prices = field(default_factory=Prices)
    specs: Mapping[str, FunctionSpec] = field(default_factory=dict)
    top_k: int = 8
    max_group: int = 3
    seed: int = 0
    mig_reconfig_ms: float = MIG_RECONFIG_MS
    """What one MIG instance created or destroyed costs (the driver's figure; ``docs/mig.md``): the live
    service's learned one once it moved (:meth:`Policy.use_startup_costs
    <esg.policies.base.Policy.use_startup_costs>`)."""
    cold_start_scale: float = 1.0
    """Multiplies the profiles' ``cold_start_ms`` (as the driver does)."""
    stage_overhead_ms: float = 0.0
    """What the driver adds to every batch beyond its run time (the hop to the worker and back)."""
    slo_percentile: float | None = None
    """The run-time percentile ESG_1Q plans with (``--slo-percentile``, :mod:`esg.tail`); None: the
    tables' ``latency_ms``."""

    def spec(self, function: str) -> FunctionSpec:
        return self.specs.get(function, _ANY_FUNCTION)


@dataclass(frozen=True)
class Choice:
    """A policy's proposal for the head of a queue: the configurations to try, best first, which its placer
    binds to a node (empty: the queue waits, for ``reason``)."""

    priorities: tuple[Config, ...] = ()
    reason: str | None = None
    latencies: Mapping[Config, float] = field(default_factory=dict)
    retry_at_ms: float | None = None
    """When the queue is held on purpose (e.g. a batch still filling), the time to ask again."""

    def latency_of(self, config: Config) -> float | None:
        return self.latencies.get(config)
