"""The emulation loop: virtual time, node models and the scheduler's step function.

At every instant something happens (arrivals, batch completions, a timer a held queue asked for), the
runner builds a :class:`~esg.cluster.ClusterSnapshot` from its node models and calls
``Scheduler.step`` with those events -- the same call the live service makes. Each dispatch then pays,
before it runs: the modelled decision time of that step, the read of its inputs from the data store
when they were produced on other nodes (in parallel with) the MIG changes its placement needs followed
by a cold start when no idle worker of its kind is on the node, and the live path's hop to its agent
and back (``EmulatorParams.hop_ms``, with ``hop_log_sd`` a log-normal spread around it, or a draw from
the hops measured on a live run, ``hop_samples_ms``). Its execution time is the profiled
latency times log-normal noise; a batch whose outputs go to successors completes after writing them
to the store. Same node: the successor reads the producer's kept copy, free (as the live agents do).

A pre-warm (``StepResult.prewarms``) holds its instance and vCPUs from the step that placed it, over the
hop, the MIG instance created where its fit needs one, and the cold start; then its worker waits idle
for its keep-alive like a worker after a batch. Its start-up is charged in the cold-start and MIG
columns (at its configuration's price, as a batch's start-up is), its idle time in the idle column.
"""

from __future__ import annotations

import gc
import heapq
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, cast

import numpy as np
from mypy_extensions import mypyc_attr

from esg.cluster import ClusterSnapshot, Fit
from esg.cost import Prices
from esg.emulator.clock import DONE, TIMER, WARM, EventHeap
from esg.emulator.config import ClusterSpec, EmulatorParams
from esg.emulator.metrics import Metrics
from esg.emulator.nodes import NodeModel
from esg.emulator.online import OnlineLearning
from esg.events import Arrival, BatchDone, Dispatch, Prewarm, Request
from esg.mig import DEFAULT_GPU_MODEL, compute_slices
from esg.model import App, Config
from esg.policies.base import Policy
from esg.profiles import Profile
from esg.scheduler import Scheduler, StepResult
from esg.timing import cold_start_ms, lognormal_params

GC_YOUNG: Final = 20_000
"""The collector's youngest-generation threshold during a run (CPython's default is 700): measured on
the heavy replay, 15-20 % less wall time with the pre-run objects frozen."""

InvariantHook = Callable[[float, Mapping[str, NodeModel], Scheduler], None]


@dataclass
class EmulationResult:
    metrics: Metrics
    end_ms: float
    unfinished: int
    summary: dict = field(default_factory=dict)


