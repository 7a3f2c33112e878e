"""The process worker backend with real worker subprocesses: result codes, limits, crashes, batches, pinning."""

from __future__ import annotations

import os
import re
import textwrap

import pytest

from agent_channel.protocol import RunRequest
from invoker_agent.actions import ActionCode
from invoker_agent.reconcile import Reconciler
from invoker_agent.workers import SHUT_DOWN, ProcessWorker, WorkerKey, WorkerPool, WorkerSpec
from tests.agent.agent_harness import orphan_worker_dir

pytestmark = pytest.mark.timeout(60)

CPU = (sorted(os.sched_getaffinity(0))[0],)

# "pid": which worker answered. Each worker has a PID namespace of its own, where its runtime's process id
# is the same in every worker: a token drawn when the worker loads the action tells them apart.
ECHO = """
import os
WORKER = os.urandom(8).hex()
def main(args):
    if args.get("fail"):
        return {"error": "bad input " + str(args["fail"])}
    if args.get("raise"):
        raise ValueError("boom")
    if args.get("sleep"):
        import time; time.sleep(args["sleep"])
    if args.get("exit"):
        os._exit(7)
    if args.get("not_dict"):
        return [1, 2]
    return {"x": args.get("x"), "pid": WORKER, "cvd": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "cpus": sorted(os.sched_getaffinity(0)), "activation": os.environ.get("__OW_ACTIVATION_ID"),
            "omp": os.environ.get("OMP_NUM_THREADS")}
"""
BATCHED = ECHO + """
def main_batch(args_list):
    return [dict(main(a), batched=len(args_list)) for a in args_list]
"""


def action(code: str, name: str = "echo", rev: str = "0.0.1", timeout_ms: int = 5000) -> ActionCode:
    return ActionCode(f"/guest/{name}", rev, "python:3.11", textwrap.dedent(code), timeout_ms=timeout_ms)


def reqs(*values):
    return [RunRequest(f"act-{i}", "tx", v) for i, v in enumerate(values)]


@pytest.fixture
def pool():
    p = WorkerPool(idle_ttl_s=60)
    yield p
    p.shutdown()


def key(a: ActionCode, slice_uuid=None, config="b1-c1") -> WorkerKey:
    return WorkerKey(a.fqn, a.revision, config, slice_uuid)


def test_a_worker_directory_left_by_a_killed_agent_goes_with_the_next_worker_start_and_a_live_ones_stays():
    orphan = orphan_worker_dir()
    assert orphan.name.startswith("esg-worker-") and (orphan / "action.log").exists()
    first = ProcessWorker(WorkerSpec(CPU), action(ECHO))
    assert not orphan.exists()
    second = ProcessWorker(WorkerSpec(CPU), action(ECHO))     # the first's owner (this process) still runs
    try:
        assert first.dir.exists() and second.dir.exists()
    finally:
        first.kill()
        second.kill()
    assert not first.dir.exists() and not second.dir.exists()


def test_success_application_and_developer_errors(pool):
    a = action(ECHO)
    out = pool.run(key(a), WorkerSpec(CPU), a, reqs({"x": 1}, {"fail": 2}, {"raise": 1}, {"not_dict": 1}))
    assert [r.status_code for r in out] == [0, 1, 2, 2]
    assert out[0].result["x"] == 1 and out[0].result["activation"] == "act-0"
    assert out[1].result == {"error": "bad input 2"}
    assert "ValueError: boom" in out[2].result["error"]
    assert "did not return a dictionary" in out[3].result["error"]
    assert out[0].init_ms is not None and out[0].init_ms > 0        # the cold start is reported once
    assert all(r.init_ms is None for r in out[1:])
    pids = {r.result.get("pid") for r in out if r.status_code == 0}
    assert len(pids) == 1 and pool.cold_starts == 1                 # one warm worker served them all


