"""``esg redis-users``: the Redis ACL users of a deployment, with generated passwords (``agent_channel/acl.py``).

Writes into ``--out DIR`` (made with mode 0700), one directory per role, so that a deployment mounts each
process's own and nothing else (a compose volume's ``subpath``, a Kubernetes Secret or a node's host path):

* ``acl/users.acl`` -- for Redis's ``aclfile`` setting: the default user off, then ``esg-admin``,
  ``esg-scheduler``, ``esg-observer`` and one ``esg-agent-NODE`` per ``--nodes`` name, each with only its
  rights; passwords hashed (SHA-256), so the file reveals none;
* ``ROLE/redis.url`` per user (mode 0600), ``redis://USER:PASSWORD@HOST/DB`` for ``--redis-host`` -- what
  each process is given through ``ESG_REDIS_FILE`` (or ``ESG_REDIS``): ``scheduler/``, ``observer/``,
  ``admin/``, ``agent-NODE/``.

Run again with more nodes, it keeps every password it wrote before (read back from the URL files) and
adds the new users: load the new ``users.acl`` with ``ACL LOAD`` (or a restart). Nothing is sent to Redis.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from urllib.parse import quote, unquote, urlsplit

from agent_channel import acl
from esg_cli import checks
from esg_cli.errors import CliError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("redis-users", help="write the Redis ACL users of a deployment (generated passwords)",
                       description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True, metavar="DIR", help="where users.acl and the URL files go")
    p.add_argument("--nodes", required=True, metavar="N1,N2,...", type=_names,
                   help="the nodes whose agents get a user each (their --name / ESG_AGENT_NAME)")
    p.add_argument("--topic-prefix", type=checks.topic_prefix, default=None, metavar="P",
                   help="OpenWhisk's topic prefix: the users' keys are esg:P:... (env ESG_TOPIC_PREFIX; default empty)")
    p.add_argument("--controllers", default="0", metavar="C1,C2,...",
                   type=lambda t: [checks.controller_id(c.strip()) for c in t.split(",") if c.strip()] or ["0"],
                   help="OpenWhisk's controller ids whose schedulers use this Redis (default 0)")
    p.add_argument("--redis-host", default="redis:6379", metavar="HOST:PORT",
                   help="the address the URL files name (default redis:6379, the compose service)")
    p.add_argument("--db", type=checks.non_negative_int, default=0, metavar="N", help="the database (default 0)")
    p.add_argument("--owner", type=_owner, default=None, metavar="UID[:GID]",
                   help="give the role directories and URL files to this user (run as root; e.g. 10001:10001, the "
                        "image's esg user, when the processes that read them do not run as the writer)")
    p.set_defaults(func=run)


def _names(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise argparse.ArgumentTypeError("name at least one node")
    for n in names:
        checks.node_name(n)
    return list(dict.fromkeys(names))


def _owner(text: str) -> tuple[int, int]:
    uid, _, gid = text.partition(":")
    try:
        ids = int(uid), int(gid or uid)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected UID[:GID], numbers") from None
    if min(ids) < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected UID[:GID], numbers")
    return ids


ACL_FILE = Path("acl") / "users.acl"
URL_FILE = "redis.url"


def role_dir(user: str) -> str:
    """The directory (under ``--out``) of ``user``'s URL file."""
    if user.startswith(acl.AGENT_PREFIX):
        return f"agent-{user[len(acl.AGENT_PREFIX):]}"
    return {acl.SCHEDULER: "scheduler", acl.OBSERVER: "observer", acl.ADMIN: "admin"}[user]


def url_file(user: str) -> Path:
    """The URL file of ``user``, relative to ``--out``."""
    return Path(role_dir(user)) / URL_FILE


def url_of(user: acl.User, host: str, db: int) -> str:
    return f"redis://{quote(user.name, safe='')}:{quote(user.password, safe='')}@{host}/{db}"


def known_passwords(out: Path, names: list[str]) -> dict[str, str]:
    """The passwords in the URL files already in ``out`` (for the users named)."""
    found = {}
    for name in names:
        path = out / url_file(name)
        if path.is_file():
            password = urlsplit(path.read_text().strip()).password
            if password:
                found[name] = unquote(password)
    return found


def write(out: Path, prefix: str, nodes: list[str], host: str, db: int = 0,
          controllers: tuple[str, ...] = ("0",), owner: tuple[int, int] | None = None) -> list[acl.User]:
    """Write ``users.acl`` and the URL files (module doc); the users."""
    out.mkdir(parents=True, exist_ok=True, mode=0o700)
    names = [acl.ADMIN, acl.SCHEDULER, acl.OBSERVER, *(acl.agent_user(n) for n in nodes)]
    users = acl.users(prefix, nodes, known_passwords(out, names), controllers)
    acl_path = out / ACL_FILE
    acl_path.parent.mkdir(exist_ok=True)
    acl_path.write_text(acl.acl_file(users))
    acl_path.chmod(0o644)           # Redis runs as its own user; the passwords in it are hashed
    for u in users:
        path = out / url_file(u.name)
        path.parent.mkdir(exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(url_of(u, host, db) + "\n")
        path.chmod(0o600)
        if owner is not None:
            os.chown(path.parent, *owner)
            os.chown(path, *owner)
    return users


def run(args: argparse.Namespace) -> int:
    prefix = checks.from_env(args.topic_prefix, "ESG_TOPIC_PREFIX", checks.topic_prefix, "")
    if args.out.exists() and not args.out.is_dir():
        raise CliError(f"--out {args.out}: not a directory")
    host = args.redis_host
    if not host or "/" in host or "@" in host:
        raise CliError(f"--redis-host {host!r}: expected HOST:PORT")
    try:
        users = write(args.out, prefix, args.nodes, host, args.db, tuple(args.controllers), args.owner)
    except OSError as exc:
        raise CliError(f"--out {args.out}: {exc.strerror or exc}") from None
    print(f"wrote {args.out / ACL_FILE} and {len(users)} URL files (DIR/ROLE/{URL_FILE}, one per user; mode 0600)")
    return 0
