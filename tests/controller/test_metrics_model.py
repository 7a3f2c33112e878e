"""The scheduler's metrics model: per app and function, bounded labels, stages, queues, nodes."""

from __future__ import annotations

from agent_channel.metrics import OTHER, Bounded
from controller_plugin.metrics import Metrics, placement, wait_reason
from esg.cluster import Fit, SliceRef
from esg.events import Dispatch, RequestOutcome
from esg.model import Config, Job
from esg.queues import AfwQueues


def job(app: str, fn: str, i: int, enqueued_ms: float) -> Job:
    return Job(f"{app}-{fn}-{i}", f"r{i}", app, fn, enqueued_ms, enqueued_ms + 1000, enqueued_ms)


def batch(app: str, fn: str, n: int, fit: Fit, enqueued_ms: float = 0.0) -> Dispatch:
    return Dispatch(f"b-{app}-{fn}-{n}", app, fn, tuple(job(app, fn, i, enqueued_ms) for i in range(n)),
                    Config(n, 1, "1g.5gb"), fit)


def value(m: Metrics, name: str, **labels: str) -> float:
    return m.registry.get_sample_value(name, labels) or 0.0


def test_bounded_passes_the_first_values_and_counts_the_rest_as_other():
    b = Bounded(2)
    assert [b("a"), b("b"), b("c"), b("a"), b("d")] == ["a", "b", OTHER, "a", OTHER]
    assert len(b) == 2


def test_slo_results_and_latency_are_counted_per_app():
    m = Metrics()
    m.accepted("guest/a", 200.0)
    m.accepted("guest/b", 100.0)
    m.outcomes([RequestOutcome("1", "guest/a", 0, 150, 200, True),
                RequestOutcome("2", "guest/a", 0, 250, 200, True),       # late: a miss
                RequestOutcome("3", "guest/b", 0, 50, 100, False),       # failed: a miss
                RequestOutcome("4", "guest/b", 0, 0, 100, False, rejected=True)])
    assert value(m, "esg_requests_total", app="guest/a") == 1
    assert value(m, "esg_slo_total", app="guest/a", result="hit") == 1
    assert value(m, "esg_slo_total", app="guest/a", result="miss") == 1
    assert value(m, "esg_slo_total", app="guest/b", result="miss") == 1
    assert value(m, "esg_slo_total", app="guest/b", result="rejected") == 1
    assert value(m, "esg_slo_seconds", app="guest/a") == 0.2
    assert value(m, "esg_request_seconds_count", app="guest/a") == 2
    assert value(m, "esg_request_seconds_sum", app="guest/a") == 0.4
    assert value(m, "esg_request_seconds_count", app="guest/b") == 1     # the rejected one never ran
    assert value(m, "esg_request_seconds_bucket", app="guest/a", le="0.15") == 1


def test_apps_past_the_bound_share_one_label():
    m = Metrics(max_apps=2)
    for app in ("a", "b", "c", "d"):
        m.accepted(app, 100.0)
    assert value(m, "esg_requests_total", app="a") == 1 and value(m, "esg_requests_total", app="b") == 1
    assert value(m, "esg_requests_total", app=OTHER) == 2
    apps = {s.labels["app"] for fam in m.registry.collect() for s in fam.samples if "app" in s.labels}
    assert apps == {"a", "b", OTHER}


def test_functions_past_the_bound_share_one_label():
    m = Metrics(max_functions=1)
    m.sent([batch("a", "f", 2, Fit("n0")), batch("a", "g", 3, Fit("n0"))])
    assert value(m, "esg_jobs_total", app="a", function="f") == 2
    assert value(m, "esg_jobs_total", app="a", function=OTHER) == 3


def test_dispatches_are_counted_by_placement_with_their_batch_sizes_and_planned_mig_changes():
    s0, s1 = SliceRef("1g.5gb", 0), SliceRef("1g.5gb", 1)
    warm = batch("a", "f", 4, Fit("n0", s0, warm_worker=("f", s0)))
    carve = batch("a", "f", 2, Fit("n1", s1, create=True, destroy=(SliceRef("3g.20gb", 0),)))
    cold = batch("a", "g", 1, Fit("n0"))
    assert [placement(d) for d in (warm, carve, cold)] == ["warm", "reconfigure", "cold"]
    m = Metrics()
    m.sent([warm, carve, cold])
    assert value(m, "esg_decisions_total", app="a", function="f", placement="warm") == 1
    assert value(m, "esg_decisions_total", app="a", function="f", placement="reconfigure") == 1
    assert value(m, "esg_decisions_total", app="a", function="g", placement="cold") == 1
    assert value(m, "esg_batch_size_sum", app="a", function="f") == 6
    assert value(m, "esg_batch_size_bucket", app="a", function="f", le="2.0") == 1
    assert value(m, "esg_mig_changes_planned_total", node="n1", op="create") == 1
    assert value(m, "esg_mig_changes_planned_total", node="n1", op="destroy") == 1