def test_warm_worker_is_reused_and_idle_ones_are_evicted():
    now = [0.0]
    pool = WorkerPool(idle_ttl_s=10, clock=lambda: now[0])
    try:
        a = action(ECHO)
        first = pool.run(key(a), WorkerSpec(CPU), a, reqs({"x": 1}))[0]
        second = pool.run(key(a), WorkerSpec(CPU), a, reqs({"x": 2}))[0]
        assert first.result["pid"] == second.result["pid"] and second.init_ms is None
        other = pool.run(key(a, config="b1-c2"), WorkerSpec(CPU), a, reqs({"x": 3}))[0]
        assert other.result["pid"] != first.result["pid"]           # another config: another worker
        assert pool.warm_count() == 2
        now[0] = 5
        assert pool.evict_idle() == 0
        now[0] = 20
        assert pool.evict_idle() == 2 and pool.warm_count() == 0
        third = pool.run(key(a), WorkerSpec(CPU), a, reqs({"x": 4}))[0]
        assert third.ok and third.init_ms is not None
    finally:
        pool.shutdown()


def test_each_worker_is_evicted_after_its_own_keep_alive_else_the_pool_default():
    now = [0.0]
    pool = WorkerPool(idle_ttl_s=10, clock=lambda: now[0])
    try:
        a = action(ECHO)
        short, default, long = key(a, config="short"), key(a, config="default"), key(a, config="long")
        pool.run(short, WorkerSpec(CPU), a, reqs({"x": 1}), keep_alive_s=2)
        pool.run(default, WorkerSpec(CPU), a, reqs({"x": 2}))
        assert pool.prewarm(long, WorkerSpec(CPU), a, keep_alive_s=30).started
        assert pool.warm_count() == 3
        now[0] = 5        # past the batch's own 2 s, within the pool's 10 s
        assert pool.evict_idle() == 1 and pool.warm_count(short) == 0 and pool.warm_count(default) == 1
        now[0] = 15       # past the pool's 10 s; the pre-warmed worker's 30 s still runs
        assert pool.evict_idle() == 1 and pool.warm_count(default) == 0 and pool.warm_count(long) == 1
        # a batch without a keep-alive of its own gives the worker the pool's TTL again, from its end
        again = pool.run(long, WorkerSpec(CPU), a, reqs({"x": 3}))[0]
        assert again.ok and again.init_ms is None
        now[0] = 24
        assert pool.evict_idle() == 0
        now[0] = 26
        assert pool.evict_idle() == 1 and pool.warm_count() == 0
    finally:
        pool.shutdown()


def test_a_batch_takes_the_idle_worker_that_would_stay_longest():
    from concurrent.futures import ThreadPoolExecutor
    now = [0.0]
    pool = WorkerPool(idle_ttl_s=10, clock=lambda: now[0])
    ex = ThreadPoolExecutor(2)      # kept until the end: a worker dies with the thread that started it
    try:
        a = action(ECHO)
        k = key(a)
        # two workers of one kind, left idle by two concurrent batches: one for 5 s, one for 50 s
        runs = [ex.submit(pool.run, k, WorkerSpec(CPU), a, reqs({"sleep": 1}), None, ttl) for ttl in (5, 50)]
        short, long = (f.result()[0] for f in runs)
        assert short.result["pid"] != long.result["pid"] and pool.idle_counts() == {k: 2}
        took = pool.run(k, WorkerSpec(CPU), a, reqs({"x": 1}))[0]
        assert took.init_ms is None and took.result.get("pid") == long.result["pid"], took
        now[0] = 6        # the 5 s one expires; the one the batch used (now the pool's 10 s) stays
        assert pool.evict_idle() == 1 and pool.idle_counts() == {k: 1}
        assert pool.run(k, WorkerSpec(CPU), a, reqs({"x": 2}))[0].result["pid"] == long.result["pid"]
    finally:
        pool.shutdown()
        ex.shutdown()


