"""CPU per activation of the real agent (and its workers) and of the scheduler, in a burst.

    PYTHONPATH=. python benchmarks/bench_agent_cpu.py [--n 3000] [--bursts 2] [--profile FILE] [--pool N]

The ``scheduler + esg agent, warm action`` system of ``bench_scheduler.py`` (one broker, one redis-server,
the OpenWhisk stand-in, ``esg scheduler`` and ``esg agent`` running ``def main(a): return a`` on warm
workers): after a warm-up, each burst of ``--n`` blocking activations is timed and the CPU (user + sys,
from ``/proc``) that the agent with its workers, and the scheduler, spent on it is divided by ``--n``.
On a shared machine the CPU per activation is the steadier figure; throughput is printed beside it with
the load average. ``--profile FILE``: py-spy (``--py-spy PATH``) samples the threads that hold the interpreter's lock
during the last burst, of the agent or (``--profile-of scheduler``) of the scheduler.

``--window``: every 2 ms, how many dispatches are in the node's stream (sent by the scheduler and not yet
answered: the node's window of work in flight, at most its ``--vcpus`` for a plain action) and how many
of them the agent has read; printed as the share of samples at each count and their quantiles. Each
burst also prints how busy the whole machine was and the CPU that the broker, Redis and this process
(the controller driver, and the sampler with ``--window``) spent per activation. ``--vcpus`` / ``--max-batches``: the node's size (8 / 8).

``--pool N``: no services; ``N`` warm ``/run`` calls in a row through the worker pool (one worker, one
thread), the CPU per call of this process and of the worker: the ``/run`` exchange alone.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_scheduler import NODE, Procs, deploy, warm_up, write_profiles  # noqa: E402

from esg_cli.controller_driver import ControllerDriver  # noqa: E402
from esg_cli.openwhisk_standin import GUEST_KEY, OpenWhiskStandIn  # noqa: E402
from esg_cli.servers import start_broker, start_redis  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """User + sys seconds of ``pid`` itself (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            parts = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(parts[11]) + int(parts[12])) / TICK


def switches(pid: int) -> int:
    """Context switches (voluntary and not) of every thread of ``pid`` (0 when it is gone)."""
    n = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0
    for t in tasks:
        try:
            with open(f"/proc/{pid}/task/{t}/status") as f:
                n += sum(int(line.split()[1]) for line in f if "ctxt_switches" in line)
        except OSError:
            pass
    return n


def threads_cpu(pid: int) -> dict[str, float]:
    """CPU seconds of each thread of ``pid`` by name (``main`` for the main thread; librdkafka's threads
    are ``rdk:...``; Python's own threads are unnamed to the system and add up under ``python``)."""
    out: dict[str, float] = {}
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for t in tasks:
        try:
            with open(f"/proc/{pid}/task/{t}/stat") as f:
                parts = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{pid}/task/{t}/comm") as f:
                name = "main" if int(t) == pid else f.read().strip()
        except OSError:
            continue
        name = "rdk:broker" if name.startswith("rdk:broker") else name
        out[name] = out.get(name, 0.0) + (int(parts[11]) + int(parts[12])) / TICK
    return out