def test_a_batchs_stages_add_up_to_its_time_from_queue_to_answer():
    m = Metrics()
    d = batch("a", "f", 2, Fit("n0"), enqueued_ms=1000.0)
    m.batch_done(d, decided_ms=1040.0, sent_ms=1042.0, done_ms=1100.0, run_ms=50.0, cold=True)
    stages = {s: value(m, "esg_stage_seconds_sum", app="a", function="f", stage=s)
              for s in ("queue", "dispatch", "run", "return")}
    assert stages == {"queue": 0.04, "dispatch": 0.002, "run": 0.05, "return": 0.008}
    assert abs(sum(stages.values()) - 0.1) < 1e-9
    assert value(m, "esg_cold_starts_total", app="a", function="f") == 1


def test_queue_length_and_head_age_read_zero_once_a_queue_empties():
    queues = AfwQueues()
    for i in range(3):
        queues.push(job("a", "f", i, 1000.0 + i))
    m = Metrics()
    m.set_queues(queues, 3000.0)
    assert value(m, "esg_afw_queue_length", app="a", function="f") == 3
    assert value(m, "esg_afw_queue_head_age_seconds", app="a", function="f") == 2.0
    queues.get(("a", "f")).take(3)
    m.set_queues(queues, 4000.0)
    assert value(m, "esg_afw_queue_length", app="a", function="f") == 0
    assert value(m, "esg_afw_queue_head_age_seconds", app="a", function="f") == 0


def test_waiting_queues_are_counted_by_reason_class():
    assert wait_reason("none of 12 configurations fits on any of 2 nodes") == "no_fit"
    assert wait_reason("nothing fits: no free vCPUs on any node") == "no_vcpus"
    assert wait_reason("something new") == "other"
    m = Metrics()
    m.set_waiting({("a", "f"): "no configuration meets the remaining budget",
                   ("a", "g"): "none of 3 configurations fits on any of 1 nodes",
                   ("b", "h"): "none of 4 configurations fits on any of 1 nodes"})
    assert value(m, "esg_afw_queues_waiting", reason="no_fit") == 2
    assert value(m, "esg_afw_queues_waiting", reason="no_configuration") == 1
    assert value(m, "esg_afw_queues_waiting", reason="policy_holds") == 0


def test_a_lost_node_reads_zero():
    m = Metrics()
    m.set_nodes(["n0", "n1"], ["n0", "n1"])
    m.set_nodes(["n0"], ["n0", "n1"])
    assert value(m, "esg_node_up", node="n0") == 1 and value(m, "esg_node_up", node="n1") == 0
    assert value(m, "esg_agents_alive") == 1


def test_metrics_are_served_on_loopback_by_default():
    import requests

    from esg_cli.servers import free_port
    m = Metrics()
    port = free_port()
    m.serve(port)
    try:
        assert m._endpoint is not None and m._endpoint.host == "127.0.0.1"
        assert "esg_agents_alive" in requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    finally:
        m.close()


def test_fast_series_expose_as_prometheus_counters_and_histograms():
    """What the lock-free series expose is what prometheus_client's own would: the text a scraper parses."""
    from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

    from agent_channel.metrics import FastCounter, FastHistogram

    ours, theirs = CollectorRegistry(), CollectorRegistry()
    fc = FastCounter("esg_x", "x", ["app"], ours)
    fh = FastHistogram("esg_y_seconds", "y", ["app"], ours, (0.1, 0.5, 1))
    pc = Counter("esg_x", "x", ["app"], registry=theirs)
    ph = Histogram("esg_y_seconds", "y", ["app"], buckets=(0.1, 0.5, 1), registry=theirs)
    for v in (0.05, 0.1, 0.3, 0.5, 0.7, 2.0, 0.1):
        fc.labels("a").inc(2)
        pc.labels("a").inc(2)
        fh.labels("a").observe(v)
        ph.labels("a").observe(v)

    def samples(registry):
        return sorted(line for line in generate_latest(registry).decode().splitlines()
                      if line and not line.startswith("#") and "_created" not in line)

    assert samples(ours) == samples(theirs)