def test_idle_workers_stopped_for_a_new_one_go_before_it_starts_those_expiring_first_never_a_busy_one():
    import time
    from concurrent.futures import ThreadPoolExecutor
    now = [0.0]
    pool = WorkerPool(idle_ttl_s=10, clock=lambda: now[0])
    ex = ThreadPoolExecutor(1)      # kept until the end: a worker dies with the thread that started it
    try:
        a = action(ECHO)
        late, soon, elsewhere = key(a, "MIG-s", "late"), key(a, "MIG-s", "soon"), key(a, "MIG-t", "soon")
        for k, ttl in ((late, 50), (soon, 5), (elsewhere, 1)):
            assert pool.run(k, WorkerSpec(CPU), a, reqs({"x": 1}), keep_alive_s=ttl)[0].ok
        new, seen = key(a, "MIG-s", "new"), []

        def before_start():     # the new worker is not there yet; one idle worker goes first
            seen.append((pool.warm_count(new), pool.stop_idle([late, soon], 1)))
        out = pool.run(new, WorkerSpec(CPU), a, reqs({"x": 2}), before_start=before_start)[0]
        assert out.ok and out.init_ms is not None and seen == [(0, 1)]
        # the one whose keep-alive runs out first went, as expiry would take it; the other instance's stays
        assert pool.idle_counts() == {late: 1, elsewhere: 1, new: 1}
        # a batch that finds its worker warm starts none: nothing is called
        assert pool.run(new, WorkerSpec(CPU), a, reqs({"x": 3}), before_start=before_start)[0].init_ms is None
        assert len(seen) == 1
        # more asked than are idle: those there are; none asked: none
        assert pool.stop_idle([late, soon], 5) == 1 and pool.stop_idle([new], 0) == 0
        assert pool.idle_counts() == {elsewhere: 1, new: 1}
        # a busy worker is never stopped
        running = ex.submit(pool.run, late, WorkerSpec(CPU), a, reqs({"sleep": 1.5}))
        deadline = time.monotonic() + 20
        while pool.warm_count(late) == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert pool.warm_count(late) == 1 and pool.stop_idle([late], 1) == 0
        assert running.result()[0].ok and pool.idle_counts()[late] == 1
    finally:
        pool.shutdown()
        ex.shutdown()


def test_a_prewarmed_worker_serves_the_next_batch_warm_and_a_second_prewarm_is_a_no_op(pool):
    a = action(ECHO)
    k = key(a)
    got = pool.prewarm(k, WorkerSpec(CPU), a, keep_alive_s=60, init_env={"MODEL": "m"})
    assert got.started and got.init_ms is not None and got.error is None
    assert pool.cold_starts == 1 and pool.idle_counts() == {k: 1}
    assert pool.prewarm(k, WorkerSpec(CPU), a, keep_alive_s=60).warm and pool.cold_starts == 1
    out = pool.run(k, WorkerSpec(CPU), a, reqs({"x": 1}))[0]
    assert out.ok and out.init_ms is None and pool.cold_starts == 1


def test_a_prewarm_with_no_keep_alive_keeps_its_worker_the_pools_idle_ttl():
    now = [0.0]
    p = WorkerPool(idle_ttl_s=30, clock=lambda: now[0])
    try:
        a = action(ECHO)
        k = key(a)
        assert p.prewarm(k, WorkerSpec(CPU), a, keep_alive_s=5).started
        now[0] = 4.0
        assert p.prewarm(k, WorkerSpec(CPU), a, keep_alive_s=None).warm, "the idle one, kept the idle TTL from now"
        now[0] = 33.0
        p.evict_idle()
        assert p.idle_counts() == {k: 1}
        now[0] = 35.0
        p.evict_idle()
        assert p.warm_count() == 0
    finally:
        p.shutdown()


def test_a_prewarm_that_cannot_start_says_why_and_leaves_no_worker(pool):
    bad = action("import not_a_module_anywhere\n\ndef main(a):\n    return a\n", name="bad")
    got = pool.prewarm(key(bad), WorkerSpec(CPU), bad, keep_alive_s=60)
    assert not got.started and not got.warm and "not_a_module_anywhere" in got.error
    assert pool.warm_count() == 0


def test_time_limit_gives_developer_error_with_timeout_and_a_fresh_worker_next(pool):
    a = action(ECHO, timeout_ms=400)
    out = pool.run(key(a), WorkerSpec(CPU), a, reqs({"x": 0}, {"sleep": 5}, {"x": 2}))
    assert [r.status_code for r in out] == [0, 2, 0]
    assert out[1].timeout and out[1].annotations == {"timeout": True}
    assert "exceeded its time limits of 400 milliseconds" in out[1].result["error"]
    assert out[2].result["pid"] != out[0].result["pid"] and out[2].init_ms is not None


