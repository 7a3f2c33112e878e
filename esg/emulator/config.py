"""Emulated cluster and model parameters, with the reason for each default."""

from __future__ import annotations

from dataclasses import dataclass

from esg.defaults import HOP_MS, KEEP_ALIVE_MS, MIG_RECONFIG_MS
from esg.mig import DEFAULT_GPU_MODEL


@dataclass(frozen=True)
class ClusterSpec:
    """The paper's testbed by default: 16 nodes, each 16 vCPUs and one A100-40GB in MIG mode."""

    nodes: int = 16
    vcpus: int = 16
    gpu_model: str | None = DEFAULT_GPU_MODEL

    def __post_init__(self) -> None:
        if self.nodes < 1 or self.vcpus < 1:
            raise ValueError("a cluster needs at least one node with at least one vCPU")

    def node_names(self) -> list[str]:
        width = len(str(self.nodes - 1))
        return [f"node{i:0{width}d}" for i in range(self.nodes)]


@dataclass(frozen=True)
class EmulatorParams:
    noise_cv: float = 0.05
    """Coefficient of variation of execution time around the profiled latency (lognormal, mean 1)."""
    keep_alive_ms: float = KEEP_ALIVE_MS
    """An idle warm worker is kept this long (OpenWhisk's default idle container timeout is 10 min)."""
    prewarm: bool = True
    """Policies pre-warm workers and set their own keep-alive (``esg.prewarm``); False: no worker starts
    ahead of a batch and every worker is kept ``keep_alive_ms`` (``esg emulate --no-prewarm``)."""
    store_write_ms: float = 0.08
    """Data passing, as the live agents do it: a batch whose outputs go to successors writes them to the
    data store (Redis) in the same MULTI as its result, so its result reaches the scheduler this much
    plus output bytes / ``store_write_mb_s`` later. Measured by ``benchmarks/bench_channel.py`` (SET of
    the runtime's reply bytes in the result's MULTI, least-squares fit over 1-600 KB on loopback, median
    of 5 runs: 0.08 ms + bytes / 2509 MB/s; development machine, 2 cores, Python 3.11, hiredis)."""
    store_write_mb_s: float = 2500.0
    """See ``store_write_ms``."""
    store_read_ms: float = 0.12
    """A successor on the producer's node reads the copy kept there (free); one on another node reads its
    inputs with one MGET for its batch: this round trip plus bytes / ``store_read_mb_s`` (same benchmark:
    GET + JSON decode, 0.115 ms + bytes / 597 MB/s)."""
    store_read_mb_s: float = 600.0
    """See ``store_read_ms``."""
    mig_reconfig_ms: float = MIG_RECONFIG_MS
    """Time per MIG GPU instance destroyed or created (``docs/mig.md``: GI destroy "may take O(1 s)"
    and a full re-partition several seconds; 2 s per changed instance covers GI + CI create/destroy)."""
    cold_start_scale: float = 1.0
    """Multiplier on each profile's ``cold_start_ms`` (0 disables cold starts)."""
    hop_ms: float = HOP_MS
    """The live path's overhead per batch, beyond the decision itself: the dispatch's way to its agent
    (the main loop's pipeline, the agent's blocking read waking) and the result's way back to the next
    step (the reader thread, the main loop waking). From the traces of single activations in
    docs/live-path.md (development machine, 2 shared cores, medians): dispatch pipeline 0.8-1.3 ms,
    agent round trip 0.9 ms, result hand-off 0.5 ms. Under load the live figure is larger:
    docs/live-vs-emulated.md measures it on a twin cluster (from the moment a batch could be decided to
    its answer in the scheduler, less the agent's run: 5-10 ms median on the shared development
    machine) and its agreement runs pass that measured value."""
    hop_log_sd: float = 0.0
    """The spread of that overhead: each batch pays ``hop_ms`` times a log-normal factor of median 1 whose
    logarithm has this standard deviation (0: every batch pays ``hop_ms`` exactly). On a loaded machine
    the live hop has a long tail (the processes wait for a core): the twin cluster of
    docs/live-vs-emulated.md measures a log-normal spread of about 1 (p10 3.6 ms, median 9.9, p90 40)."""
    hop_samples_ms: tuple[float, ...] = ()
    """Hops measured on a live run (``esg emulate --hop-samples``): when given, each batch pays one of them,
    drawn uniformly, instead of ``hop_ms`` x the log-normal factor. The live hop is not log-normal: a
    twin cluster's has a floor near 1.5 ms and a long right tail, and a log-normal fitted to its 10th and
    90th percentiles puts too much weight below the median and too little just above it -- 4 points of
    hit rate on the 60 s agreement run, decided by an app whose SLO equals its median latency
    (docs/live-vs-emulated.md)."""
    sched_ms_per_step: float = 0.05
    """Modelled fixed decision time per scheduler step that dispatches (queue walk + ESG_Dispatch)."""
    sched_ms_per_unit: float = 0.1
    """Modelled decision time per unit of search work (one A* node expansion, one best-first step);
    measured on the development machine (2 cores, Python 3.11): ESG_1Q took 50.3 ms for 432
    A* expansions over the four apps x three SLO levels (top-8), about 0.116 ms each, setup included."""
    warmup_ms: float = 30_000.0
    """Requests arriving earlier are run but not measured: every run starts with no MIG instance and no
    warm worker, and the first seconds measure only that start-up."""
    drain_ms: float = 120_000.0
    """After the last arrival, the run continues this long; requests still unfinished are misses."""
