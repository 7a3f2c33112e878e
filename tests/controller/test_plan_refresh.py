"""Plans past their TTL are read again behind the activations, never on their way (stale while
revalidating): only an action never planned is read while its activation waits."""

from __future__ import annotations

import threading
from types import SimpleNamespace

from controller_plugin import plans as plans_module
from controller_plugin.metadata import ActionMeta, ActivationError, ProfileStore
from controller_plugin.plans import PlanCache


class SlowApi:
    """The REST API's metadata: one plain action, whose memory can change; a read can be held."""

    def __init__(self) -> None:
        self.memory = 256
        self.reads = 0
        self.hold = threading.Event()
        self.hold.set()
        self.gone = False

    def action(self, fqn, revision, cache=True, auth=None):
        self.hold.wait(10)
        self.reads += 1
        if self.gone:
            raise ActivationError("The requested resource does not exist.", 2)
        return ActionMeta("guest", "hello", "0.0.1", "python:3", {"timeout": 5000, "memory": self.memory}, {})


MSG = SimpleNamespace(action=SimpleNamespace(qualified="guest/hello"), revision=None,
                      user=SimpleNamespace(api_key=None, basic_auth=None, namespace="guest"))


def wait_for(cond, timeout=5.0):
    done = threading.Event()
    for _ in range(int(timeout / 0.01)):
        if cond():
            return True
        done.wait(0.01)
    return cond()


def test_an_expired_plan_serves_at_once_while_it_is_read_again(tmp_path, monkeypatch):
    api = SlowApi()
    cache = PlanCache(api, ProfileStore(tmp_path))
    try:
        first = cache.plan(MSG)
        assert api.reads == 1 and first.action.memory_mb == 256
        monkeypatch.setattr(plans_module, "PLAN_TTL_S", 0.0)
        api.memory, api.hold = 512, threading.Event()  # the next read hangs until released
        assert cache.plan(MSG) is first and cache.plan(MSG) is first, "no activation waits for the read"
        api.hold.set()
        assert wait_for(lambda: api.reads == 2), "one read behind them, not one per activation"
        monkeypatch.setattr(plans_module, "PLAN_TTL_S", 60.0)
        assert wait_for(lambda: cache.plan(MSG).action.memory_mb == 512)
    finally:
        cache.close()


def test_a_dropped_plan_is_replaced_behind_the_activations(tmp_path):
    api = SlowApi()
    cache = PlanCache(api, ProfileStore(tmp_path))
    try:
        first = cache.plan(MSG)
        api.memory = 1024
        cache.drop()
        assert cache.plan(MSG) is first
        assert wait_for(lambda: cache.plan(MSG).action.memory_mb == 1024)
    finally:
        cache.close()


def test_an_action_gone_since_is_an_error_once_the_read_behind_finds_it(tmp_path, monkeypatch):
    api = SlowApi()
    cache = PlanCache(api, ProfileStore(tmp_path))
    try:
        cache.plan(MSG)
        api.gone = True
        monkeypatch.setattr(plans_module, "PLAN_TTL_S", 0.0)
        cache.plan(MSG)
        assert wait_for(lambda: isinstance(cache.plan(MSG), ActivationError))
    finally:
        cache.close()
