"""``esg profile export`` and ``esg profile import``: learned tables out of Redis as files, and offline
tables into Redis as the prior (docs/online-profiles.md §4).

``export`` writes ``OUT/<namespace>/<table>.json`` for every table the schedulers learned (each
namespace learns its own; ``OUT/<table>.json`` for a table a scheduler with ``--shared-profiles``
learned), in the format ``esg profile`` writes (``esg plan --profiles OUT/NS`` and ``esg scheduler
--profiles OUT/NS`` read them); a table with no measured configuration and no prior has nothing to write
and is named. ``import`` checks every ``DIR/*.json`` first, then seeds each as its table's prior -- for
every namespace, or with ``--namespace NS`` for that one's alone: the schedulers lay what they measure
over it. Both are reached as ``esg profile export|import`` (``esg profile-export|profile-import`` too).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from esg.mig import DEFAULT_GPU_MODEL
from esg_cli import checks
from esg_cli.errors import CliError

VERBS = ("export", "import")


def register(sub: argparse._SubParsersAction) -> None:
    e = sub.add_parser("profile-export", prog="esg profile export", help="write the tables the schedulers learned (esg profile export)",
                       description="Write OUT/<table>.json for every table learned online, in the format "
                                   "esg profile writes.")
    e.add_argument("--redis", metavar="URL", type=checks.redis_url,
                   help="the schedulers' Redis (env ESG_REDIS, or ESG_REDIS_FILE naming a file holding it)")
    e.add_argument("--out", required=True, type=Path, help="directory for the tables")
    e.add_argument("--topic-prefix", metavar="P", type=checks.topic_prefix, default="",
                   help="the deployment's topic prefix (default none)")
    e.add_argument("--gpu-model", type=checks.gpu_model, default=DEFAULT_GPU_MODEL,
                   help="GPU model of a table with no prior (its MIG names refer to it)")
    e.set_defaults(func=export)
    i = sub.add_parser("profile-import", prog="esg profile import", help="seed Redis with offline tables (esg profile import)",
                       description="Check every DIR/*.json, then store each as its table's prior in Redis.")
    i.add_argument("--redis", metavar="URL", type=checks.redis_url,
                   help="the schedulers' Redis (env ESG_REDIS, or ESG_REDIS_FILE naming a file holding it)")
    i.add_argument("dir", metavar="DIR", type=Path, help="directory of profile tables")
    i.add_argument("--topic-prefix", metavar="P", type=checks.topic_prefix, default="",
                   help="the deployment's topic prefix (default none)")
    i.add_argument("--namespace", metavar="NS", type=checks.namespace_name,
                   help="the prior of this namespace's tables only (default: of every namespace's)")
    i.set_defaults(func=import_)


def rewrite(argv: list[str]) -> list[str]:
    """``profile export ...`` -> ``profile-export ...`` (the verbs are not profiling targets)."""
    if len(argv) >= 2 and argv[0] == "profile" and argv[1] in VERBS:
        return [f"profile-{argv[1]}", *argv[2:]]
    return argv


def _store(url: str | None, prefix: str):
    from agent_channel.connect import ChannelError, connect
    from controller_plugin.online import OnlineStore

    url = checks.from_env(url, "ESG_REDIS", checks.redis_url)
    if not url:
        raise CliError("no Redis given: pass --redis URL or set ESG_REDIS (or ESG_REDIS_FILE)")
    try:
        return OnlineStore(connect(url), prefix)
    except ChannelError as exc:
        raise CliError(f"--redis: {exc}") from None


def export(args: argparse.Namespace) -> int:
    from esg.online import BOUND_FIELD, learned_profile
    from esg.policies.base import FunctionSpec
    from profiles.store import write_json_atomic

    checks.check_writable_dir(args.out, "--out")
    store = _store(args.redis, args.topic_prefix)
    written, empty = 0, []
    for table in store.tables():
        prior = store.prior(table)
        p = learned_profile(table, store.stats(table), prior, FunctionSpec(), 0.0, args.gpu_model)
        if p.extra.get("source") == "default":
            empty.append(table)
            continue
        data = p.to_dict()
        data.pop(BOUND_FIELD, None)
        (args.out / table).parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(args.out / f"{table}.json", data, compact_lists=True)
        written += 1
        print(f"{table}: {len(p.entries)} configurations ({p.extra.get('source', 'offline')}) -> "
              f"{args.out / (table + '.json')}")
    if empty:
        print(f"esg profile export: nothing measured yet for {', '.join(empty)}", file=sys.stderr)
    print(f"{written} table(s) written to {args.out}", file=sys.stderr)
    return 0


def import_(args: argparse.Namespace) -> int:
    from esg_files import load_profile

    checks.check_dir(args.dir, "DIR")
    paths = sorted(Path(args.dir).glob("*.json"))
    if not paths:
        raise CliError(f"DIR: {args.dir} holds no *.json profile tables")
    tables = {p.stem: load_profile(p) for p in paths}   # every one checked before anything is written
    store = _store(args.redis, args.topic_prefix)
    for name, prof in tables.items():
        table = f"{args.namespace}/{name}" if args.namespace else name
        store.import_table(table, prof)
        print(f"{table}: {len(prof.entries)} configurations imported as the prior")
    return 0