def descendants(pid: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            children.setdefault(ppid, []).append(int(d))
    out, todo = set(), [pid]
    while todo:
        p = todo.pop()
        for c in children.get(p, []):
            out.add(c)
            todo.append(c)
    return out


def tree_cpu(pid: int, known: set[int]) -> tuple[float, int, set[int]]:
    """CPU seconds and context switches of ``pid`` and every descendant alive now or in ``known``."""
    pids = {pid} | descendants(pid) | known
    return sum(cpu_s(p) for p in pids), sum(switches(p) for p in pids), pids


def pool_runs(n: int) -> None:
    from agent_channel.protocol import RunRequest
    from invoker_agent.actions import ActionCode
    from invoker_agent.workers import WorkerKey, WorkerPool, WorkerSpec
    action = ActionCode("/guest/echo", "1", "python:3.11", "def main(a):\n    return a\n")
    pool = WorkerPool()
    key, spec = WorkerKey(action.fqn, action.revision, "cpu", None), WorkerSpec((sorted(os.sched_getaffinity(0))[0],))
    try:
        pool.run(key, spec, action, [RunRequest("warm", value={})])
        worker = pool._workers[key].entries[0].worker
        for _ in range(3):
            c0, w0, t0 = time.process_time(), cpu_s(worker.proc.pid), time.perf_counter()
            for i in range(n):
                pool.run(key, spec, action, [RunRequest(f"a{i}", value={"i": i})])
            c1, w1, t1 = time.process_time(), cpu_s(worker.proc.pid), time.perf_counter()
            print(f"pool.run: agent {(c1 - c0) / n * 1e6:6.1f} us  worker {(w1 - w0) / n * 1e6:6.1f} us  "
                  f"wall {(t1 - t0) / n * 1e6:6.1f} us  load {os.getloadavg()[0]:.1f}", flush=True)
    finally:
        pool.shutdown()


def machine_busy() -> tuple[float, float]:
    """The whole machine's busy and total jiffies so far (``/proc/stat``)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]
    return sum(v) - idle, sum(v)


class Window:
    """Samples, every ``period_s``, how many dispatches are in the node's stream (sent by the scheduler
    and not yet answered) and how many of them the agent has read (its pending list): the window of
    work in flight, and how much of it waits in the stream unread."""

    def __init__(self, url: str, stream: str, period_s: float = 0.002) -> None:
        import threading

        import redis
        self.r = redis.Redis.from_url(url)
        self.stream = stream
        self.period_s = period_s
        self.samples: list[tuple[int, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            try:
                pipe = self.r.pipeline(transaction=False)
                pipe.xlen(self.stream)
                pipe.xpending(self.stream, "agents")
                n, pend = pipe.execute()
                self.samples.append((int(n), int(pend["pending"])))
            except Exception:  # noqa: BLE001 - a sample lost is a sample lost
                pass

    def __enter__(self) -> Window:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def summary(self) -> str:
        if not self.samples:
            return "no samples"
        sent = sorted(s[0] for s in self.samples)
        read = sorted(s[1] for s in self.samples)
        unread = sorted(s[0] - s[1] for s in self.samples)
        def q(v: list[int]) -> str:
            return f"mean {sum(v) / len(v):.1f} p10 {v[len(v) // 10]} p50 {v[len(v) // 2]} p90 {v[len(v) * 9 // 10]}"
        share = {k: sum(1 for s in self.samples if s[0] == k) / len(self.samples) for k in range(max(sent) + 1)}
        return (f"{len(self.samples)} samples; share of samples by dispatches in the stream: "
                + " ".join(f"{k}:{v:.2f}" for k, v in share.items() if v >= 0.005) + "; "
                f"in the stream (sent, not answered): {q(sent)}; read by the "
                f"agent: {q(read)}; not yet read: {q(unread)}")


def command_calls(url: str) -> dict[str, int]:
    """Redis's count of calls per command so far."""
    import redis
    stats = redis.Redis.from_url(url).info("commandstats")
    return {k.removeprefix("cmdstat_"): v["calls"] for k, v in stats.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=3000)
    ap.add_argument("--bursts", type=int, default=2)
    ap.add_argument("--max-batches", default="8")
    ap.add_argument("--profile", help="py-spy's samples of the agent's last burst (raw stacks), written here")
    ap.add_argument("--py-spy", default="py-spy")
    ap.add_argument("--profile-of", choices=["agent", "scheduler"], default="agent",
                    help="the process that --profile samples")
    ap.add_argument("--window", action="store_true",
                    help="sample the dispatches in the node's stream every 2 ms (sent / read by the agent)")
    ap.add_argument("--vcpus", default="8")
    ap.add_argument("--pool", type=int, metavar="N", help="only time N warm /run calls through the worker pool")
    a = ap.parse_args()
    if a.pool:
        return pool_runs(a.pool)
    with tempfile.TemporaryDirectory(prefix="esg-bench-cpu-") as tmpdir, start_broker() as broker, \
            start_redis() as redis_server, ExitStack() as stack:
        tmp = Path(tmpdir)
        write_profiles(tmp / "profiles", 16)
        standin = stack.enter_context(OpenWhiskStandIn())
        deploy(standin, 16)
        prefix = "bcpu_"
        env = {"ESG_KAFKA": broker.address, "ESG_REDIS": redis_server.url, "ESG_OPENWHISK_API": standin.url,
               "ESG_OPENWHISK_AUTH": GUEST_KEY, "PYTHONPATH": str(ROOT), "ESG_TOPIC_PREFIX": prefix}
        driver = stack.enter_context(ControllerDriver(broker.address, prefix=prefix, catalog=standin.store.lookup))
        procs = stack.enter_context(Procs(tmp))
        sched = procs.spawn(["-m", "esg_cli.main", "scheduler", "--profiles", str(tmp / "profiles"),
                             "--log-level", "WARNING"], "scheduler", env)
        agent = procs.spawn(["-m", "esg_cli.main", "agent", "--name", NODE, "--fake-gpu", "A100-40GB",
                             "--vcpus", a.vcpus, "--max-batches", a.max_batches, "--log-level", "WARNING"], "agent", env)
        driver.wait_healthy(1, timeout=60)
        warm_up(driver, "guest/plain", 200)
        known: set[int] = set()
        for b in range(a.bursts):
            load0 = os.getloadavg()[0]
            ag0, cs0, known = tree_cpu(agent.pid, known)
            self0 = cpu_s(agent.pid)
            sc0 = cpu_s(sched.pid)
            th0 = threads_cpu(sched.pid)
            calls0 = command_calls(redis_server.url)
            spy = None
            if a.profile and b == a.bursts - 1:
                spy = subprocess.Popen([a.py_spy, "record", "-r", "500", "--gil", "-o", a.profile, "-f", "raw",
                                        "-p", str((agent if a.profile_of == "agent" else sched).pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                time.sleep(1)
            mb0 = machine_busy()
            others0 = sum(cpu_s(p) for p in (broker.process.pid, redis_server.process.pid)) + time.process_time()
            window = Window(redis_server.url, f"esg:{prefix}:node:{NODE}:dispatch") if a.window else None
            t0 = time.monotonic()
            with window or ExitStack():
                ids = [driver.publish("guest/plain", {"i": i}) for i in range(a.n)]
                driver.flush()
                missing = driver.wait_acked(ids, timeout=300)
            mb1 = machine_busy()
            others1 = sum(cpu_s(p) for p in (broker.process.pid, redis_server.process.pid)) + time.process_time()
            t1 = max(driver.acks[x].first_ack_s for x in ids if driver.acks[x].first_ack_s)
            ag1, cs1, known = tree_cpu(agent.pid, known)
            self1 = cpu_s(agent.pid)
            sc1 = cpu_s(sched.pid)
            th1 = threads_cpu(sched.pid)
            calls1 = command_calls(redis_server.url)
            if spy is not None:
                spy.send_signal(2)
                spy.wait(30)
            lat = sorted((driver.acks[x].first_ack_s - driver.published_s[x]) * 1000 for x in ids
                         if driver.acks[x].first_ack_s)
            print(f"burst {b}: {(a.n - len(missing)) / (t1 - t0):6.0f} act/s  p50 {lat[len(lat) // 2]:6.1f} ms  "
                  f"agent+workers {(ag1 - ag0) * 1000 / a.n:.3f} ms/act (agent {(self1 - self0) * 1000 / a.n:.3f})  scheduler {(sc1 - sc0) * 1000 / a.n:.3f} "
                  f"ms/act  switches {(cs1 - cs0) / a.n:.1f}/act  workers {len(known) - 1}  missing {len(missing)}  load {load0:.2f} -> "
                  f"{os.getloadavg()[0]:.2f}", flush=True)
            print(f"  machine busy {100 * (mb1[0] - mb0[0]) / max(1, mb1[1] - mb0[1]):.0f} % of all its cores; "
                  f"broker + redis + this driver {(others1 - others0) * 1000 / a.n:.3f} ms/act", flush=True)
            if window is not None:
                print("  window: " + window.summary(), flush=True)
            print("  scheduler's threads, ms of CPU per activation: " + ", ".join(
                f"{name} {(th1[name] - th0.get(name, 0.0)) * 1000 / a.n:.3f}" for name in sorted(th1)
                if th1[name] - th0.get(name, 0.0) > 0), flush=True)
            print("  redis calls per activation: " + ", ".join(
                f"{c} {(calls1.get(c, 0) - calls0.get(c, 0)) / a.n:.2f}" for c in
                ("xreadgroup", "exec", "xack", "xdel", "xadd", "evalsha", "eval") if calls1.get(c)), flush=True)


if __name__ == "__main__":
    main()
