"""The MIG slices a dispatch needs: created on demand, reserved while a batch uses them.

A dispatch names its target slice ``(profile, start)`` and the slices to ``destroy`` first (those the
scheduler found in the way). :meth:`SliceManager.ensure` turns that into an explicit desired layout
for the reconciler — every slice that stays, plus the target — so nothing is auto-placed and busy
slices are never touched: the listed slices are dropped only when idle, and idle slices overlapping the
target are dropped too (the scheduler's view may lag). A reserved slice counts as busy for every
reconcile until the batch that reserved it has finished, so a concurrent dispatch cannot destroy it.
Idle slices are otherwise kept: the scheduler decides when they go.

A dispatch whose slice exists and which destroys nothing -- nearly every batch once a layout settles --
is served from the layout read last (by a dispatch or a heartbeat, at most :data:`STATE_FRESH_S` ago)
instead of reading the GPU's instances, compute instances and processes again: every MIG change is made
here, under the MIG lock, and drops that copy, so only a change made outside the agent can be missed,
and for at most that long.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable

from esg import mig
from esg.cluster import Slice, SliceRef
from esg.errors import MigError
from invoker_agent.mig_backend import MigOperationError
from invoker_agent.node import NodeAgent
from invoker_agent.reconcile import DesiredLayout, MigSlice

STATE_FRESH_S = 2.0
"""How long a read layout serves dispatches that change nothing (heartbeats read it every second)."""


class SliceError(RuntimeError):
    """The dispatch's slice cannot exist here (unknown profile, impossible layout, busy slice in the way)."""


