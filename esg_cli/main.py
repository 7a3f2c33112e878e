"""Entry point of the ``esg`` command.

Each subcommand lives in its own module with ``register(subparsers)``, which adds its parser and sets
``func``. A user-facing error (:class:`esg.errors.EsgError` or :class:`esg_cli.errors.CliError`) prints
one line naming the problem and exits with status 2 -- never a traceback. Every subcommand checks all of
its input before it starts any work (:mod:`esg_cli.checks`); argparse's own errors are one line too
(:class:`esg_cli.cliparse.Parser`).
"""

from __future__ import annotations

import importlib
import os
import sys

from esg.errors import EsgError
from esg_cli.cliparse import Parser, UsageError, fail
from esg_cli.errors import CliError

SUBCOMMANDS = (
    "esg_cli.plan",
    "esg_cli.mig",
    "esg_cli.profile",
    "esg_cli.profile_tables",
    "esg_cli.agent",
    "esg_cli.scheduler",
    "esg_cli.up",
    "esg_cli.bench",
    "esg_cli.emulate",
    "esg_cli.replay",
    "esg_cli.status",
    "esg_cli.redis_users",
    "esg_cli.deploy",
)


def build_parser() -> Parser:
    parser = Parser(
        prog="esg", description="ESG scheduling of DNN workflows on OpenWhisk with MIG-shared GPUs")
    parser.add_argument("--version", action="version", version=f"esg {version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in SUBCOMMANDS:
        importlib.import_module(name).register(sub)
    return parser


def version() -> str:
    """The installed package's version (``pyproject.toml``'s)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed
    try:
        return installed("esg-openwhisk")
    except PackageNotFoundError:    # run from a checkout that was never installed
        return "unknown (not installed)"


def main(argv: list[str] | None = None) -> int:
    from esg_cli.profile_tables import rewrite

    parser = build_parser()
    try:
        args = parser.parse_args(rewrite(list(sys.argv[1:] if argv is None else argv)))
    except UsageError:  # already reported on one line
        return 2
    try:
        return int(args.func(args) or 0)
    except (EsgError, CliError) as exc:
        return fail(f"esg {args.command}", exc)
    except KeyboardInterrupt:
        print(f"esg {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (esg ... | head): stop quietly, as Unix tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
