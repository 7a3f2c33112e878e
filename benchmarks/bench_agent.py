"""Node-agent benchmark: warm vs cold worker start, MIG reconcile time on the fake backend, batching.

    PYTHONPATH=. python benchmarks/bench_agent.py [--repeats N]

Prints ratios measured in one run (no wall-clock thresholds anywhere).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from agent_channel.protocol import RunRequest
from invoker_agent.actions import ActionCode
from invoker_agent.fake_nvml import FakeHost, FakeNvml
from invoker_agent.nvml_backend import NvmlBackend
from invoker_agent.reconcile import Reconciler
from invoker_agent.workers import WorkerKey, WorkerPool, WorkerSpec

CPU_ACTION = '''
def work(x):
    acc = 0
    for i in range(20000):
        acc = (acc * 31 + i * x) % 1000003
    return {"y": acc}

def main(args):
    return work(args.get("x", 1))

def main_batch(args_list):
    return [work(a.get("x", 1)) for a in args_list]
'''

TRANSITIONS = {
    "A100-40GB": [[], ["1g.5gb"] * 7, ["3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb"], ["7g.40gb"],
                  ["4g.20gb", "3g.20gb"], ["3g.20gb", "3g.20gb"], []],
    "A30": [[], ["1g.6gb"] * 4, ["2g.12gb", "1g.6gb", "1g.6gb"], ["4g.24gb"], []],
}


def bench_cold_warm(repeats: int) -> None:
    a = ActionCode("/guest/bench", "1", "python:3.11", CPU_ACTION)
    cpu = (sorted(os.sched_getaffinity(0))[0],)
    cold, warm = [], []
    for i in range(repeats):
        pool = WorkerPool()
        key = WorkerKey(a.fqn, a.revision, f"c{i}", None)
        t0 = time.perf_counter()
        pool.run(key, WorkerSpec(cpu), a, [RunRequest("c", value={"x": 1})])
        cold.append((time.perf_counter() - t0) * 1000)
        for _ in range(5):
            t0 = time.perf_counter()
            pool.run(key, WorkerSpec(cpu), a, [RunRequest("w", value={"x": 1})])
            warm.append((time.perf_counter() - t0) * 1000)
        pool.shutdown()
    c, w = statistics.median(cold), statistics.median(warm)
    print(f"worker start      cold {c:8.2f} ms   warm {w:8.2f} ms   cold/warm = {c / w:6.1f}x  "
          f"(median of {len(cold)} cold, {len(warm)} warm; action work included)")


def bench_reconcile() -> None:
    for model, steps in TRANSITIONS.items():
        backend = NvmlBackend(FakeNvml(FakeHost.with_gpus(model)))
        rec = Reconciler(backend)
        for desired in steps:
            t0 = time.perf_counter()
            report = rec.reconcile_gpu(0, desired)
            ms = (time.perf_counter() - t0) * 1000
            print(f"reconcile {model:9s} -> {('+'.join(desired) or 'empty'):40s} {report.status:8s} "
                  f"{ms:7.2f} ms  (destroyed {len(report.destroyed)}, created {len(report.created)})")


def bench_batching(requests: int) -> None:
    a = ActionCode("/guest/bench", "1", "python:3.11", CPU_ACTION)
    cpu = (sorted(os.sched_getaffinity(0))[0],)
    pool = WorkerPool()
    rates = {}
    try:
        for batch in (1, 8):
            key = WorkerKey(a.fqn, a.revision, f"b{batch}", None)
            pool.run(key, WorkerSpec(cpu), a, [RunRequest("warmup", value={"x": 1})])
            t0 = time.perf_counter()
            for i in range(0, requests, batch):
                out = pool.run(key, WorkerSpec(cpu), a, [RunRequest(f"r{j}", value={"x": j}) for j in range(i, i + batch)])
                assert all(r.ok for r in out)
            rates[batch] = requests / (time.perf_counter() - t0)
    finally:
        pool.shutdown()
    print(f"batch throughput  batch=1 {rates[1]:8.1f} req/s   batch=8 {rates[8]:8.1f} req/s   "
          f"ratio = {rates[8] / rates[1]:5.2f}x  ({requests} requests of a ~CPU action, one vCPU)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--requests", type=int, default=400)
    args = ap.parse_args()
    bench_cold_warm(args.repeats)
    bench_reconcile()
    bench_batching(args.requests)


if __name__ == "__main__":
    main()