def test_worker_crash_is_a_developer_error_and_the_pool_recovers(pool):
    # OpenWhisk's ActivationResponse: a container that exits mid-run is developerError(abnormalRun)
    a = action(ECHO)
    out = pool.run(key(a), WorkerSpec(CPU), a, reqs({"x": 0}, {"exit": 1}, {"x": 2}))
    assert [r.status_code for r in out] == [0, 2, 0]
    assert "exited unexpectedly" in out[1].result["error"] and "exit code 7" in out[1].result["error"]
    assert out[2].result["pid"] != out[0].result["pid"]


def test_batch_entry_point_is_one_run_call(pool):
    a = action(BATCHED, name="batched")
    out = pool.run(key(a), WorkerSpec(CPU), a, reqs(*({"x": i} for i in range(8))))
    assert [r.status_code for r in out] == [0] * 8
    assert [r.result["x"] for r in out] == list(range(8))
    assert all(r.result["batched"] == 8 and r.batch_size == 8 for r in out)
    assert len({r.result["pid"] for r in out}) == 1
    assert all(r.init_ms is not None for r in out)                   # all of them waited for the cold start
    again = pool.run(key(a), WorkerSpec(CPU), a, reqs({"x": 1}, {"fail": 3}))
    assert [r.status_code for r in again] == [0, 1] and again[1].result["batched"] == 2


def test_without_batch_entry_point_each_request_runs_on_the_same_warm_worker(pool):
    a = action(ECHO)
    out = pool.run(key(a), WorkerSpec(CPU), a, reqs(*({"x": i} for i in range(4))))
    assert [r.result["x"] for r in out] == [0, 1, 2, 3]
    assert "batched" not in out[0].result and len({r.result["pid"] for r in out}) == 1


def test_a_batch_that_crashes_fails_every_request_with_a_developer_error(pool):
    a = action(BATCHED, name="batched")
    out = pool.run(key(a), WorkerSpec(CPU), a, reqs({"x": 1}, {"exit": 1}))
    assert [r.status_code for r in out] == [2, 2]
    assert pool.run(key(a), WorkerSpec(CPU), a, reqs({"x": 5}))[0].ok


def test_action_that_fails_to_import_is_a_clear_developer_error_and_the_pool_still_works(pool):
    broken = action("import no_such_module_xyz\ndef main(a):\n    return {}\n", name="broken")
    out = pool.run(key(broken), WorkerSpec(CPU), broken, reqs({}, {}))
    assert [r.status_code for r in out] == [2, 2]
    assert "ModuleNotFoundError" in out[0].result["error"] and "no_such_module_xyz" in out[0].result["error"]
    assert pool.warm_count(key(broken)) == 0
    no_main = action("def handler(a):\n    return {}\n", name="nomain")
    out = pool.run(key(no_main), WorkerSpec(CPU), no_main, reqs({}))
    assert out[0].status_code == 2 and "'main'" in out[0].result["error"]
    good = action(ECHO)
    assert pool.run(key(good), WorkerSpec(CPU), good, reqs({"x": 1}))[0].ok


def test_bad_vcpu_ids_are_a_whisk_error_not_a_crash(pool):
    a = action(ECHO)
    out = pool.run(key(a), WorkerSpec((4096,)), a, reqs({"x": 1}))
    assert out[0].status_code == 3 and "4096" in out[0].result["error"]


