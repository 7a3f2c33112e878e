"""What the worker sandbox costs: start and per-call time of sandboxed workers against the same runtimes
started without it, in one run.

    PYTHONPATH=. python benchmarks/bench_sandbox.py [--repeats N] [--calls N]

For each runtime (Python, and Node.js where ``node`` is installed) and each way of starting it -- the
process runner's sandbox (:mod:`invoker_agent.sandbox`: bubblewrap, its own uid and namespaces, the seccomp
filter, limits) and a plain child process of the agent running the same runtime on the same Unix socket
-- it measures a worker's cold start (process up, listening, ``/init`` answered), a warm ``/run`` of an
empty action (the per-call overhead), and a warm ``/run`` of an action making 20 000 system calls (what the
filter adds to each). Prints medians and the sandbox/plain ratios; no threshold anywhere.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import time

from agent_channel.protocol import RunRequest
from invoker_agent.actions import ActionCode
from invoker_agent.sandbox import RUN_DIR
from invoker_agent.workers import ProcessWorker, WorkerKey, WorkerPool, WorkerSpec, worker_env

ACTIONS = {
    "python:3": ("def main(a):\n"
                 "    if a.get('syscalls'):\n"
                 "        import os\n"
                 "        for _ in range(a['syscalls']):\n"
                 "            os.getppid()\n"
                 "    return {}\n"),
    "nodejs:20": ("function main(a) {\n"
                  "  for (let i = 0; i < (a.syscalls || 0); i++) process.ppid;\n"
                  "  return {};\n"
                  "}\n"),
}


class PlainWorker(ProcessWorker):
    """The same runtime on the same Unix socket, started as a plain child of this process: no sandbox."""

    def start(self) -> None:
        host = {m.target: m.source for m in self.runtime.mounts}      # the runtime's file, where it lies
        command = [host.get(c, c).replace(RUN_DIR, str(self.run_dir)) for c in self.runtime.command]
        log = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        try:
            self.proc = subprocess.Popen(command, env=worker_env(self.spec), stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=log, start_new_session=True)
        finally:
            os.close(log)
        ready = self.run_dir / "ready"
        while not ready.exists():
            if self.proc.poll() is not None:
                raise RuntimeError(f"plain worker exited: {self.log_tail()}")
            time.sleep(0.002)
        from invoker_agent.runtime_client import RuntimeClient
        self.client = RuntimeClient(f"unix:{self.run_dir / 'rt.sock'}")


def measure(kind: str, factory, repeats: int, calls: int) -> dict[str, float]:
    a = ActionCode("/bench/sandbox", "1", kind, ACTIONS[kind])
    cpu = (sorted(os.sched_getaffinity(0))[0],)
    cold, warm, heavy = [], [], []
    for i in range(repeats):
        pool = WorkerPool(factory=factory)
        key = WorkerKey(a.fqn, a.revision, f"c{i}", None, "bench")
        try:
            t0 = time.perf_counter()
            out = pool.run(key, WorkerSpec(cpu), a, [RunRequest("c", value={})])
            cold.append((time.perf_counter() - t0) * 1000)
            assert out[0].status_code == 0, out[0].result
            for _ in range(calls):
                t0 = time.perf_counter()
                pool.run(key, WorkerSpec(cpu), a, [RunRequest("w", value={})])
                warm.append((time.perf_counter() - t0) * 1000)
            for _ in range(max(1, calls // 10)):
                t0 = time.perf_counter()
                pool.run(key, WorkerSpec(cpu), a, [RunRequest("h", value={"syscalls": 20000})])
                heavy.append((time.perf_counter() - t0) * 1000)
        finally:
            pool.shutdown()
    return {"cold": statistics.median(cold), "warm": statistics.median(warm), "heavy": statistics.median(heavy)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=7, help="cold starts per variant")
    ap.add_argument("--calls", type=int, default=50, help="warm calls per cold start")
    args = ap.parse_args()
    kinds = ["python:3"] + (["nodejs:20"] if shutil.which("node") else [])
    print(f"{'runtime':<10} {'':<8} {'cold start ms':>14} {'warm /run ms':>13} {'20k syscalls ms':>16}")
    for kind in kinds:
        # interleaved, so a change in the machine's load touches both alike
        boxed, plain = [], []
        for _ in range(2):
            boxed.append(measure(kind, ProcessWorker, max(1, args.repeats // 2), args.calls))
            plain.append(measure(kind, PlainWorker, max(1, args.repeats // 2), args.calls))
        b = {k: statistics.median(m[k] for m in boxed) for k in boxed[0]}
        p = {k: statistics.median(m[k] for m in plain) for k in plain[0]}
        for name, m in (("sandbox", b), ("plain", p)):
            print(f"{kind:<10} {name:<8} {m['cold']:>14.1f} {m['warm']:>13.3f} {m['heavy']:>16.2f}")
        print(f"{kind:<10} {'ratio':<8} {b['cold'] / p['cold']:>13.2f}x {b['warm'] / p['warm']:>12.2f}x "
              f"{b['heavy'] / p['heavy']:>15.2f}x   (sandbox / plain)")


if __name__ == "__main__":
    main()
