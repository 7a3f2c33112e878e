"""The platform's defaults, defined once, and the default for a function with no latency table.

**Platform defaults** (:data:`KEEP_ALIVE_MS`, :data:`HOP_MS`, :data:`MIG_RECONFIG_MS`): what the live
platform does when nothing says otherwise. The scheduler plans with them, the agents keep workers by
them and the emulator charges them, each reading them from here, so that live and emulated runs start
from the same figures.

**An unprofiled function** (docs/online-profiles.md §1). A function nobody has profiled still runs from its first call, with a conservative configuration:

* the largest batch its queue holds, up to ``esg-max-batch`` (:data:`DEFAULT_MAX_BATCH` without one);
* 1 vCPU;
* on the GPU model's smallest MIG slice (:func:`default_slice`) when ``esg-gpu`` is true and a node
  has room for one, else CPU only.

For planning, its latency is unknown but bounded by the action's time limit: every configuration of
the default table takes ``bound_ms``. An app with such a function is still planned: the search simply
finds no path under an SLO shorter than the bound, and every function falls back to its fastest
configurations, leaving the unknown one as much of the SLO as possible. Once the function has run,
its learned table (:mod:`esg.online`) replaces the default.

The rule is the same in the live service and the emulator: :class:`esg.scheduler.Scheduler` asks
:func:`default_choice` instead of the policy for the head of a queue whose function's table is a
default, whichever policy runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from esg.mig import geometry
from esg.model import Config
from esg.profiles import Profile, ProfileEntry
from esg.state import Fit

if TYPE_CHECKING:   # imported where used: the policy types' modules read the platform defaults below
    from esg.policies.context import Choice, FunctionSpec

KEEP_ALIVE_MS: Final = 600_000.0
"""How long an idle warm worker is kept when its policy names no keep-alive of its own: OpenWhisk's
default idle container timeout, 10 minutes. The agents' ``--idle-ttl-s`` and the emulator's
``keep_alive_ms`` default to it, and no policy keeps a worker longer."""
HOP_MS: Final = 2.5
"""What the live path adds to every batch beyond its run time (the dispatch's way to its agent and the
result's way back): the scheduler plans with it by default (``--stage-overhead-ms``) and the emulator
charges it by default (``--hop-ms``). Single-activation traces on an idle machine (docs/live-path.md);
a loaded machine measures more (docs/live-vs-emulated.md)."""
MIG_RECONFIG_MS: Final = 2000.0
"""Time per MIG GPU instance destroyed or created (docs/mig.md: a GPU instance's destruction "may take
O(1 s)" and a full re-partition several seconds; 2 s per changed instance covers GPU and compute
instance create/destroy): what a policy weighs a carve at, and what the emulator and the timing twin
charge. The live service's policies start from it and then plan with what the agents measure
(:mod:`esg.startup_costs`)."""

@dataclass(frozen=True)
class StartupCosts:
    """What starting a batch costs before it runs: MIG instances created or destroyed and a cold start
    when no idle worker waits (the driver's figures; the platform's MIG change by default)."""

    mig_reconfig_ms: float = MIG_RECONFIG_MS
    cold_start_ms: float = 0.0

    def of(self, fit: Fit) -> float:
        cold = 0.0 if fit.warm_worker is not None else self.cold_start_ms
        return fit.changed_instances * self.mig_reconfig_ms + cold


DEFAULT_MAX_BATCH: Final = 8
"""The largest batch of a default configuration when the action has no ``esg-max-batch`` (the largest
batch ``esg profile`` measures by default)."""
DEFAULT_VCPUS: Final = 1
SOURCE_FIELD: Final = "source"
"""The table field saying where its latencies come from: ``default``, ``offline`` or ``online``."""
DEFAULT_SOURCE: Final = "default"
CPU_AFTER_SLICE_MS: Final = 1.0
"""The CPU configurations of a GPU function's default table are listed this much slower than the
slice ones, so a ranking fastest-first tries the slice first."""


def default_slice(gpu_model: str) -> str:
    """The smallest MIG slice of ``gpu_model``: fewest compute slices, then least memory (no media
    extensions)."""
    geo = geometry(gpu_model)
    plain = [p for p in geo.profiles.values() if not p.media_extensions]
    return min(plain, key=lambda p: (p.compute_slices, p.memory_slices, p.name)).name


def max_batch(spec: FunctionSpec) -> int:
    return spec.max_batch if spec.max_batch is not None else DEFAULT_MAX_BATCH


def _batches(largest: int) -> list[int]:
    """Powers of two up to ``largest``, and ``largest`` (a planning table stays small for any cap)."""
    out, b = [], 1
    while b < largest:
        out.append(b)
        b *= 2
    return out + [largest]


def default_profile(function: str, spec: FunctionSpec, bound_ms: float, gpu_model: str) -> Profile:
    """The planning table of an unprofiled function: each default configuration takes ``bound_ms``."""
    entries = []
    if spec.gpu:
        sl = default_slice(gpu_model)
        entries += [ProfileEntry(Config(b, DEFAULT_VCPUS, sl), float(bound_ms)) for b in _batches(max_batch(spec))]
    cpu_ms = float(bound_ms) + (CPU_AFTER_SLICE_MS if spec.gpu else 0.0)
    entries += [ProfileEntry(Config(b, DEFAULT_VCPUS, None), cpu_ms) for b in _batches(max_batch(spec))]
    return Profile(function, geometry(gpu_model).model, tuple(entries), extra={SOURCE_FIELD: DEFAULT_SOURCE})


def source(profile: Profile) -> str:
    """``default``, ``online`` or ``offline`` (a table with no ``source`` field was written offline)."""
    value = profile.extra.get(SOURCE_FIELD)
    return value if isinstance(value, str) else "offline"


def is_default(profile: Profile | None) -> bool:
    return profile is not None and source(profile) == DEFAULT_SOURCE


def default_choice(profile: Profile, spec: FunctionSpec, queued: int) -> Choice:
    """What the head of a queue of an unprofiled function tries: the largest batch the queue has (up to
    the function's cap) on the default slice, then on CPU."""
    batch = max(1, min(queued, max_batch(spec)))
    gpus: list[str | None] = []
    for e in profile.entries:
        if e.config.gpu not in gpus:
            gpus.append(e.config.gpu)
    prios = tuple(Config(batch, DEFAULT_VCPUS, g) for g in gpus)
    from esg.policies.context import Choice

    lat = {c: profile.latency(Config(profile.entries[0].config.batch, DEFAULT_VCPUS, c.gpu)) for c in prios}
    return Choice(prios, latencies=lat)


def config_annotation(config: Config, profile: Profile) -> Mapping[str, Any]:
    """What an activation record says about one function's run (annotation ``esg-config``)."""
    return {**config.to_dict(), "profile": source(profile)}
