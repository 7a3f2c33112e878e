"""The order of a turn's work: the step's dispatches leave before the turn's acks are encoded and produced,
so the agents run the next batches while the scheduler answers the last ones (docs/results/2026-11-28-live-path-runs.md, run N)."""

from __future__ import annotations

from tests.controller.test_service_basic import put


def test_a_turn_sends_its_dispatches_before_it_produces_its_acks(service_factory, agent_factory, driver, standin):
    """A burst of a plain action on a node of one vCPU: each result frees the node, and the turn that
    takes it in both acks that activation and dispatches the next one queued. The dispatch goes first;
    before, the turn produced its acks and wrote the dispatch with the ledger's writes after them, and the
    agent stood idle meanwhile."""
    put(standin, "plain")
    svc = service_factory()
    agent = agent_factory("node-a", vcpus=1)
    driver.wait_healthy(1, timeout=10)
    events: list[str] = []
    tick, write, produce = svc.tick, svc._write, svc.acks.produce

    def traced_tick(*a, **kw):
        events.append("turn")
        tick(*a, **kw)

    def traced_write(sends, *a, **kw):
        if sends:
            events.append("dispatch")
        write(sends, *a, **kw)

    def traced_produce():
        if svc.acks._ready:
            events.append("ack")
        produce()

    svc._write, svc.acks.produce, svc.tick = traced_write, traced_produce, traced_tick
    ids = [driver.publish("guest/plain", {"i": i}) for i in range(12)]
    driver.flush()
    assert not driver.wait_acked(ids, timeout=30)
    assert len(agent.batches) == 12 and all(len(b.requests) == 1 for b in agent.batches)
    turns, turn = [], []
    for e in events + ["turn"]:
        if e == "turn":
            turns.append(turn)
            turn = []
        else:
            turn.append(e)
    both = [t for t in turns if "ack" in t and "dispatch" in t]
    assert len(both) >= 5, turns        # the burst's answers free the node one at a time
    assert all(t.index("dispatch") < t.index("ack") for t in both), both


def test_answers_a_stopped_turn_had_not_handed_on_are_sent_at_close():
    """A turn stopped while Redis refused its dispatches (the retry gives up when the service stops) has
    answers it had not handed to the ack pipeline yet: closing hands them on before the last acks go, as
    when every answer went to the pipeline at once."""
    import queue
    import threading
    from types import SimpleNamespace

    from agent_channel.keys import Keys
    from controller_plugin.service import SchedulerService

    events: list[str] = []
    closed = SimpleNamespace(close=lambda: None)
    svc = SchedulerService.__new__(SchedulerService)
    svc.stop_event, svc._threads, svc.inbox = threading.Event(), [], queue.Queue()
    svc.acks = SimpleNamespace(answer=lambda a, instance: events.append(f"answer {a.entry.activation_id}"),
                               finish=lambda: events.append("finish"), stored=lambda ids: None)
    svc.registry = SimpleNamespace(instance=lambda topic: None)
    svc.plans = svc.bus = svc.metrics = svc.checkpoints = closed
    svc.redis = SimpleNamespace(close=lambda: None, hdel=lambda *a: None)
    svc.role, svc.holder, svc.keys = "leader", "h", Keys()
    svc.lease = SimpleNamespace(held=lambda: True, release=lambda: events.append("released"))
    svc.records = None
    svc._answers = [SimpleNamespace(entry=SimpleNamespace(activation_id=aid, topic="invoker0")) for aid in "ab"]
    svc.close()
    assert events == ["answer a", "answer b", "finish", "released"]
    assert svc._answers == []