def test_workers_are_pinned_to_vcpus_and_see_exactly_their_mig_slice(make_fake_env):
    env = make_fake_env("A100-40GB")
    rec = Reconciler(env.backend)
    assert rec.reconcile_gpu(0, ["3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb"]).status == "success"
    slices = rec.read_state(0)
    pool = WorkerPool(slice_exists=lambda u: u in env.host.mig_uuids())
    rec.busy_slices = pool.busy_slices
    try:
        a = action(ECHO)
        cpus = sorted(os.sched_getaffinity(0))
        seen = {}
        for i, s in enumerate(slices):
            vcpus = (cpus[i % len(cpus)],)
            r = pool.run(key(a, s.mig_uuid), WorkerSpec(vcpus, s.mig_uuid), a, reqs({"x": i}))[0]
            assert r.ok, r.result
            assert r.result["cpus"] == list(vcpus) and r.result["omp"] == "1"
            seen[s.mig_uuid] = r.result["cvd"]
        existing = {ci.mig_uuid for ci in env.backend.compute_instances(0)}
        for uuid, cvd in seen.items():
            assert cvd == uuid and cvd.startswith("MIG-") and "," not in cvd and cvd in existing
        gone = pool.run(key(a, "MIG-00000000-dead"), WorkerSpec(CPU, "MIG-00000000-dead"), a, reqs({}))
        assert gone[0].status_code == 3 and "does not exist" in gone[0].result["error"]
        cpu_only = pool.run(key(a), WorkerSpec(CPU), a, reqs({}))[0]
        assert cpu_only.result["cvd"] == ""                       # CPU-only work sees no GPU
    finally:
        pool.shutdown()


def test_slice_is_busy_while_running_and_the_reconciler_leaves_it_alone(make_fake_env):
    import threading
    env = make_fake_env("A30")
    rec = Reconciler(env.backend)
    rec.reconcile_gpu(0, ["2g.12gb", "2g.12gb"])
    target = rec.read_state(0)[0]
    pool = WorkerPool()
    rec.busy_slices = pool.busy_slices
    a = action(ECHO)
    try:
        pool.run(key(a, target.mig_uuid), WorkerSpec(CPU, target.mig_uuid), a, reqs({}))   # warm it up
        t = threading.Thread(target=pool.run, args=(key(a, target.mig_uuid), WorkerSpec(CPU, target.mig_uuid),
                                                     a, reqs({"sleep": 1.0})))
        t.start()
        for _ in range(200):
            if pool.busy_slices():
                break
            threading.Event().wait(0.005)
        assert pool.busy_slices() == {target.mig_uuid}
        report = rec.reconcile_gpu(0, ["4g.24gb"])
        assert report.status == "pending" and target.mig_uuid in env.host.mig_uuids()
        t.join(10)
        assert pool.busy_slices() == set()
        assert rec.reconcile_gpu(0, ["4g.24gb"]).status == "success"
    finally:
        pool.shutdown()


def test_binary_zip_action(pool):
    import base64
    import io
    import zipfile
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("__main__.py", "from helper import twice\ndef main(a):\n    return {'y': twice(a['x'])}\n")
        z.writestr("helper.py", "def twice(v):\n    return 2 * v\n")
    a = ActionCode("/guest/zipped", "1", "python:3.11", base64.b64encode(buf.getvalue()).decode(), binary=True)
    assert pool.run(key(a), WorkerSpec(CPU), a, reqs({"x": 21}))[0].result == {"y": 42}


ENV_READER = """
import os
def main(args):
    return {"model": os.environ.get("MODEL"), "cfg": os.environ.get("CFG"), "ns": os.environ.get("__OW_NAMESPACE")}
"""


def test_init_arguments_are_the_new_workers_environment_and_ow_values_win(pool):
    a = action(ENV_READER, name="envreader")
    first = [RunRequest("act-0", "tx", {}, init_env={"MODEL": "resnet", "CFG": {"k": 1}, "__OW_NAMESPACE": "x"})]
    out = pool.run(key(a), WorkerSpec(CPU), a, first)
    assert out[0].result == {"model": "resnet", "cfg": '{"k": 1}', "ns": "guest"}
    again = pool.run(key(a), WorkerSpec(CPU), a, [RunRequest("act-1", "tx", {}, init_env={"MODEL": "other"})])
    assert again[0].result["model"] == "resnet"          # a warm worker keeps its environment, as in OpenWhisk


