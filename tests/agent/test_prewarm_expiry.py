"""When an agent drops a pre-warm it takes too late (:func:`invoker_agent.service.prewarm_expired`)."""

from agent_channel.protocol import ActionRef, PrewarmMessage
from esg.model import Config
from invoker_agent.service import prewarm_expired


def _msg(keep_alive_ms, sent_ms):
    return PrewarmMessage("p1", "n0", "app", "f", ActionRef("guest", "f"), Config(1, 1, None), None, (),
                          keep_alive_ms, sent_ms=sent_ms)


def test_a_prewarm_taken_after_its_keep_alive_ran_out_since_it_was_sent_is_dropped():
    assert not prewarm_expired(_msg(5_000, 100_000), 105_000, idle_ttl_s=600)
    assert prewarm_expired(_msg(5_000, 100_000), 105_001, idle_ttl_s=600)


def test_with_no_keep_alive_the_agents_idle_ttl_bounds_it():
    assert not prewarm_expired(_msg(None, 100_000), 129_000, idle_ttl_s=30)
    assert prewarm_expired(_msg(None, 100_000), 130_001, idle_ttl_s=30)


def test_a_prewarm_that_does_not_say_when_it_was_sent_is_never_too_late():
    assert not prewarm_expired(_msg(5_000, None), 10**13, idle_ttl_s=1)
