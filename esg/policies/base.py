"""The policy interface every scheduler policy implements (ESG and the baselines)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from esg.cluster import ClusterSnapshot
from esg.cost import Prices
from esg.dispatch import Placement, dispatch
from esg.model import App, Config
from esg.profiles import Profile
from esg.queues import AfwQueue

if TYPE_CHECKING:
    from esg.scheduler import Dispatch, Request


@dataclass(frozen=True)
class FunctionSpec:
    """Per-function limits from annotations: ``esg-max-batch`` and ``esg-gpu``."""

    max_batch: int | None = None
    gpu: bool = True

    def allows(self, config: Config) -> bool:
        if self.max_batch is not None and config.batch > self.max_batch:
            return False
        return self.gpu or config.gpu is None


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
    mig_reconfig_ms: float = 2000.0
    """What one MIG instance created or destroyed costs (the driver's figure; reference/mig.md §3)."""
    cold_start_scale: float = 1.0
    """Multiplies the profiles' ``cold_start_ms`` (as the driver does)."""

    def spec(self, function: str) -> FunctionSpec:
        return self.specs.get(function, FunctionSpec())


@dataclass(frozen=True)
class Choice:
    """The configurations to try for the head of a queue, best first (empty: the queue waits)."""

    priorities: tuple[Config, ...] = ()
    reason: str | None = None
    latencies: Mapping[Config, float] = field(default_factory=dict)
    retry_at_ms: float | None = None
    """When the queue is held on purpose (e.g. a batch still filling), the time to ask again."""

    def latency_of(self, config: Config) -> float | None:
        return self.latencies.get(config)


class Policy(ABC):
    name: str = "policy"

    def __init__(self, ctx: PolicyContext):
        self.ctx = ctx

    def add_app(self, app: App, profiles: Mapping[str, Profile], specs: Mapping[str, FunctionSpec]) -> None:
        """Learn (or replace) an app at run time; subclasses with per-app state override
        :meth:`on_app_added`."""
        self.ctx = replace(self.ctx, apps={**self.ctx.apps, app.name: app},
                           profiles={**self.ctx.profiles, **profiles}, specs={**self.ctx.specs, **specs})
        self.on_app_added(app)

    def on_app_added(self, app: App) -> None:
        """Per-app state for ``app`` must be (re)built."""
        return None

    def on_arrival(self, request: Request, app: App, now_ms: float) -> None:
        """A request arrived (pre-planning policies fix its configurations here)."""
        return None

    def on_dispatch(self, dispatch: Dispatch) -> None:
        """A batch was placed."""
        return None

    def on_done(self, dispatch: Dispatch) -> None:
        """A placed batch finished (or was lost)."""
        return None

    def place(self, app: App, queue: AfwQueue, choice: Choice, snapshot: ClusterSnapshot,
              preferred: Sequence[str], now_ms: float, no_fit: set[Config]) -> Placement | str:
        """Where the head batch runs: by default the first configuration and node that fit."""
        return dispatch(snapshot, choice.priorities, preferred, no_fit)

    def node_preference(self, app: App, function: str, snapshot: ClusterSnapshot) -> list[str] | None:
        """Nodes to try first for a batch (None: ESG_Dispatch's locality order, home or predecessor)."""
        return None

    def work_units(self) -> int:
        """Search work done so far (e.g. A* nodes expanded); drivers model decision time from it."""
        return int(getattr(self, "expanded", 0))

    @abstractmethod
    def choose(self, app: App, queue: AfwQueue, now_ms: float, snapshot: ClusterSnapshot) -> Choice:
        """Configurations to try for the head of ``queue`` (at most ``len(queue)`` jobs per batch)."""