class SliceManager:
    """One node's MIG slices on its first MIG-capable GPU (``gpu_model`` None: a CPU-only node)."""

    def __init__(self, node: NodeAgent) -> None:
        self.node = node
        self.gpu: int | None = None
        self.gpu_model: str | None = None
        try:
            for g in node.backend.gpus():
                if g.model is not None:
                    self.gpu, self.gpu_model = g.index, g.model
                    break
        except MigOperationError:
            pass
        self._mig_lock = threading.Lock()            # one MIG change (or read) at a time
        self._res_lock = threading.Lock()
        self._reserved: Counter[str] = Counter()
        self._last: tuple[Slice, ...] = ()
        self._state: list[MigSlice] | None = None
        self._state_s = 0.0
        """The layout read last and when (monotonic s); None after a change made here."""
        self.change_delay_s = 0.0
        """Extra time each MIG instance created or destroyed takes (0: as long as the backend takes)."""
        self.on_change: Callable[[list[tuple[str, int]], list[tuple[str, int]], float], None] | None = None
        """Told of each change made here: instances created, destroyed, and how long it all took (s)."""
        node.reconciler.busy_slices = self.busy_uuids

    def busy_uuids(self) -> set[str]:
        with self._res_lock:
            reserved = {u for u, n in self._reserved.items() if n > 0}
        return reserved | set(self.node.pool.busy_slices())

    def ensure(self, target: SliceRef, destroy: tuple[SliceRef, ...] = ()) -> str:
        """The MIG UUID of ``target``, created if needed, and reserved: call :meth:`release` after."""
        return self.carve(target, destroy)[0]

    def carve(self, target: SliceRef, destroy: tuple[SliceRef, ...] = ()) -> tuple[str, int]:
        """:meth:`ensure`, also saying how many MIG instances were created or destroyed for it. With
        ``change_delay_s`` (a timing twin on the fake backend) each change takes that long."""
        if self.gpu_model is None or self.gpu is None:
            raise SliceError(f"this node has no MIG-capable GPU; cannot run on MIG slice "
                             f"{target.profile}@{target.start}")
        model, gpu = self.gpu_model, self.gpu
        try:
            prof = mig.geometry(model).profile(target.profile)
        except MigError as e:
            raise SliceError(str(e)) from None
        if target.start not in prof.starts:
            raise SliceError(f"MIG profile {target.profile} cannot start at memory slice {target.start} "
                             f"on {model} (allowed starts: {list(prof.starts)})")
        want = (target.profile, target.start)
        drop = {(d.profile, d.start) for d in destroy}
        with self._mig_lock:
            uuid = self._unchanged(want, drop)
            if uuid is not None:
                with self._res_lock:
                    self._reserved[uuid] += 1
                return uuid, 0
            try:
                state = self._read(gpu)
                keep = [(s.profile, s.start) for s in state
                        if s.busy or ((s.profile, s.start) not in drop and not _overlaps(model, s, want))]
                desired = sorted(set(keep) | {want})
                uuid = _uuid_of(state, want)
                changes = 0
                began, created, destroyed = time.monotonic(), [], []
                if uuid is None or desired != sorted((s.profile, s.start) for s in state):
                    for s in state:
                        if (s.profile, s.start) not in desired and s.mig_uuid and not s.busy:
                            self.node.pool.evict_slice(s.mig_uuid)
                    self._state = None
                    report = self.node.reconciler.reconcile_gpu(gpu, DesiredLayout(placements=tuple(desired)))
                    if report.status == "success":     # its slices: the layout read back after the change
                        self._state, self._state_s = report.slices, time.monotonic()
                    uuid = _uuid_of(report.slices, want)
                    if uuid is None:
                        raise SliceError(f"cannot create MIG slice {target.profile}@{target.start} on {model}: "
                                         f"{report.reason or report.status}")
                    changes = len(report.created) + len(report.destroyed)
                    created, destroyed = list(report.created), list(report.destroyed)
            except MigOperationError as e:
                raise SliceError(f"MIG operation failed for slice {target.profile}@{target.start}: {e}") from None
            with self._res_lock:
                self._reserved[uuid] += 1
        if changes and self.change_delay_s:
            # outside the MIG lock: each batch pays its own changes, as the emulator charges them (its
            # slice is reserved meanwhile, so nothing destroys it)
            time.sleep(changes * self.change_delay_s)
        if changes and self.on_change is not None:
            self.on_change(created, destroyed, time.monotonic() - began)
        return uuid, changes

    def _read(self, gpu: int) -> list[MigSlice]:
        """The GPU's layout, read now (under the MIG lock), and kept for :meth:`_unchanged`."""
        state = self.node.reconciler.read_state(gpu)
        self._state, self._state_s = state, time.monotonic()
        return state

    def _unchanged(self, want: tuple[str, int], drop: set[tuple[str, int]]) -> str | None:
        """``want``'s UUID when the layout read last (fresh) has it and none of ``drop``: nothing to
        change, nothing to read (under the MIG lock)."""
        state = self._state
        if state is None or time.monotonic() - self._state_s > STATE_FRESH_S:
            return None
        if drop and any((s.profile, s.start) in drop for s in state):
            return None
        return _uuid_of(state, want)

    def release(self, uuid: str | None) -> None:
        if uuid is None:
            return
        with self._res_lock:
            self._reserved[uuid] -= 1
            if self._reserved[uuid] <= 0:
                del self._reserved[uuid]

    def status(self) -> tuple[Slice, ...]:
        """Every slice with busy/idle and MIG UUID (the last known list if a MIG change is under way)."""
        if self.gpu is None:
            return ()
        if not self._mig_lock.acquire(timeout=0.2):
            return self._last
        try:
            state = self._read(self.gpu)
        except MigOperationError:
            return self._last
        finally:
            self._mig_lock.release()
        self._last = tuple(s.slice() for s in sorted(state, key=lambda s: s.start))
        return self._last


def _uuid_of(state: list[MigSlice], want: tuple[str, int]) -> str | None:
    return next((s.mig_uuid for s in state if (s.profile, s.start) == want and s.mig_uuid), None)


def _overlaps(model: str, s: MigSlice, want: tuple[str, int]) -> bool:
    """Whether ``s`` is in the way of ``want`` (``want`` itself is not)."""
    return (s.profile, s.start) != want and mig.overlaps(model, (s.profile, s.start), want)
