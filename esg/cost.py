"""The cost model (``docs/architecture.md`` §6): resource-time per request.

cost(config) = (price_vcpu * vcpus + price_gpu_slice * compute_slices(gpu)) * latency_ms / batch

Default prices are relative units derived from public cloud list prices (us-east, on demand, 2024):
an AWS p4d.24xlarge (8 × A100-40GB, 96 vCPUs) costs $32.77/h and a c6i.24xlarge (96 vCPUs, no GPU)
$4.08/h, so one vCPU-hour is about $0.0425 and one A100 about $3.59/h, i.e. $0.513/h per MIG compute
slice (1/7 of an A100). Normalised to a vCPU = 1.0, a compute slice costs about 12.1. Costs are reported
in vCPU-milliseconds per request; only ratios between policies are meaningful.
"""

from __future__ import annotations

from dataclasses import dataclass

from esg.mig import compute_slices
from esg.model import Config

DEFAULT_PRICE_VCPU = 1.0
DEFAULT_PRICE_GPU_SLICE = 12.1


@dataclass(frozen=True)
class Prices:
    vcpu: float = DEFAULT_PRICE_VCPU
    """Price of one vCPU per millisecond (relative units)."""
    gpu_slice: float = DEFAULT_PRICE_GPU_SLICE
    """Price of one MIG compute slice per millisecond (relative units)."""

    def __post_init__(self) -> None:
        if self.vcpu < 0 or self.gpu_slice < 0:
            raise ValueError("prices must be non-negative")

    def rate(self, gpu_model: str, config: Config) -> float:
        """Price per millisecond of holding ``config``'s resources."""
        return self.vcpu * config.vcpus + self.gpu_slice * compute_slices(gpu_model, config.gpu)


def config_cost(prices: Prices, gpu_model: str, config: Config, latency_ms: float) -> float:
    """Resource-time per request of one batch of ``config`` taking ``latency_ms``."""
    return prices.rate(gpu_model, config) * latency_ms / config.batch
