"""An activation's arguments as OpenWhisk's invoker hands them to the action (``ContainerProxy``).

1. **Locked arguments** (``lockedArgs``: parameter name -> encryption scheme) are decrypted
   (``unlockArguments``). OpenWhisk's parameter encryption (``ParameterEncryption.scala``): the stored
   value is base64 of a 4-byte big-endian IV length, the IV, then AES-GCM ciphertext with its 128-bit tag;
   the plain text is the parameter's compact JSON. Scheme ``aes-128`` uses a 12-byte IV, ``aes-256`` a
   128-byte one; the keys are base64 (``whisk.parameter-storage.aes128`` / ``aes256``). ``noop`` is the
   value itself. A scheme the scheduler has no key for is refused with an error naming the setting
   (OpenWhisk would pass the cipher text on as the value).
2. **Init arguments** (``initArgs``: names) are taken out of the arguments and become the action's
   environment at ``/init`` (``partitionArguments``); only an object's fields are partitioned.
"""

from __future__ import annotations

import base64
import binascii
import json
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from controller_plugin import wire
from controller_plugin.metadata import ActivationError
from openwhisk_status import STATUS_DEVELOPER_ERROR

NOOP = "noop"
#: scheme -> (IV length, the flag and environment variable that configure its key)
SCHEMES = {"aes-128": (12, "--parameter-storage-aes128 / ESG_PARAMETER_STORAGE_AES128", 16),
           "aes-256": (128, "--parameter-storage-aes256 / ESG_PARAMETER_STORAGE_AES256", 32)}


def key_bytes(text: str, scheme: str) -> bytes:
    """A configured key: base64 of 16 (aes-128) or 32 (aes-256) bytes; ValueError naming the problem."""
    try:
        key = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("not base64") from None
    want = SCHEMES[scheme][2]
    if len(key) != want:
        raise ValueError(f"{scheme} needs a key of {want} bytes, got {len(key)}")
    return key


@dataclass(frozen=True)
class ParameterKeys:
    """The keys of OpenWhisk's parameter encryption, by scheme; never shown."""

    keys: Mapping[str, bytes] = field(default_factory=dict, repr=False)

    def decrypt(self, scheme: str, value: str, name: str) -> Any:
        """The parameter ``name``'s plain JSON value; :class:`ActivationError` when it cannot be."""
        scheme = scheme.lower()
        if scheme in ("", "off", NOOP):
            return value
        if scheme not in SCHEMES:
            raise ActivationError(f"parameter {name!r} is locked with the unknown scheme {scheme!r} "
                                  f"(known: {', '.join([NOOP, *SCHEMES])})", STATUS_DEVELOPER_ERROR)
        iv_len, setting, _ = SCHEMES[scheme]
        key = self.keys.get(scheme)
        if key is None:
            raise ActivationError(f"parameter {name!r} is encrypted with {scheme} and the ESG scheduler has no "
                                  f"{scheme} key: set {setting} to OpenWhisk's whisk.parameter-storage key",
                                  STATUS_DEVELOPER_ERROR)
        try:
            blob = base64.b64decode(value, validate=True)
            (n,) = struct.unpack(">i", blob[:4])
            if n != iv_len or len(blob) < 4 + n + 16:
                raise ValueError("invalid iv length")
            plain = AESGCM(key).decrypt(blob[4:4 + n], blob[4 + n:], None)
            return json.loads(plain.decode("utf-8"), parse_constant=_no_constant)
        except (binascii.Error, ValueError, struct.error, InvalidTag, UnicodeDecodeError, RecursionError):
            raise ActivationError(f"parameter {name!r} could not be decrypted with the configured {scheme} key "
                                  "(a different key, or not OpenWhisk's encrypted form)",
                                  STATUS_DEVELOPER_ERROR) from None


def _no_constant(constant: str) -> Any:
    raise ValueError(f"{constant} is no JSON value")


def encrypt(key: bytes, scheme: str, value: Any, iv: bytes) -> str:
    """OpenWhisk's encrypted form of ``value`` (for tests and tools; the scheduler only decrypts)."""
    plain = json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    return base64.b64encode(struct.pack(">i", len(iv)) + iv + AESGCM(key).encrypt(iv, plain, None)).decode()


def prepare(msg: wire.ActivationMessage, keys: ParameterKeys) -> tuple[Any, dict[str, Any]]:
    """``(run arguments, init environment)`` of ``msg``: locked arguments unlocked, init arguments moved
    to the environment. :class:`ActivationError` when a locked argument cannot be unlocked."""
    content = msg.content
    if not isinstance(content, dict):
        return ({} if content is None else content), {}
    if msg.locked_args:
        content = {k: keys.decrypt(msg.locked_args[k], v, k) if k in msg.locked_args and isinstance(v, str) else v
                   for k, v in content.items()}
    if not msg.init_args:
        return content, {}
    names = set(msg.init_args)
    return ({k: v for k, v in content.items() if k not in names},
            {k: v for k, v in content.items() if k in names})
