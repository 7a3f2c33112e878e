"""The cost model (``docs/architecture.md`` §6): resource-time per request.

cost(config) = (price_vcpu * vcpus + price_gpu_slice * compute_slices(gpu)) * latency_ms / batch

Prices are relative units: a vCPU costs 1.0, a MIG compute slice what the MIG geometry table says for
its GPU model (:func:`esg.mig.slice_price`, derived there from public cloud list prices: 12.1 for an
A100-40GB). Costs are reported in vCPU-milliseconds per request; only ratios between policies are
meaningful.
"""

from __future__ import annotations

from dataclasses import dataclass

from esg.mig import DEFAULT_GPU_MODEL, compute_slices, slice_price
from esg.model import Config

DEFAULT_PRICE_VCPU = 1.0
DEFAULT_PRICE_GPU_SLICE = slice_price(DEFAULT_GPU_MODEL)


@dataclass(frozen=True)
class Prices:
    vcpu: float = DEFAULT_PRICE_VCPU
    """Price of one vCPU per millisecond (relative units)."""
    gpu_slice: float = DEFAULT_PRICE_GPU_SLICE
    """Price of one MIG compute slice of :data:`esg.mig.DEFAULT_GPU_MODEL` per millisecond (relative
    units); another model's slice costs this times the ratio of the two models' table prices."""

    def __post_init__(self) -> None:
        if self.vcpu < 0 or self.gpu_slice < 0:
            raise ValueError("prices must be non-negative")

    def slice_rate(self, gpu_model: str) -> float:
        """Price of one compute slice of ``gpu_model`` per millisecond."""
        return self.gpu_slice * (slice_price(gpu_model) / DEFAULT_PRICE_GPU_SLICE)

    def rate(self, gpu_model: str, config: Config) -> float:
        """Price per millisecond of holding ``config``'s resources."""
        return self.vcpu * config.vcpus + self.slice_rate(gpu_model) * compute_slices(gpu_model, config.gpu)


def config_cost(prices: Prices, gpu_model: str, config: Config, latency_ms: float) -> float:
    """Resource-time per request of one batch of ``config`` taking ``latency_ms``."""
    return prices.rate(gpu_model, config) * latency_ms / config.batch
