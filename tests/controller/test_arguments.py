"""Init and locked arguments, as OpenWhisk's invoker hands them to an action (``ContainerProxy``)."""

from __future__ import annotations

import base64
import json
import os
import struct

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from controller_plugin import wire
from controller_plugin.arguments import ParameterKeys, encrypt, prepare
from controller_plugin.metadata import ActivationError
from tests.controller.test_service_basic import put

K128, K256 = os.urandom(16), os.urandom(32)
KEYS = ParameterKeys({"aes-128": K128, "aes-256": K256})


def openwhisk_form(key: bytes, iv: bytes, value) -> str:
    """``ParameterEncryption.encrypt``'s output, built by hand: int32 IV length, IV, AES-GCM text + tag."""
    return base64.b64encode(struct.pack(">i", len(iv)) + iv
                            + AESGCM(key).encrypt(iv, json.dumps(value).encode(), None)).decode()


def message(content, init_args=(), locked=None) -> wire.ActivationMessage:
    return wire.parse_activation(json.dumps({
        "transid": ["t", 1], "action": {"path": "guest", "name": "a"}, "revision": None,
        "user": {"subject": "s", "namespace": {"name": "guest", "uuid": "u"}, "authkey": {"api_key": "u:k"},
                 "rights": [], "limits": {}},
        "activationId": "a" * 32, "rootControllerIndex": {"asString": "0"}, "blocking": True,
        "initArgs": list(init_args), "lockedArgs": locked or {}, "content": content}))


def test_locked_arguments_are_unlocked_with_openwhisks_scheme_and_init_arguments_move_to_the_environment():
    secret = {"user": "db", "password": "pw"}
    content = {"x": 1, "MODEL": "resnet", "cred": openwhisk_form(K256, os.urandom(128), secret),
               "tok": openwhisk_form(K128, os.urandom(12), "abc"), "plain": "kept"}
    args, env = prepare(message(content, ["MODEL"], {"cred": "aes-256", "tok": "aes-128", "plain": "noop"}), KEYS)
    assert args == {"x": 1, "cred": secret, "tok": "abc", "plain": "kept"}
    assert env == {"MODEL": "resnet"}
    assert prepare(message([1, 2], ["MODEL"]), KEYS) == ([1, 2], {})     # only objects are partitioned
    assert prepare(message(None), KEYS) == ({}, {})


def test_encrypt_writes_the_form_openwhisk_reads():
    iv = os.urandom(12)
    text = encrypt(K128, "aes-128", {"a": [1, "é"]}, iv)
    blob = base64.b64decode(text)
    assert blob[:4] == b"\x00\x00\x00\x0c" and blob[4:16] == iv
    assert json.loads(AESGCM(K128).decrypt(iv, blob[16:], None)) == {"a": [1, "é"]}


def test_a_locked_argument_without_its_key_is_refused_naming_the_setting():
    msg = message({"cred": openwhisk_form(K256, os.urandom(128), "s")}, locked={"cred": "aes-256"})
    with pytest.raises(ActivationError, match="ESG_PARAMETER_STORAGE_AES256") as err:
        prepare(msg, ParameterKeys({"aes-128": K128}))
    assert err.value.status_code == 2
    with pytest.raises(ActivationError, match="could not be decrypted"):
        prepare(msg, ParameterKeys({"aes-256": os.urandom(32)}))          # a different key
    bad_iv = message({"cred": openwhisk_form(K256, os.urandom(12), "s")}, locked={"cred": "aes-256"})
    with pytest.raises(ActivationError, match="could not be decrypted"):
        prepare(bad_iv, KEYS)                                             # aes-256 uses a 128-byte IV


def test_the_service_runs_the_action_with_unlocked_arguments_and_its_init_environment(
        service_factory, agent_factory, driver, standin):
    cred = openwhisk_form(K256, os.urandom(128), {"password": "pw"})
    put(standin, "uses", None, parameters=[{"key": "MODEL", "value": "resnet", "init": True},
                                           {"key": "cred", "value": cred, "encryption": "aes-256"}])
    service_factory(parameter_keys=KEYS)
    a = agent_factory("node-a")
    driver.wait_healthy(1, timeout=10)
    rec = driver.invoke("guest/uses", {"x": 1}, timeout=15)
    assert rec["response"] == {"statusCode": 0, "result": {"x": 1, "cred": {"password": "pw"}}, "size": 36}
    assert a.batches[-1].requests[0].init_env == {"MODEL": "resnet"}
    overridden = driver.invoke("guest/uses", {"cred": "mine"}, timeout=15)   # a caller's value is not locked
    assert overridden["response"]["result"]["cred"] == "mine"


def test_the_service_without_the_key_answers_a_developer_error_naming_it(service_factory, agent_factory, driver,
                                                                         standin):
    put(standin, "locked", None, parameters=[{"key": "cred", "value": "x", "encryption": "aes-128"}])
    service_factory()
    agent_factory("node-a")
    driver.wait_healthy(1, timeout=10)
    rec = driver.invoke("guest/locked", {}, timeout=15)
    assert rec["response"]["statusCode"] == 2
    assert "--parameter-storage-aes128" in rec["response"]["result"]["error"]
    assert driver.acks[rec["activationId"]].is_system_error is False
