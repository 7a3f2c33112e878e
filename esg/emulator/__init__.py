"""The discrete-event emulator: virtual time, node models, workloads and metrics around the same
:class:`esg.scheduler.Scheduler` step function the live service drives."""

from esg.emulator.config import ClusterSpec, EmulatorParams
from esg.emulator.runner import Emulation, EmulationResult

__all__ = ["ClusterSpec", "EmulatorParams", "Emulation", "EmulationResult"]
