"""Input checks shared by the entry points: argparse value types, and checks of files, directories and ports.

Each value type raises ``argparse.ArgumentTypeError``, which argparse reports as one line naming the
flag. Each ``check_*`` function raises :class:`~esg_cli.errors.CliError` naming the flag (or the
environment variable) and the problem. None of them creates or writes anything: a command checks all of
its input before it starts any work, so a bad input leaves nothing half-written behind.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import socket
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any
from urllib.parse import SplitResult, urlsplit

from esg_cli.errors import CliError

_TOPIC_CHARS = re.compile(r"[a-zA-Z0-9._-]*")
_CONTROLLER_ID = re.compile(r"[a-zA-Z0-9._-]{1,128}")
_NODE_NAME = re.compile(r"[a-zA-Z0-9._-]{1,200}")


# -- argparse value types ----------------------------------------------------------------------------

def _number(text: str, kind: type) -> float | int:
    try:
        value = kind(text)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"expected {'an integer' if kind is int else 'a number'}, "
                                         f"got {text!r}") from None
    if isinstance(value, float) and not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def _in_range(kind: type, ok: Callable[[float], bool], need: str, name: str) -> Callable[[str], Any]:
    """An argparse type: a number of ``kind`` for which ``ok`` holds, else "must be ``need``"."""
    def parse(text: str) -> Any:
        value = _number(text, kind)
        if not ok(value):
            raise argparse.ArgumentTypeError(f"must be {need}, got {text.strip()}")
        return value
    parse.__name__ = name  # argparse names the type in its own messages
    return parse


positive_int = _in_range(int, lambda v: v >= 1, "at least 1", "positive_int")
non_negative_int = _in_range(int, lambda v: v >= 0, "0 or more", "non_negative_int")
positive_float = _in_range(float, lambda v: v > 0, "a positive number", "positive_float")
non_negative_float = _in_range(float, lambda v: v >= 0, "0 or more", "non_negative_float")
fraction = _in_range(float, lambda v: 0 <= v <= 1, "between 0 and 1", "fraction")
percentile = _in_range(float, lambda v: 50 < v < 100, "strictly between 50 and 100 (e.g. 95 for p95)", "percentile")
port = _in_range(int, lambda v: 1 <= v <= 65535, "a TCP port (1-65535)", "port")
port_or_zero = _in_range(int, lambda v: 0 <= v <= 65535, "a TCP port (1-65535, or 0 for a free one)", "port_or_zero")


def gpu_model(text: str) -> str:
    """A GPU model the MIG geometry knows, in its canonical spelling."""
    from esg import mig
    from esg.errors import MigError

    try:
        return mig.geometry(text).model
    except MigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def kafka_address(text: str) -> str:
    """``HOST:PORT[,HOST:PORT...]``: Kafka's bootstrap servers."""
    for part in text.split(","):
        host, sep, p = part.strip().rpartition(":")
        if not sep or not host or not p.isdigit() or not 1 <= int(p) <= 65535:
            raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {part.strip()!r}")
    return text


def _split_url(text: str, message: str) -> SplitResult:
    """``text`` split as a URL, its port read (a bad one raises); ``message`` when it is not one."""
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        raise argparse.ArgumentTypeError(message) from None
    return parts


