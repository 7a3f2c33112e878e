"""The configuration grid of a profile run: batch sizes × vCPUs × GPU (CPU only or a MIG profile)."""

from __future__ import annotations

from dataclasses import dataclass

from esg.errors import MigError
from esg.mig import geometry
from esg.model import Config

CPU_NAMES = ("none", "cpu")


class GridError(ValueError):
    """A grid value is invalid; the message names the flag and the value."""


@dataclass(frozen=True)
class Grid:
    batches: tuple[int, ...]
    vcpus: tuple[int, ...]
    gpus: tuple[str | None, ...]   # None = CPU only

    def configs(self) -> list[Config]:
        """Every configuration, grouped so that one warm worker (vCPUs, GPU) serves all its batch sizes."""
        return [Config(b, v, g) for g in self.gpus for v in self.vcpus for b in self.batches]

    def to_dict(self) -> dict:
        return {"batch": list(self.batches), "vcpus": list(self.vcpus), "gpu": list(self.gpus)}


def _ints(flag: str, text: str) -> tuple[int, ...]:
    out: list[int] = []
    for item in _items(flag, text):
        try:
            value = int(item)
        except ValueError:
            raise GridError(f"{flag}: {item!r} is not a positive integer") from None
        if value < 1:
            raise GridError(f"{flag}: {value} is not a positive integer")
        if value not in out:
            out.append(value)
    return tuple(sorted(out))


def _items(flag: str, text: str) -> list[str]:
    items = [s.strip() for s in str(text).split(",")]
    if not any(items) or any(not s for s in items):
        raise GridError(f"{flag}: expected a comma-separated list, got {text!r}")
    return items


def parse_gpus(text: str, gpu_model: str) -> tuple[str | None, ...]:
    """``none,1g.5gb,...`` -> (None, "1g.5gb", ...), each name checked against ``gpu_model``'s geometry."""
    try:
        geo = geometry(gpu_model)
    except MigError as e:
        raise GridError(f"--gpu-model: {e}") from None
    out: list[str | None] = []
    for item in _items("--gpu", text):
        if item.lower() in CPU_NAMES:
            value = None
        else:
            try:
                value = geo.profile(item).name
            except MigError as e:
                raise GridError(f"--gpu: {e}") from None
        if value not in out:
            out.append(value)
    return tuple(out)


def parse_grid(batch: str, vcpus: str, gpu: str, gpu_model: str) -> Grid:
    return Grid(_ints("--batch", batch), _ints("--vcpus", vcpus), parse_gpus(gpu, gpu_model))
