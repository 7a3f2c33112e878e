"""Action metadata read as the activation's caller, under OpenWhisk's entitlement (the REST stand-in's).

The scheduler's own key (``--openwhisk-auth``) is guest's: an activation of alice's action, or of an
action bob shares with everyone in a package, can only be read with alice's key -- the one her
activation message carries.
"""

from __future__ import annotations

import requests

from esg_cli.openwhisk_standin import GUEST_KEY

ALICE_KEY = "a11ce000-71f6-4ed5-8c54-816aa4f8c502:AliceSecretKey0123456789abcdefAliceSecretKey0123456789abcdef"
BOB_KEY = "b0b00000-71f6-4ed5-8c54-816aa4f8c502:BobSecretKey0123456789abcdefBobSecretKey0123456789abcdefBobSe"
ALICE = {"subject": "alice", "namespace": {"name": "alice", "uuid": ALICE_KEY.split(":")[0]},
         "authkey": {"api_key": ALICE_KEY}, "rights": ["READ", "PUT", "DELETE", "ACTIVATE"], "limits": {}}
CODE = {"kind": "python:3", "code": "def main(a): return a"}


def get(standin, key: str, path: str) -> requests.Response:
    return requests.get(f"{standin.url}/api/v1/namespaces/{path}?code=false", auth=tuple(key.split(":", 1)),
                        timeout=5)


def setup(standin) -> None:
    standin.keys.update({ALICE_KEY: "alice", BOB_KEY: "bob"})
    standin.put_action("alice/hello", {"exec": CODE})
    standin.put_action("bob/private", {"exec": CODE})
    standin.put_action("bob/lib/tool", {"exec": CODE, "annotations": [{"key": "esg-gpu", "value": False}]})
    standin.put_action("bob/vault/secret", {"exec": CODE})
    standin.put_package("bob/lib", publish=True)
    standin.put_package("bob/vault", publish=False)
    standin.put_package("alice/mylib", binding="bob/lib")


def test_the_stand_in_enforces_openwhisks_entitlement(standin):
    setup(standin)
    forbidden = "The supplied authentication is not authorized to access 'bob/private'."
    r = get(standin, ALICE_KEY, "bob/actions/private")
    assert r.status_code == 403 and r.json()["error"] == forbidden
    assert get(standin, ALICE_KEY, "bob/actions/vault/secret").status_code == 403     # a private package
    assert get(standin, ALICE_KEY, "bob/actions/lib/tool").status_code == 200         # a shared one
    bound = get(standin, ALICE_KEY, "alice/actions/mylib/tool")                       # through her binding
    assert bound.status_code == 200 and bound.json()["namespace"] == "bob/lib"
    assert get(standin, GUEST_KEY, "alice/actions/hello").status_code == 403
    assert get(standin, ALICE_KEY, "_/actions/hello").status_code == 200
    r = requests.put(f"{standin.url}/api/v1/namespaces/bob/actions/lib/tool?overwrite=true", json={"exec": CODE},
                     auth=tuple(ALICE_KEY.split(":", 1)), timeout=5)
    assert r.status_code == 403                                                        # read, never write
    assert requests.get(f"{standin.url}/api/v1/namespaces/bob/activations", auth=tuple(ALICE_KEY.split(":", 1)),
                        timeout=5).status_code == 403


def test_activations_of_another_namespace_and_of_shared_packages_read_their_action_as_the_caller(
        service_factory, agent_factory, driver, standin):
    setup(standin)
    service_factory()                                  # its own key is guest's
    agent_factory("node-a")
    driver.wait_healthy(1, timeout=10)
    driver.user = ALICE
    own = driver.invoke("alice/hello", {"x": 1}, timeout=15)
    assert own["response"] == {"statusCode": 0, "result": {"x": 1}, "size": 8} and own["namespace"] == "alice"
    shared = driver.invoke("bob/lib/tool", {"y": 2}, timeout=15, binding="alice/mylib")
    assert shared["response"] == {"statusCode": 0, "result": {"y": 2}, "size": 8}
    ann = {a["key"]: a["value"] for a in shared["annotations"]}
    assert ann["path"] == "bob/lib/tool" and ann["binding"] == "alice/mylib"
    assert driver.poll_record(shared["activationId"], 10)["namespace"] == "alice"   # stored as the caller's