def redis_url(text: str) -> str:
    """``redis://[USER:PASSWORD@]HOST:PORT[/DB]``, ``rediss://...``, ``unix:///PATH``, or a Sentinel's
    ``redis+sentinel://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...]/MASTER[/DB]``. The password is never shown."""
    parts = _split_url(text, "not a Redis URL (expected redis://HOST:PORT/DB)")
    if parts.scheme in ("redis+sentinel", "rediss+sentinel"):
        from agent_channel.connect import sentinel_parts

        try:
            sentinel_parts(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return text
    if parts.scheme not in ("redis", "rediss", "unix"):
        raise argparse.ArgumentTypeError(f"expected a redis://, rediss://, unix:// or redis+sentinel:// URL, "
                                         f"got scheme {parts.scheme or '(none)'!r}")
    if parts.scheme != "unix" and not parts.hostname:
        raise argparse.ArgumentTypeError("the Redis URL names no host (expected redis://HOST:PORT/DB)")
    db = parts.path.strip("/")
    if parts.scheme != "unix" and db and not db.isdigit():
        raise argparse.ArgumentTypeError(f"the Redis database must be a number, got {db!r}")
    return text


def namespace_name(text: str) -> str:
    """An OpenWhisk namespace name (its EntityName rule: word characters, then also ``@ . -`` and spaces
    inside, at most 256 characters)."""
    if len(text) > 256 or not re.fullmatch(r"[\w]|[\w][\w@ .-]*[\w@.-]+", text, re.ASCII):
        raise argparse.ArgumentTypeError(f"not an OpenWhisk namespace name: {text!r}")
    return text


def http_url(text: str) -> str:
    """An ``http://`` or ``https://`` base URL (OpenWhisk's API host)."""
    parts = _split_url(text, f"not a URL: {text!r}")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise argparse.ArgumentTypeError(f"expected an http:// or https:// URL, got {text!r}")
    return text


def activation_store_url(text: str) -> str:
    """``http[s]://[user:password@]host:port[/database]``: OpenWhisk's activation store (CouchDB API).
    The credentials are never shown."""
    from controller_plugin.activation_store import parse_url

    try:
        parse_url(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def parameter_key(scheme: str) -> Callable[[str], str]:
    """An argparse type: a base64 key of OpenWhisk's parameter encryption ``scheme``; never shown."""
    def parse(text: str) -> str:
        from controller_plugin.arguments import key_bytes

        try:
            key_bytes(text, scheme)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return text
    parse.__name__ = "parameter_key"
    return parse


def api_key(text: str) -> str:
    """``UUID:KEY``, OpenWhisk's API key form. The key itself is never shown."""
    uuid, sep, key = text.partition(":")
    if not sep or not uuid or not key:
        raise argparse.ArgumentTypeError("expected UUID:KEY (OpenWhisk's API key form, as in "
                                         "`wsk property get --auth`)")
    return text


def topic_prefix(text: str) -> str:
    if len(text) > 200 or not _TOPIC_CHARS.fullmatch(text):
        raise argparse.ArgumentTypeError(f"a Kafka topic prefix may hold only letters, digits, '.', '_' "
                                         f"and '-', got {text!r}")
    return text


def controller_id(text: str) -> str:
    if not _CONTROLLER_ID.fullmatch(text):
        raise argparse.ArgumentTypeError(f"expected 1-128 letters, digits, '.', '_' or '-' (OpenWhisk's "
                                         f"controller id), got {text!r}")
    return text


def node_name(text: str) -> str:
    if not _NODE_NAME.fullmatch(text):
        raise argparse.ArgumentTypeError(f"a node name may hold only letters, digits, '.', '_' and '-' "
                                         f"(it is part of a Kafka topic name), got {text!r}")
    return text


def ip_address(text: str) -> str:
    """An IPv4 or IPv6 address to bind (``127.0.0.1``, ``0.0.0.0``, ``::1``...), not a host name."""
    import ipaddress
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an IP address to bind, such as 127.0.0.1 or 0.0.0.0, "
                                         f"got {text!r}") from None


def comma_list(known: Iterable[str], what: str) -> Callable[[str], list[str]]:
    """A comma-separated list whose every item is one of ``known``."""
    known = list(known)

    def parse(text: str) -> list[str]:
        items = [v.strip() for v in text.split(",") if v.strip()]
        bad = [v for v in items if v not in known]
        if bad or not items:
            raise argparse.ArgumentTypeError(f"unknown {what} {', '.join(bad) or '(none given)'} "
                                             f"(known: {', '.join(known)})")
        return items
    parse.__name__ = what  # argparse names the type in its messages
    return parse


# -- values from the environment ---------------------------------------------------------------------

def flag(text: str) -> bool:
    """An on/off setting from the environment: 1/true/yes/on or 0/false/no/off."""
    value = text.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected 1 or 0 (true/false), got {text!r}")


def from_env(value: Any, env: str, parse: Callable[[str], Any], default: Any = None) -> Any:
    """A flag's parsed value; else the environment variable ``env`` parsed with ``parse``; else the content
    of the file ``env_FILE`` names (a secret mounted as a file: Docker and Kubernetes secrets), one value,
    a trailing newline ignored; else ``default``. An error names the variable (never the value).

    Secrets (keys, passwords, URLs that carry them) are best given this way: a flag's value shows in the
    process list to every user of the machine."""
    if value is not None:
        return value
    raw = os.environ.get(env)
    where = f"environment variable {env}"
    if raw in (None, ""):
        path = os.environ.get(f"{env}_FILE")
        if not path:
            return default
        where = f"{env}_FILE {path}"
        try:
            with open(path, encoding="utf-8") as f:
                raw = f.read().rstrip("\r\n")
        except (OSError, UnicodeDecodeError) as exc:
            raise CliError(f"{where}: cannot read it ({getattr(exc, 'strerror', None) or exc})") from None
        if not raw:
            raise CliError(f"{where}: the file is empty")
    try:
        return parse(raw)
    except argparse.ArgumentTypeError as exc:
        raise CliError(f"{where}: {exc}") from None


# -- files, directories, ports -----------------------------------------------------------------------

def check_file(path: str | os.PathLike, flag: str) -> Path:
    p = Path(path)
    if not p.exists():
        raise CliError(f"{flag} {p}: no such file")
    if not p.is_file():
        raise CliError(f"{flag} {p}: not a file")
    if not os.access(p, os.R_OK):
        raise CliError(f"{flag} {p}: not readable")
    return p


def check_dir(path: str | os.PathLike, flag: str) -> Path:
    p = Path(path)
    if not p.exists():
        raise CliError(f"{flag} {p}: no such directory")
    if not p.is_dir():
        raise CliError(f"{flag} {p}: not a directory")
    return p


def check_writable_dir(path: str | os.PathLike, flag: str) -> Path:
    """``path`` is a writable directory, or one that can be created (its nearest existing ancestor is a
    writable directory). Nothing is created here."""
    p = Path(path)
    if p.exists():
        if not p.is_dir():
            raise CliError(f"{flag} {p}: exists and is not a directory")
        if not os.access(p, os.W_OK | os.X_OK):
            raise CliError(f"{flag} {p}: directory is not writable")
        return p
    _check_creatable(p, flag)
    return p


def check_writable_file(path: str | os.PathLike, flag: str) -> Path:
    """``path`` can be written: an existing writable file, or a new one in a directory that exists or can
    be created."""
    p = Path(path)
    if p.exists():
        if p.is_dir():
            raise CliError(f"{flag} {p}: is a directory, not a file")
        if not os.access(p, os.W_OK):
            raise CliError(f"{flag} {p}: file is not writable")
        return p
    _check_creatable(p, flag)
    return p


def _check_creatable(p: Path, flag: str) -> None:
    ancestor = p.absolute().parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise CliError(f"{flag} {p}: cannot be created ({ancestor} is not a directory)")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise CliError(f"{flag} {p}: cannot be created ({ancestor} is not writable)")


def check_port_free(port_: int, flag: str, host: str = "127.0.0.1") -> None:
    """Nothing listens on ``host:port_`` (checked as the server will bind it, with SO_REUSEADDR)."""
    if not port_:
        return
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port_))
        except OSError as exc:
            raise CliError(f"{flag} {port_}: port is in use ({exc.strerror})") from None
