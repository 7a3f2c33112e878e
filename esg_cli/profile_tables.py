"""``esg profile export`` and ``esg profile import``: learned tables out of Redis as files, and offline
tables into Redis as the prior (docs/online-profiles.md §4).

``export`` writes ``OUT/<table>.json`` for every table the schedulers learned, in the format
``esg profile`` writes (``esg plan --profiles OUT`` and ``esg scheduler --profiles OUT`` read them); a
table with no measured configuration and no prior has nothing to write and is named. ``import`` checks
every ``DIR/*.json`` first, then seeds each as its table's prior: the schedulers lay what they measure
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
    e.add_argument("--redis", metavar="URL", required=True, type=checks.redis_url, help="the schedulers' Redis")
    e.add_argument("--out", required=True, type=Path, help="directory for the tables")
    e.add_argument("--topic-prefix", metavar="P", type=checks.topic_prefix, default="",
                   help="the deployment's topic prefix (default none)")
    e.add_argument("--gpu-model", type=checks.gpu_model, default=DEFAULT_GPU_MODEL,
                   help="GPU model of a table with no prior (its MIG names refer to it)")
    e.set_defaults(func=export)
    i = sub.add_parser("profile-import", prog="esg profile import", help="seed Redis with offline tables (esg profile import)",
                       description="Check every DIR/*.json, then store each as its table's prior in Redis.")
    i.add_argument("--redis", metavar="URL", required=True, type=checks.redis_url, help="the schedulers' Redis")
    i.add_argument("dir", metavar="DIR", type=Path, help="directory of profile tables")
    i.add_argument("--topic-prefix", metavar="P", type=checks.topic_prefix, default="",
                   help="the deployment's topic prefix (default none)")
    i.set_defaults(func=import_)


def rewrite(argv: list[str]) -> list[str]:
    """``profile export ...`` -> ``profile-export ...`` (the verbs are not profiling targets)."""
    if len(argv) >= 2 and argv[0] == "profile" and argv[1] in VERBS:
        return [f"profile-{argv[1]}", *argv[2:]]
    return argv


def _store(url: str, prefix: str):
    from agent_channel.connect import ChannelError, connect
    from controller_plugin.online import OnlineStore

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
        store.import_table(name, prof)
        print(f"{name}: {len(prof.entries)} configurations imported as the prior")
    return 0
