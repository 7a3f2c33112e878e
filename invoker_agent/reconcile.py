"""Declarative MIG reconcile, in mig-parted's style but incremental and placement-explicit.

For each GPU: desired layout (a multiset of profile names, or explicit (profile, start) pairs) → read
the actual state → if it already matches, do nothing → otherwise destroy only *idle* instances that
must go (an instance with compute processes, or whose MIG UUID the worker pool reports busy, is never
touched), compute explicit placements for the new ones with :func:`esg.mig.place` next to the kept
instances (never driver auto-placement), create each GI then its full-size CI, read back and verify.

Each GPU gets a report: ``success``, ``pending`` (a busy instance is in the way or not yet removable:
retry later) or ``failed`` (with the reason; an impossible layout or unknown profile fails before
anything is touched). Every step is journalled first (:class:`invoker_agent.journal.Journal`);
:meth:`Reconciler.recover` runs at start-up and **undoes** a half-done create (a GI without its CI is
destroyed, so the next reconcile starts clean) and **finishes** a half-done destroy.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from esg import mig
from esg.cluster import Slice, SliceRef
from esg.errors import MigError
from invoker_agent.journal import Journal
from invoker_agent.mig_backend import NVML_ERROR_IN_USE, GpuInstance, MigBackend, MigOperationError

Status = Literal["pending", "success", "failed"]


@dataclass(frozen=True)
class DesiredLayout:
    """What one GPU should hold: ``profiles`` (placements chosen here) or explicit ``placements``."""

    profiles: tuple[str, ...] = ()
    placements: tuple[tuple[str, int], ...] | None = None

    @classmethod
    def of(cls, spec: DesiredLayout | Iterable[str] | Iterable[tuple[str, int]]) -> DesiredLayout:
        if isinstance(spec, DesiredLayout):
            return spec
        items = list(spec)
        if items and all(isinstance(x, tuple | list) for x in items):
            return cls(placements=tuple((str(p), int(s)) for p, s in items))
        return cls(profiles=tuple(str(p) for p in items))


@dataclass(frozen=True)
class MigSlice:
    """One GPU instance as found on the GPU, with its compute instance (if any) and busy state.

    A type of its own beside :class:`esg.cluster.Slice` because it holds what only the reconciler needs
    to change the GPU: NVML's GPU index and GPU/compute instance ids and the processes using it. What a
    node reports of it is :meth:`slice`."""

    gpu: int
    gi_id: int
    profile: str
    start: int
    ci_id: int | None
    mig_uuid: str | None
    pids: tuple[int, ...] = ()
    busy: bool = False

    @property
    def ref(self) -> SliceRef:
        return SliceRef(self.profile, self.start)

    def slice(self) -> Slice:
        """This instance as the scheduler sees a slice (and a heartbeat reports it)."""
        return Slice(self.ref, self.busy, self.mig_uuid)


@dataclass
class GpuReport:
    gpu: int
    status: Status
    reason: str = ""
    destroyed: list[tuple[str, int]] = field(default_factory=list)
    created: list[tuple[str, int]] = field(default_factory=list)
    slices: list[MigSlice] = field(default_factory=list)

    @property
    def layout(self) -> list[tuple[str, int]]:
        return sorted((s.profile, s.start) for s in self.slices)


class Reconciler:
    """Brings each GPU's MIG layout to a desired one; safe to call repeatedly (idempotent)."""

    def __init__(self, backend: MigBackend, journal: Journal | str | None = None,
                 busy_slices: Callable[[], Iterable[str]] = lambda: ()) -> None:
        self.backend = backend
        self.journal = journal if isinstance(journal, Journal) else Journal(journal)
        self.busy_slices = busy_slices
        self._locks: dict[int, threading.Lock] = {}
        self._locks_guard = threading.Lock()

    def _lock(self, gpu: int) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault(gpu, threading.Lock())

    def _model(self, gpu: int) -> str:
        for g in self.backend.gpus():
            if g.index == gpu:
                if g.model is None:
                    raise MigError(f"GPU {gpu} ({g.name}) is not a MIG-capable model known to esg")
                if not g.mig_enabled and not mig.is_whole(g.model):
                    raise MigError(f"MIG mode is disabled on GPU {gpu} ({g.name}): enable it "
                                   f"(nvidia-smi -i {gpu} -mig 1, then reset the GPU)")
                return g.model
        raise MigError(f"no GPU {gpu} on this node")

    # --- state -----------------------------------------------------------------------------------
    def read_state(self, gpu: int) -> list[MigSlice]:
        """Every GI on ``gpu`` with its CI, MIG UUID, compute pids and busy flag."""
        gis = self.backend.gpu_instances(gpu)
        cis = {c.gi_id: c for c in self.backend.compute_instances(gpu)}
        pids = self.backend.running_pids(gpu)
        busy_uuids = set(self.busy_slices())
        out = []
        for gi in gis:
            ci = cis.get(gi.gi_id)
            uuid = ci.mig_uuid if ci else None
            p = tuple(pids.get(gi.gi_id, ()))
            out.append(MigSlice(gpu, gi.gi_id, gi.profile, gi.start, ci.ci_id if ci else None, uuid, p,
                                bool(p) or (uuid is not None and uuid in busy_uuids)))
        return out

    # --- planning (pure given a state) -----------------------------------------------------------
    @staticmethod
    def validate(model: str, desired: DesiredLayout) -> None:
        """Raise :class:`MigError` naming the problem if ``desired`` cannot exist on ``model``."""
        geo = mig.geometry(model)
        if desired.placements is not None:
            for i, (name, start) in enumerate(desired.placements):
                prof = geo.profile(name)
                if start not in prof.starts:
                    raise MigError(f"{name} cannot start at memory slice {start} on {model} "
                                   f"(allowed starts: {list(prof.starts)})")
                if any(mig.overlaps(model, (name, start), other) for other in desired.placements[:i]):
                    raise MigError(f"{name} at {start} overlaps another instance of the desired layout")
            if mig.place(model, [], occupied=desired.placements) is None:
                raise MigError(f"desired layout {list(desired.placements)} exceeds a profile limit on {model}")
            return
        for name in desired.profiles:
            geo.profile(name)
        if mig.place(model, desired.profiles) is None:
            raise MigError(f"MIG layout {sorted(desired.profiles)} is impossible on {model}")

    @staticmethod
    def plan(model: str, desired: DesiredLayout, state: list[MigSlice]) -> tuple[list[tuple[str, int]], str]:
        """The target layout given what is busy, or ([], reason) when busy instances block it."""
        busy = [(s.profile, s.start) for s in state if s.busy]
        if desired.placements is not None:
            target = list(desired.placements)
            extra = [b for b in busy if b not in target]
            if mig.place(model, [], occupied=target + extra) is None:  # None also when they overlap
                return [], f"busy instance(s) {extra} overlap the desired layout"
            return target + extra, ""
        wanted = Counter(desired.profiles)
        rem = wanted - Counter(p for p, _ in busy)
        idle_match: list[tuple[str, int]] = []
        left = Counter(rem)
        for s in sorted(state, key=lambda s: s.start):
            if not s.busy and left[s.profile] > 0:
                idle_match.append((s.profile, s.start))
                left[s.profile] -= 1
        for occupied, need in ((busy + idle_match, left), (busy, rem)):
            placed = mig.place(model, list(need.elements()), occupied=occupied)
            if placed is not None:
                return list(placed), ""
        return [], f"busy instance(s) {busy} leave no room for {sorted(desired.profiles)}"

    # --- acting ----------------------------------------------------------------------------------
    def reconcile(self, desired: Mapping[int, DesiredLayout | Iterable]) -> dict[int, GpuReport]:
        return {gpu: self.reconcile_gpu(gpu, spec) for gpu, spec in desired.items()}

    def reconcile_gpu(self, gpu: int, spec: DesiredLayout | Iterable) -> GpuReport:
        desired = DesiredLayout.of(spec)
        with self._lock(gpu):
            try:
                model = self._model(gpu)
                self.validate(model, desired)
            except MigError as e:
                return GpuReport(gpu, "failed", str(e))
            except MigOperationError as e:
                return GpuReport(gpu, "failed", str(e))
            try:
                return self._apply(gpu, model, desired)
            except MigOperationError as e:
                report = GpuReport(gpu, "pending" if e.code == NVML_ERROR_IN_USE else "failed", str(e))
                try:
                    report.slices = self.read_state(gpu)
                except MigOperationError:
                    pass
                return report

    def _apply(self, gpu: int, model: str, desired: DesiredLayout) -> GpuReport:
        state = self.read_state(gpu)
        target, why = self.plan(model, desired, state)
        if not target and why:
            return GpuReport(gpu, "pending", why, slices=state)
        report = GpuReport(gpu, "success")
        want = Counter(target)
        keep: list[MigSlice] = []
        drop: list[MigSlice] = []
        for s in state:
            key = (s.profile, s.start)
            if want[key] > 0:
                want[key] -= 1
                keep.append(s)
            else:
                drop.append(s)
        create = sorted(want.elements(), key=lambda x: (-mig.geometry(model).profile(x[0]).memory_slices, x[1]))
        repair = [s for s in keep if s.ci_id is None]
        if not drop and not create and not repair:
            report.slices = state
            return self._final(report, desired, target)

        busy_now = set(self.busy_slices())
        for s in drop:
            if s.busy or (s.mig_uuid and s.mig_uuid in busy_now):
                return GpuReport(gpu, "pending", f"{s.profile} at {s.start} became busy", slices=state)
            self._destroy(gpu, s)
            report.destroyed.append((s.profile, s.start))
        for s in repair:
            self.journal.write(gpu, {"op": "create", "profile": s.profile, "start": s.start, "gi_id": s.gi_id})
            self.backend.create_compute_instance(gpu, s.gi_id)
            self.journal.clear(gpu)
        for profile, start in create:
            self._create(gpu, profile, start)
            report.created.append((profile, start))
        report.slices = self.read_state(gpu)
        actual = sorted((s.profile, s.start) for s in report.slices)
        missing_ci = [(s.profile, s.start) for s in report.slices if s.mig_uuid is None]
        if actual != sorted(target) or missing_ci:
            report.status, report.reason = "failed", (
                f"read-back mismatch: expected {sorted(target)}, found {actual}"
                + (f", without compute instance: {missing_ci}" if missing_ci else ""))
            return report
        return self._final(report, desired, target)

    @staticmethod
    def _final(report: GpuReport, desired: DesiredLayout, target: list[tuple[str, int]]) -> GpuReport:
        wanted = sorted(desired.placements) if desired.placements is not None else sorted(desired.profiles)
        got = sorted(target) if desired.placements is not None else sorted(p for p, _ in target)
        if got != wanted:
            extra = sorted(set(target) - set(desired.placements or ())) if desired.placements is not None \
                else sorted((Counter(got) - Counter(wanted)).elements())
            report.status = "pending"
            report.reason = f"busy instance(s) not in the desired layout remain until idle: {extra}"
        return report

    def _destroy(self, gpu: int, s: MigSlice) -> None:
        self.journal.write(gpu, {"op": "destroy", "profile": s.profile, "start": s.start, "gi_id": s.gi_id})
        if s.ci_id is not None:
            self.backend.destroy_compute_instance(gpu, s.gi_id, s.ci_id)
        self.backend.destroy_gpu_instance(gpu, s.gi_id)
        self.journal.clear(gpu)

    def _create(self, gpu: int, profile: str, start: int) -> None:
        entry: dict = {"op": "create", "profile": profile, "start": start, "gi_id": None}
        self.journal.write(gpu, entry)
        gi: GpuInstance = self.backend.create_gpu_instance(gpu, profile, start)
        self.journal.write(gpu, {**entry, "gi_id": gi.gi_id})
        self.backend.create_compute_instance(gpu, gi.gi_id)
        self.journal.clear(gpu)

    # --- crash recovery --------------------------------------------------------------------------
    def recover(self) -> list[str]:
        """Finish or undo the steps a crash interrupted; returns what was done, one line each."""
        done = []
        for gpu, entry in self.journal.entries().items():
            with self._lock(gpu):
                try:
                    done.append(self._recover_one(gpu, entry))
                except MigOperationError as e:
                    done.append(f"GPU {gpu}: could not recover {entry}: {e}")
                    continue
                self.journal.clear(gpu)
        return done

    def _recover_one(self, gpu: int, entry: dict) -> str:
        state = self.read_state(gpu)
        match = [s for s in state if (s.profile, s.start) == (entry["profile"], entry["start"])
                 and (entry.get("gi_id") is None or s.gi_id == entry["gi_id"])]
        what = f"{entry['op']} of {entry['profile']} at {entry['start']}"
        if not match:
            return f"GPU {gpu}: interrupted {what}: nothing left on the GPU"
        s = match[0]
        if s.busy:
            return f"GPU {gpu}: interrupted {what}: instance is busy, left as is"
        if entry["op"] == "create":
            if s.ci_id is not None:
                return f"GPU {gpu}: interrupted {what}: it completed, kept"
            self.backend.destroy_gpu_instance(gpu, s.gi_id)
            return f"GPU {gpu}: interrupted {what}: GI {s.gi_id} had no compute instance, destroyed"
        if s.ci_id is not None:
            self.backend.destroy_compute_instance(gpu, s.gi_id, s.ci_id)
        self.backend.destroy_gpu_instance(gpu, s.gi_id)
        return f"GPU {gpu}: interrupted {what}: finished"