@mypyc_attr(allow_interpreted_subclasses=True)
class Emulation:
    def __init__(self, apps: Mapping[str, App], profiles: Mapping[str, Profile], policy: Policy,
                 requests: Sequence[Request], rng: np.random.Generator,
                 cluster: ClusterSpec | None = None, params: EmulatorParams | None = None,
                 prices: Prices | None = None, invariant_hook: InvariantHook | None = None,
                 online: OnlineLearning | None = None, admission_control: bool = False):
        cluster = cluster or ClusterSpec()
        params = params or EmulatorParams()
        prices = prices or Prices()
        self.apps, self.profiles, self.policy = apps, profiles, policy
        self.requests = requests
        self._last_arrival = requests[-1].arrival_ms if requests else 0.0
        self.rng, self.cluster, self.params, self.prices = rng, cluster, params, prices
        self.hook = invariant_hook
        self.online = online
        """Online profiles (``esg emulate --profiles-online``): the scheduler learns its tables."""
        self._runs: dict[str, tuple[float, bool, float]] = {}
        self.scheduler: Any = Scheduler(apps, policy, explorer=online.explorer if online is not None else None,
                                   admission_control=admission_control, prewarm=params.prewarm)
        """The scheduler (typed ``Any``: tests put a recording stand-in in its place, which a compiled
        attribute of type ``Scheduler`` would refuse)."""
        self.nodes = {n: NodeModel(n, cluster.vcpus, cluster.gpu_model) for n in cluster.node_names()}
        self._snapshot = ClusterSnapshot({n: m.snapshot(0.0) for n, m in self.nodes.items()}, tracks_workers=True)
        self._changed: set[str] = set()
        """Nodes to look at in the next view: built again where their model's last state no longer holds,
        their next expiry queued."""
        self._expiries: list[tuple[float, str]] = []
        """(time, node) when an idle worker of the node expires (entries may be stale)."""
        self._pushed: dict[str, float] = {}
        """The last expiry pushed per node, so one expiry is not queued twice."""
        self.metrics = Metrics()
        self.heap = EventHeap()
        self._output_bytes: dict[str, int] = {f: p.output_bytes for f, p in profiles.items()}
        """Per function, its output's size (read at every batch: compiled, a field of a profile, whose
        module is not compiled, is a generic look-up)."""
        self._latency: dict[tuple[str, Config], float] = {
            (f, e.config): e.latency_ms for f, p in profiles.items() for e in p.entries}
        self._ran_on: dict[tuple[str, str], str] = {}
        self._flight: dict[str, tuple[Dispatch, float]] = {}
        self._timers: set[float] = set()
        self._measured: set[str] = set()
        self._rates: dict[Config, float] = {}
        self._noise = lognormal_params(params.noise_cv)
        self._noise_buf: list[float] = []
        self._hop_rng = (np.random.default_rng(cast(np.random.SeedSequence, rng.bit_generator.seed_seq).spawn(1)[0])
                         if params.hop_log_sd > 0 or params.hop_samples_ms else None)
        """The hop's own generator (the run's execution-time draws stay as they are)."""

    def run(self) -> EmulationResult:
        """Replay the requests to the end (the last arrival plus the drain), with the cyclic garbage
        collector told what it need not scan: every object made before the run (apps, profiles, the
        requests: millions in a long replay) is frozen out of its scans while the run lasts, and its
        youngest generation is collected less often (the run makes and drops many short-lived objects,
        few of them in cycles). Nothing the run computes depends on when the collector runs."""
        threshold = gc.get_threshold()
        freeze = gc.isenabled() and gc.get_freeze_count() == 0  # leave a caller's own freeze alone
        if freeze:
            gc.freeze()
            gc.set_threshold(max(threshold[0], GC_YOUNG), threshold[1], threshold[2])
        try:
            return self._run()
        finally:
            if freeze:
                gc.set_threshold(*threshold)
                gc.unfreeze()

    def _run(self) -> EmulationResult:
        reqs, i, now = self.requests, 0, 0.0
        last = reqs[-1].arrival_ms if reqs else 0.0
        horizon = last + self.params.drain_ms
        while True:
            t_heap = self.heap.peek_time()
            t_arr = reqs[i].arrival_ms if i < len(reqs) else None
            if t_heap is None and t_arr is None:
                break
            now = min(t for t in (t_heap, t_arr) if t is not None)
            if now > horizon:
                break
            events: list = []
            while i < len(reqs) and reqs[i].arrival_ms == now:
                events.append(Arrival(reqs[i]))
                if now >= self.params.warmup_ms:
                    self.metrics.arrived(reqs[i].app)
                    self._measured.add(reqs[i].request_id)
                i += 1
            while self.heap.peek_time() == now:
                ev = self.heap.pop()
                if ev.kind == DONE:
                    events.append(self._finish(ev.payload, now))
                elif ev.kind == WARM:
                    self._warmed(ev.payload, now)
                else:
                    self._timers.discard(now)
            self._step(now, events)
        unfinished = self.scheduler.pending_requests()
        self._charge_idle(self.params.warmup_ms, last, now)
        summary = self.metrics.summary()
        return EmulationResult(self.metrics, now, unfinished, summary)

    def _step(self, now: float, events: list) -> None:
        self.metrics.events += max(1, len(events))
        snapshot = self.view(now)
        before = self.policy.work_units()
        # typed: compiled, the fields of a result read through ``Any`` are generic attribute look-ups
        result: StepResult = self.scheduler.step(now, snapshot, events)
        for o in result.outcomes:
            if o.request_id in self._measured:
                self._measured.discard(o.request_id)
                self.metrics.outcome(o)
            for f in self.apps[o.app].functions:
                ran = (o.request_id, f)
                if ran in self._ran_on:  # (not pop with a default: compiled, that is a generic call)
                    del self._ran_on[ran]
        for c in result.completed:
            self._ran_on[(c.request_id, c.function)] = c.node
        decision_ms = 0.0
        if result.dispatches:
            decision_ms = (self.params.sched_ms_per_step
                           + (self.policy.work_units() - before) * self.params.sched_ms_per_unit)
            self.metrics.sched_ms += decision_ms * len(result.dispatches)
            self.metrics.decisions += len(result.dispatches)
        for d in result.dispatches:
            self._start(d, now, decision_ms)
        for p in result.prewarms:
            self._prewarm(p, now)
        wake = result.wake_at_ms
        if wake is not None and wake > now and wake not in self._timers:
            self._timers.add(wake)
            self.heap.push(wake, TIMER)
        if self.hook is not None:
            self.hook(now, self.nodes, self.scheduler)

    def view(self, now: float) -> ClusterSnapshot:
        """The cluster as the scheduler sees it at ``now``: the run's one snapshot, with the nodes that
        changed since the last view (a batch finished there, a start the scheduler's reservation did
        not fully describe, an idle worker's keep-alive ran out) brought up to date."""
        expiries = self._expiries
        while expiries and expiries[0][0] < now:  # a worker is gone just after its expiry
            self._changed.add(heapq.heappop(expiries)[1])
        for name in sorted(self._changed):
            model = self.nodes[name]
            state = model.snapshot(now)
            if state is not self._snapshot.nodes.get(name):
                self._snapshot.put(state)
            expiry = model.next_expiry_ms
            if expiry != math.inf and self._pushed.get(name) != expiry:
                self._pushed[name] = expiry
                heapq.heappush(expiries, (expiry, name))
        self._changed.clear()
        return self._snapshot

    def _idle_again(self, node: str, function: str, config: Config, fit: Fit) -> None:
        """A worker of ``function`` became idle on ``node`` (its batch or start-up, of ``config`` on
        ``fit``, ended): the node model's state on the run's snapshot, while it still holds, is changed
        through :meth:`ClusterSnapshot.finish` (so the snapshot's index follows exactly what moved); else
        the node is built again at the next view. Either way the next view looks at the node again: the
        worker's keep-alive may end before any other there."""
        self._changed.add(node)
        if not self.nodes[node].snapshot_stale:
            self._snapshot.finish(function, config, fit)

    def _start(self, d: Dispatch, now: float, decision_ms: float) -> None:
        node = self.nodes[d.node]
        cost = node.start(d, now, self.params.mig_reconfig_ms, reserved=True)
        if node.snapshot_stale:
            self._changed.add(d.node)
        cold_ms = cold_start_ms(self.profiles[d.function], self.params.cold_start_scale) if cost.cold else 0.0
        wait = decision_ms + self._hop_ms() + max(self._transfer_ms(d), cost.reconfig_ms + cold_ms)
        run_ms = self._true_latency(d) * self._next_noise()
        if self.online is not None:
            self._runs[d.batch_id] = (run_ms, cost.cold, cold_ms)
        done = now + wait + run_ms + self._write_ms(d)
        self._flight[d.batch_id] = (d, now)
        self.heap.push(done, DONE, d.batch_id)
        m = self.metrics
        if not any(j.request_id in self._measured for j in d.jobs):
            return
        m.batches += 1
        m.jobs += len(d.jobs)
        m.cold_starts += cost.cold
        m.reconfigured_instances += cost.reconfigured
        rate = self._rate(d.config)
        m.cost_mig += rate * cost.reconfig_ms
        m.cost_cold += rate * cold_ms
        m.cost_exec += rate * (done - now - cost.reconfig_ms - cold_ms)

    def _prewarm(self, p: Prewarm, now: float) -> None:
        """Start a pre-warmed worker; it is idle and warm once the hop, its MIG instance (where created)
        and its cold start are over. Charged when started inside the measured window."""
        cost = self.nodes[p.node].start_prewarm(p, now, self.params.mig_reconfig_ms)
        self._changed.add(p.node)
        cold_ms = cold_start_ms(self.profiles[p.function], self.params.cold_start_scale)
        self.heap.push(now + self._hop_ms() + cost.reconfig_ms + cold_ms, WARM, p)
        if not self.params.warmup_ms <= now <= self._last_arrival:
            return
        m = self.metrics
        m.prewarms += 1
        m.reconfigured_instances += cost.reconfigured
        rate = self._rate(p.config)
        m.cost_mig += rate * cost.reconfig_ms
        m.cost_cold += rate * cold_ms

    def _rate(self, config: Config) -> float:
        """The price per ms of holding ``config``'s resources (:meth:`esg.cost.Prices.rate` for the
        cluster's GPU model), remembered per configuration."""
        rate = self._rates.get(config)
        if rate is None:
            rate = self._rates[config] = self.prices.rate(self.cluster.gpu_model or DEFAULT_GPU_MODEL, config)
        return rate

    def _warmed(self, p: Prewarm, now: float) -> None:
        self.nodes[p.node].warmed(p, now, p.keep_alive_ms if p.keep_alive_ms is not None else self.params.keep_alive_ms)
        self._idle_again(p.node, p.function, p.config, p.fit)

    def _charge_idle(self, start_ms: float, end_ms: float, now: float) -> None:
        """Idle warm workers cost the price of the MIG instance they keep, for the time inside the
        measured window [``start_ms``, ``end_ms``] (the last arrival) that the instance held an idle
        worker and ran no batch (an instance is paid once however many idle workers it holds; CPU
        workers hold no vCPU while idle)."""
        gpu_model = self.cluster.gpu_model
        if gpu_model is None:
            return
        for node in self.nodes.values():
            for profile, ms in node.idle_instance_ms(start_ms, end_ms, now).items():
                self.metrics.cost_idle += self.prices.slice_rate(gpu_model) * compute_slices(gpu_model, profile) * ms

    def _true_latency(self, d: Dispatch) -> float:
        latency = self._latency.get((d.function, d.config))
        if latency is None and self.online is not None:
            latency = self.online.latency(d.function, d.config)
        if latency is None:
            raise KeyError(f"{d.function} has no configuration {d.config.label()}")
        return latency

    def _hop_ms(self) -> float:
        """The live path's overhead on one batch: one of ``hop_samples_ms`` when given, else ``hop_ms``,
        times a log-normal factor of median 1 when ``hop_log_sd`` is set."""
        if self._hop_rng is None:
            return self.params.hop_ms
        samples = self.params.hop_samples_ms
        if samples:
            return samples[int(self._hop_rng.integers(len(samples)))]
        return self.params.hop_ms * float(np.exp(self.params.hop_log_sd * self._hop_rng.standard_normal()))

    def _next_noise(self) -> float:
        """The next execution-time factor. Drawn in blocks: the same numbers, in the same order, as
        one draw per batch (the run's generator serves nothing else while it runs)."""
        if not self._noise_buf:
            mu, sigma = self._noise
            self._noise_buf = self.rng.lognormal(mu, sigma, size=4096).tolist()
            self._noise_buf.reverse()
        return self._noise_buf.pop()

    def _transfer_ms(self, d: Dispatch) -> float:
        """Inputs produced on other nodes are read from the data store (one round trip per batch)
        before the batch starts; those produced on this node are read from the copy kept here."""
        preds = self.apps[d.app].predecessors(d.function)
        if not preds:
            return 0.0
        remote = 0
        for job in d.jobs:
            for p in preds:
                if self._ran_on.get((job.request_id, p), d.node) != d.node:
                    remote += self._output_bytes[p]
        if not remote:
            return 0.0
        return self.params.store_read_ms + remote / (self.params.store_read_mb_s * 1e3)

    def _write_ms(self, d: Dispatch) -> float:
        """A batch whose outputs go to successors writes them to the data store with its result."""
        if not self.apps[d.app].successors(d.function):
            return 0.0
        written = len(d.jobs) * self._output_bytes[d.function]
        return self.params.store_write_ms + written / (self.params.store_write_mb_s * 1e3)

    def _finish(self, batch_id: str, now: float) -> BatchDone:
        d, _ = self._flight[batch_id]
        del self._flight[batch_id]
        keep = d.keep_alive_ms if d.keep_alive_ms is not None else self.params.keep_alive_ms
        self.nodes[d.node].finish(d, now, keep)
        self._idle_again(d.node, d.function, d.config, d.fit)
        if self.online is not None:
            run_ms, cold, init_ms = self._runs.pop(batch_id)
            changed = self.online.observe(d, run_ms, cold, init_ms)
            for app in self.online.apps_using(changed):
                self.scheduler.add_app(app, {f: self.online.tables[f] for f in app.functions},
                                       {f: self.online.spec(f) for f in app.functions})
        return BatchDone(batch_id)