def test_a_batch_knows_whether_another_workers_start_overlapped_it(pool):
    """A warm batch alone on the node saw no worker start; one during which another action's worker came
    up did (its run time carries that start); a twin worker's start, a mere wait, is not counted."""
    import threading

    a, b = action(ECHO), action(ECHO, name="other")
    pool.run(key(a), WorkerSpec(CPU), a, reqs({"x": 1}))             # a is warm from now on
    mark = pool.mark()
    pool.run(key(a), WorkerSpec(CPU), a, reqs({"sleep": 0.05}))
    assert pool.starts_since(mark) == 0
    mark = pool.mark()
    warm = threading.Thread(target=pool.run, args=(key(a), WorkerSpec(CPU), a, reqs({"sleep": 1.0})))
    warm.start()
    pool.run(key(b), WorkerSpec(CPU), b, reqs({"x": 2}))              # b's first worker starts meanwhile
    warm.join()
    assert pool.starts_since(mark) == 1

    class Waiting(ProcessWorker):
        """A worker whose start says it loads nothing (as a twin's, which only waits)."""
        start_loads_host = False

    quiet = WorkerPool(factory=Waiting, idle_ttl_s=60)
    try:
        mark = quiet.mark()
        out = quiet.run(key(a), WorkerSpec(CPU), a, reqs({"x": 1}))
        assert out[0].init_ms is not None and quiet.starts_since(mark) == 0
    finally:
        quiet.shutdown()


PRINTER = """
def main(args):
    print(args["text"] * args["times"])
    return {"ok": True}
"""


def test_each_run_gets_the_lines_it_printed_however_long_and_the_worker_replies_with_the_headers_it_needs(pool):
    """The log is read from where the last run's lines ended (a kept descriptor, reads until one comes
    back short); the runtime's reply has Date, Content-Type and Content-Length, and no Server header."""
    import http.client
    import socket
    a = action(PRINTER, name="printer")
    runs = [("a", 5), ("b", 200_000), ("c", 3)]                 # the second more than one read (64 KiB)
    for text, times in runs:
        out = pool.run(key(a), WorkerSpec(CPU), a, [RunRequest(f"act-{text}", "tx", {"text": text, "times": times})])
        assert out[0].status_code == 0 and len(out[0].logs) == 1
        stamp, _, printed = out[0].logs[0].partition(" stdout: ")      # as OpenWhisk's log store shows it
        assert printed == text * times and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z", stamp)
    worker = next(iter(pool._workers.values())).entries[0].worker
    worker.client.close()                   # the worker serves one connection at a time
    conn = http.client.HTTPConnection("localhost", timeout=5)      # on the worker's Unix socket
    conn.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.sock.connect(worker.client.unix_path)
    conn.request("POST", "/run", b'{"value": {"text": "d", "times": 1}}', {"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200 and resp.read() == b'{"ok": true}'
    assert resp.getheader("Server") is None and resp.getheader("Date", "").endswith(" GMT")
    assert resp.getheader("Content-Type") == "application/json" and resp.getheader("Content-Length") == "12"
    conn.close()
    worker.kill()
    assert worker._log_fd is None


def test_a_worker_whose_start_ends_after_the_pool_shut_down_is_killed_and_the_pool_serves_again():
    """A pool shut down while a worker starts (a pre-warm under way as the agent stops) kills that worker
    as its start ends -- shutdown could not see it -- and keeps nothing. The pool serves again after it
    (``esg profile`` empties it between configurations)."""
    import threading

    starting, release = threading.Event(), threading.Event()
    made: list[ProcessWorker] = []

    class Slow(ProcessWorker):
        def start(self) -> None:
            made.append(self)
            starting.set()
            assert release.wait(10)
            super().start()

    slow = WorkerPool(factory=Slow, idle_ttl_s=60)
    a = action(ECHO)
    outcome = []
    t = threading.Thread(target=lambda: outcome.append(slow.prewarm(key(a), WorkerSpec(CPU), a, None)))
    t.start()
    try:
        assert starting.wait(10)
        slow.shutdown()
    finally:
        release.set()
        t.join(20)
    try:
        assert outcome and outcome[0].error == SHUT_DOWN and not outcome[0].started
        assert len(made) == 1 and not made[0].alive() and slow.warm_count() == 0
        out = slow.run(key(a), WorkerSpec(CPU), a, reqs({"x": 1}))
        assert out[0].status_code == 0 and out[0].result["x"] == 1
        assert len(made) == 2 and made[1].alive() and slow.warm_count() == 1
    finally:
        slow.shutdown()
    assert not made[1].alive() and slow.warm_count() == 0
