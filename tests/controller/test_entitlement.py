"""Entitlement on every call: a plan read for one caller never lets another run what only the first may.

Bob shares an app in a published package; its DAG names a function of his own namespace, outside any
shared package. Bob may run it; Alice may call the shared app (the controller entitles her to it) but not
read -- so not run -- Bob's private function, whatever Bob ran before her. The plans are read from the
REST stand-in, which enforces OpenWhisk's entitlement rules.
"""

from __future__ import annotations

import json

from controller_plugin import wire
from controller_plugin.metadata import ActivationError, AppPlan, MetadataClient, ProfileStore
from controller_plugin.plans import PlanCache
from esg_cli.openwhisk_standin import GUEST_KEY

ALICE_KEY = "a11ce000-71f6-4ed5-8c54-816aa4f8c502:AliceSecretKey0123456789abcdefAliceSecretKey0123456789abcdef"
BOB_KEY = "b0b00000-71f6-4ed5-8c54-816aa4f8c502:BobSecretKey0123456789abcdefBobSecretKey0123456789abcdefBobSe"
CODE = {"kind": "python:3", "code": "def main(a): return a"}
DAG = {"functions": ["/bob/private"], "edges": []}


def message(user: str, key: str | None, action: str = "bob/lib/app") -> wire.ActivationMessage:
    authkey = {"api_key": key} if key else {"subject": user, "secret": "not-a-basic-key"}
    return wire.parse_activation(json.dumps({
        "transid": ["tx", 1], "action": {"path": action.rsplit("/", 1)[0], "name": action.rsplit("/", 1)[1]},
        "revision": None, "user": {"subject": user, "namespace": {"name": user, "uuid": f"{user}-uuid"},
                                   "authkey": authkey, "rights": ["READ", "ACTIVATE"], "limits": {}},
        "activationId": "a" * 32, "rootControllerIndex": {"asString": "0", "instanceType": "controller"},
        "blocking": True, "content": {}, "initArgs": [], "lockedArgs": {}}))


def setup(standin) -> PlanCache:
    standin.keys.update({ALICE_KEY: "alice", BOB_KEY: "bob"})
    standin.put_action("bob/private", {"exec": CODE, "annotations": [{"key": "esg-gpu", "value": False}]})
    standin.put_action("bob/lib/app", {"exec": CODE, "annotations": [
        {"key": "esg-slo-ms", "value": 5000}, {"key": "esg-dag", "value": DAG}]})
    standin.put_action("alice/mine", {"exec": CODE, "annotations": [
        {"key": "esg-slo-ms", "value": 5000}, {"key": "esg-dag", "value": DAG}]})
    standin.put_package("bob/lib", publish=True)
    return PlanCache(MetadataClient(standin.url, GUEST_KEY), ProfileStore(standin_profiles()))


def standin_profiles():
    from controller_plugin.settings import shipped_profiles_dir
    return shipped_profiles_dir()


def test_a_plan_read_for_its_owner_never_runs_a_private_function_for_another_namespace(standin):
    cache = setup(standin)
    try:
        bob = cache.plan(message("bob", BOB_KEY))
        assert isinstance(bob, AppPlan) and set(bob.functions) == {"bob/private"}
        alice = cache.plan(message("alice", ALICE_KEY))          # after Bob's plan is in the cache
        assert isinstance(alice, ActivationError) and "bob/private" in str(alice)
        assert cache.plan(message("bob", BOB_KEY)) is bob        # Bob's own plan still serves Bob
        # her own app naming his private function: read as her, refused
        assert isinstance(cache.plan(message("alice", ALICE_KEY, "alice/mine")), ActivationError)
    finally:
        cache.close()


def test_a_caller_without_a_basic_key_runs_functions_of_its_own_namespace_only(standin):
    cache = setup(standin)
    try:
        refused = cache.plan(message("alice", None))          # read with the scheduler's own key otherwise
        assert isinstance(refused, ActivationError) and "own namespace" in str(refused)
    finally:
        cache.close()


def test_callers_with_the_same_plan_share_one_plan_object(standin):
    """The scheduler registers an app again only when its plan changes: equal plans read for two callers
    are one object."""
    cache = setup(standin)
    standin.put_action("bob/lib/tool", {"exec": CODE, "annotations": [{"key": "esg-gpu", "value": False}]})
    try:
        bob = cache.plan(message("bob", BOB_KEY, "bob/lib/tool"))
        alice = cache.plan(message("alice", ALICE_KEY, "bob/lib/tool"))
        assert isinstance(bob, AppPlan) and alice is bob
    finally:
        cache.close()
