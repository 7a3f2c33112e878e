"""Where an activation's publish->ack time goes in the scheduler, at a steady trickle.

    PYTHONPATH=. python benchmarks/trace_scheduler.py [--n 300] [--rate 50]

One Tansu broker and one redis-server; the scheduler runs in this process (its threads as ``esg
scheduler`` runs them), the fast echo agent of ``bench_scheduler.py`` in its own. A few methods are
wrapped to note, per activation, when each hand-off happened (``time.monotonic``, the clock the
controller driver notes publishes and acks with):

* ``read``    -- the activation reader has it from the consumer (Kafka hop in);
* ``taken``   -- the main loop took it from the inbox (reader -> main loop hand-off);
* ``stepped`` -- the step decided its batch and the acks answered in the turn were produced;
* ``sent``    -- the turn's pipeline carrying its dispatch returned (its Redis round trip);
* ``result``  -- the Redis reader thread has its result (agent round trip);
* ``rtaken``  -- the main loop took the result (Redis reader -> main loop hand-off);
* ``acked``   -- the ack was handed to the producer;
* ``ack in``  -- the driver's consumer had it (Kafka hop out, producer wake-up included).

Medians of each step are printed; the wrapping adds a little work of its own to each step.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agent_channel import protocol  # noqa: E402
from benchmarks.bench_scheduler import Procs, alternate, deploy, warm_up, write_profiles  # noqa: E402
from controller_plugin.ack_pipeline import AckPipeline  # noqa: E402
from controller_plugin.activations import Accepted, ActivationReader  # noqa: E402
from controller_plugin.dispatcher import Delivered  # noqa: E402
from controller_plugin.service import SchedulerService  # noqa: E402
from controller_plugin.settings import SchedulerSettings  # noqa: E402
from esg_cli.controller_driver import ControllerDriver  # noqa: E402
from esg_cli.openwhisk_standin import GUEST_KEY, OpenWhiskStandIn  # noqa: E402
from esg_cli.servers import start_broker, start_redis  # noqa: E402

STEPS = ("read", "taken", "stepped", "sent", "result", "rtaken", "acked")


def instrument(svc: SchedulerService, marks: dict[str, dict[str, float]]) -> None:
    def mark(step: str, ids) -> None:
        t = time.monotonic()
        for a in ids:
            marks.setdefault(a, {}).setdefault(step, t)

    take, write, produce, put = ActivationReader._take, svc._write, AckPipeline.produce, svc.inbox.put

    def reader_take(self, records):
        fresh = take(self, records)
        mark("read", [e.activation_id for e in fresh])
        return fresh

    def service_take(item, mono, t):
        if isinstance(item, Accepted):
            mark("taken", [item.msg.activation_id])
        elif isinstance(item, protocol.BatchResult):
            mark("rtaken", [r.activation_id for r in item.results])
        original_take(item, mono, t)

    def service_write(sends, decided_ms=None, prewarms=None):
        mark("stepped", [r.activation_id for s in sends for r in s.message.requests])
        write(sends, decided_ms, prewarms)
        mark("sent", [r.activation_id for s in sends for r in s.message.requests])

    def inbox_put(item, *a, **kw):
        if isinstance(item, Delivered):
            mark("result", [r.activation_id for m in item.messages if isinstance(m, protocol.BatchResult)
                            for r in m.results])
        put(item, *a, **kw)

    def acks_produce(self):
        ids = [p.entry.activation_id for p in self._pending]
        produce(self)
        mark("acked", ids)

    original_take = svc._take
    ActivationReader._take = reader_take
    svc._take = service_take
    svc._write = service_write
    svc.inbox.put = inbox_put
    AckPipeline.produce = acks_produce


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=300, help="activations traced")
    ap.add_argument("--rate", type=float, default=50.0, help="activations/s")
    a = ap.parse_args()
    prefix = "trace_"
    with tempfile.TemporaryDirectory(prefix="esg-trace-") as tmpdir, start_broker() as broker, \
            start_redis() as redis_server, OpenWhiskStandIn() as standin, Procs(Path(tmpdir)) as procs:
        tmp = Path(tmpdir)
        write_profiles(tmp / "profiles", 16)
        deploy(standin, 16)
        svc = SchedulerService(SchedulerSettings(kafka=broker.address, redis_url=redis_server.url,
                                        openwhisk_api=standin.url, openwhisk_auth=GUEST_KEY,
                                        topic_prefix=prefix, profiles_dir=tmp / "profiles"))
        marks: dict[str, dict[str, float]] = {}
        instrument(svc, marks)
        svc.start()
        loop = threading.Thread(target=svc.run, daemon=True)
        loop.start()
        procs.spawn([str(ROOT / "benchmarks" / "bench_scheduler.py"), "--role", "agent", "--redis",
                     redis_server.url, "--prefix", prefix], "trace-echo", ready=True)
        with ControllerDriver(broker.address, prefix=prefix, catalog=standin.store.lookup) as d:
            d.wait_healthy(1, timeout=60)
            warm_up(d, "guest/plain")
            ids = alternate([d], "guest/plain", a.rate, a.n / a.rate, lambda k: {"k": k})[0]
            rows = []
            for aid in ids:
                m = marks.get(aid, {})
                ack = d.acks[aid].first_ack_s
                if ack is None or any(s not in m for s in STEPS):
                    continue
                rows.append([m["read"] - d.published_s[aid]] +
                            [m[b] - m[s] for s, b in zip(STEPS, STEPS[1:])] +
                            [ack - m["acked"], ack - d.published_s[aid]])
        svc.stop()
        loop.join(10)
        svc.close()
    names = ["publish -> read", *(f"{s} -> {b}" for s, b in zip(STEPS, STEPS[1:])), "acked -> ack in", "total"]
    print(f"{len(rows)} activations at {a.rate:.0f}/s, medians in ms:")
    for i, name in enumerate(names):
        print(f"  {name:22s} {statistics.median(r[i] for r in rows) * 1000:7.2f}")


if __name__ == "__main__":
    main()
