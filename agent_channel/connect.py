"""A Redis client that answered PING, or one line naming the server (never its password)."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

import redis


class ChannelError(Exception):
    """Redis is unreachable or refused us; the message names the server without its password."""


def redact_url(url: str) -> str:
    """``url`` with any password replaced by ``***`` (Redis URLs may carry one)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable url>"
    if parts.password is None and "@" not in parts.netloc:
        return url
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    user = parts.username or ""
    return urlunsplit((parts.scheme, f"{user}:***@{host}", parts.path, parts.query, parts.fragment))


def connect(url: str, socket_timeout_s: float = 10.0) -> redis.Redis:
    """A client of ``url`` that answered PING; :class:`ChannelError` naming the problem otherwise.

    ``socket_timeout_s`` bounds every command; blocking stream reads must block for less.
    """
    where = redact_url(url)
    try:
        client = redis.Redis.from_url(url, socket_timeout=socket_timeout_s, socket_connect_timeout=3)
        client.ping()
    except redis.AuthenticationError:
        raise ChannelError(f"Redis at {where} refused the password") from None
    except (redis.RedisError, ValueError, OSError) as exc:
        text = str(exc)
        password = urlsplit(url).password if "@" in url else None
        if password and password in text:
            text = type(exc).__name__
        if "password" in text.lower() or "auth" in text.lower():
            raise ChannelError(f"Redis at {where} needs a password (put it in the URL)") from None
        raise ChannelError(f"cannot reach Redis at {where}: {text}") from None
    return client
