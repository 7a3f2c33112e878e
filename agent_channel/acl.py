"""The Redis ACL users of one deployment: least privilege by role, and trust by key.

One Redis serves a deployment (one topic ``prefix``); its users (Redis 6+ ACL, the ``users.acl`` file
:func:`acl_file` writes, loaded with ``aclfile``):

* ``esg-scheduler`` -- every scheduler of the deployment (leader and standbys): read and write on
  ``esg:{prefix}:*`` and each controller's ``esg:{prefix}{controller}:*`` (ledger, lease) only, with the commands of data, streams, scripts and transactions; nothing
  ``@dangerous`` (no ``FLUSHALL``, ``CONFIG``, ``KEYS``, ``ACL SETUSER``...).
* ``esg-agent-{node}`` -- one per node: read and write on its own node's key space
  (``esg:{prefix}:node:{node}:*``: its dispatch stream, results, heartbeats, claims, epoch and stored
  outputs), read only on the other nodes' stored outputs (``esg:{prefix}:node:*:data:*``: a successor
  reads its predecessors' outputs wherever they ran), write only on the hello stream; and only the
  commands the agent sends. It cannot read the ledger, another node's dispatches (with their callers'
  keys), or write anything another node or the scheduler would believe: the scheduler takes a heartbeat
  or a result only from the node's own streams (:meth:`controller_plugin.channel.SchedulerChannel.believe`),
  which only that node's user can write.
* ``esg-observer`` -- ``esg status``, ``esg replay``: read only on the scheduler's keys.
* ``esg-admin`` -- the operator: everything. The ``default`` user is switched off.

Passwords are stored hashed (``#<sha256>``) in ``users.acl``; the clear ones only in each role's URL,
handed to its process through the environment or a file (``ESG_REDIS_FILE``), never a command line.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass

DEFAULT_USER = "default"
SCHEDULER = "esg-scheduler"
OBSERVER = "esg-observer"
ADMIN = "esg-admin"
AGENT_PREFIX = "esg-agent-"

#: What every ESG process may do on its connection (redis-py's hand-shake included).
_CONNECTION = ("+ping", "+echo", "+select", "+client|setname", "+client|getname",
               "+acl|whoami", "+readonly", "+auth", "+hello", "+quit", "+reset")
#: The agent's commands, no more: its stream, claims, answers (MULTI), outputs, heartbeats.
AGENT_COMMANDS = ("+xreadgroup", "+xack", "+xdel", "+xgroup|create", "+xadd", "+xrevrange", "+xpending", "+set",
                  "+get", "+mget", "+exists", "+eval", "+evalsha", "+multi", "+exec", "+discard")
SCHEDULER_CATEGORIES = ("+@read", "+@write", "+@stream", "+@scripting", "+@transaction", "+@hash", "+@set",
                        "+@string", "+@keyspace", "+@list", "+@sortedset", "-@dangerous", "-@admin")
OBSERVER_CATEGORIES = ("+@read", "-@dangerous", "+scan")

_SAFE = re.compile(r"[A-Za-z0-9._-]*")


def agent_user(node: str) -> str:
    return f"{AGENT_PREFIX}{node}"


def _glob(text: str) -> str:
    """``text`` as a literal in an ACL key pattern (the project's names hold no glob characters; checked)."""
    if not _SAFE.fullmatch(text):
        raise ValueError(f"{text!r}: only letters, digits, '.', '_' and '-' may name a prefix or a node")
    return text


def password_hash(password: str) -> str:
    return hashlib.sha256(password.encode()).hexdigest()


def new_password() -> str:
    return secrets.token_urlsafe(32)


@dataclass(frozen=True)
class User:
    name: str
    password: str
    rules: tuple[str, ...]

    def acl_line(self) -> str:
        """The ``users.acl`` line (the password hashed)."""
        return " ".join(("user", self.name, "on", f"#{password_hash(self.password)}", "resetkeys", "resetchannels",
                         "-@all", *self.rules))

    def setuser_args(self) -> list[str]:
        """``ACL SETUSER`` arguments making this user (the password hashed)."""
        return [self.name, "reset", "on", f"#{password_hash(self.password)}", "resetkeys", "resetchannels", "-@all",
                *self.rules]


def _scheduler_keys(prefix: str, controllers: tuple[str, ...]) -> list[str]:
    return [f"esg:{_glob(prefix)}:*", *(f"esg:{_glob(prefix)}{_glob(c)}:*" for c in controllers)]


def scheduler_rules(prefix: str, controllers: tuple[str, ...] = ("0",)) -> tuple[str, ...]:
    return (*(f"~{k}" for k in _scheduler_keys(prefix, controllers)), *SCHEDULER_CATEGORIES, *_CONNECTION)


def agent_rules(prefix: str, node: str) -> tuple[str, ...]:
    p, n = _glob(prefix), _glob(node)
    return (f"%RW~esg:{p}:node:{n}:*", f"%R~esg:{p}:node:*:data:*", f"%W~esg:{p}:hello", *AGENT_COMMANDS,
            *_CONNECTION)


def observer_rules(prefix: str, controllers: tuple[str, ...] = ("0",)) -> tuple[str, ...]:
    return (*(f"%R~{k}" for k in _scheduler_keys(prefix, controllers)), *OBSERVER_CATEGORIES, *_CONNECTION)


def admin_rules() -> tuple[str, ...]:
    return ("~*", "&*", "+@all")


def users(prefix: str, nodes: list[str], passwords: dict[str, str], controllers: tuple[str, ...] = ("0",)
          ) -> list[User]:
    """Every user of a deployment with ``nodes`` (and OpenWhisk ``controllers``); a user missing from
    ``passwords`` gets a new one (added)."""
    wanted = [(ADMIN, admin_rules()), (SCHEDULER, scheduler_rules(prefix, controllers)),
              (OBSERVER, observer_rules(prefix, controllers))]
    wanted += [(agent_user(n), agent_rules(prefix, n)) for n in nodes]
    out = []
    for name, rules in wanted:
        pw = passwords.setdefault(name, new_password())
        out.append(User(name, pw, rules))
    return out


def acl_file(all_users: list[User]) -> str:
    """``users.acl``: the default user off, then every user."""
    return "\n".join([f"user {DEFAULT_USER} off resetkeys resetchannels -@all",
                      *(u.acl_line() for u in all_users)]) + "\n"
