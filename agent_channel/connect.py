"""A Redis client that answered PING, or one line naming the server (never its password).

A URL is ``redis://[USER:PASSWORD@]HOST:PORT[/DB]`` (``rediss://`` with TLS, ``unix:///PATH``), or, for a
Redis run with a replica and Sentinel, ``redis+sentinel://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...]/MASTER[/DB]``
(``rediss+sentinel://`` with TLS to the master): the client asks the Sentinels which server is the
master named ``MASTER`` and follows a failover (redis-py's :class:`redis.sentinel.Sentinel`). The user
and password are the master's; Sentinels that require their own take ``?sentinel_username=...&
sentinel_password=...``.
"""

from __future__ import annotations

from urllib.parse import parse_qs, unquote, urlsplit, urlunsplit

import redis
from redis.sentinel import Sentinel

SENTINEL_SCHEMES = ("redis+sentinel", "rediss+sentinel")
DEFAULT_SENTINEL_PORT = 26379


class ChannelError(Exception):
    """Redis is unreachable or refused us; the message names the server without its password."""


def redact_url(url: str) -> str:
    """``url`` with any password replaced by ``***`` (Redis URLs may carry one)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable url>"
    if "@" not in parts.netloc:
        return url
    creds, _, hosts = parts.netloc.rpartition("@")
    user = creds.partition(":")[0]
    query = parts.query
    if "password" in query:
        query = "&".join(q if "password" not in q.partition("=")[0] else q.partition("=")[0] + "=***"
                         for q in query.split("&"))
    return urlunsplit((parts.scheme, f"{user}:***@{hosts}", parts.path, query, parts.fragment))


def sentinel_parts(url: str) -> tuple[list[tuple[str, int]], str, int, str | None, str | None, dict[str, str]]:
    """A Sentinel URL's (sentinels, master name, db, user, password, sentinel credentials); ValueError
    naming what is wrong."""
    parts = urlsplit(url)
    creds, _, hosts = parts.netloc.rpartition("@")
    user, _, password = creds.partition(":")
    sentinels = []
    for h in hosts.split(","):
        host, _, port = h.strip().rpartition(":") if ":" in h else (h.strip(), "", "")
        if not host:
            raise ValueError(f"the Sentinel address {h!r} names no host")
        if port and not port.isdigit():
            raise ValueError(f"the Sentinel address {h!r} has a bad port")
        sentinels.append((host, int(port) if port else DEFAULT_SENTINEL_PORT))
    path = [p for p in parts.path.split("/") if p]
    if not path or len(path) > 2:
        raise ValueError("a Sentinel URL names its master: redis+sentinel://HOST:PORT[,HOST:PORT...]/MASTER[/DB]")
    if len(path) == 2 and not path[1].isdigit():
        raise ValueError(f"the Redis database must be a number, got {path[1]!r}")
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    sentinel_auth = {k.removeprefix("sentinel_"): v for k, v in query.items() if k in ("sentinel_username",
                                                                                       "sentinel_password")}
    return (sentinels, unquote(path[0]), int(path[1]) if len(path) == 2 else 0, unquote(user) or None,
            unquote(password) or None, sentinel_auth)


def client(url: str, socket_timeout_s: float = 10.0) -> redis.Redis:
    """A client of ``url`` (not yet connected); a Sentinel URL gives the master's."""
    if urlsplit(url).scheme in SENTINEL_SCHEMES:
        sentinels, master, db, user, password, auth = sentinel_parts(url)
        sentinel = Sentinel(sentinels, socket_timeout=socket_timeout_s, socket_connect_timeout=3,
                            sentinel_kwargs={"socket_timeout": 3, "socket_connect_timeout": 3, **auth})
        return sentinel.master_for(master, socket_timeout=socket_timeout_s, socket_connect_timeout=3, db=db,
                                   username=user, password=password,
                                   ssl=urlsplit(url).scheme.startswith("rediss"))
    return redis.Redis.from_url(url, socket_timeout=socket_timeout_s, socket_connect_timeout=3)


def connect(url: str, socket_timeout_s: float = 10.0) -> redis.Redis:
    """A client of ``url`` that answered PING; :class:`ChannelError` naming the problem otherwise.

    ``socket_timeout_s`` bounds every command; blocking stream reads must block for less.
    """
    where = redact_url(url)
    try:
        c = client(url, socket_timeout_s)
        c.ping()
    except redis.AuthenticationError:
        raise ChannelError(f"Redis at {where} refused the user or password") from None
    except (redis.RedisError, ValueError, OSError) as exc:
        text = str(exc)
        password = urlsplit(url).password if "@" in url else None
        if password and password in text:
            text = type(exc).__name__
        if "password" in text.lower() or "auth" in text.lower():
            raise ChannelError(f"Redis at {where} needs a user and password (put them in the URL)") from None
        raise ChannelError(f"cannot reach Redis at {where}: {text}") from None
    return c
