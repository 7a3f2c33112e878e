"""The argument parser every entry point uses: one-line errors, and ``--help`` that shows defaults and choices.

argparse's own error output is two lines (the usage, then the message) and its help shows a default only
where the help text spells it out. :class:`Parser` prints one line naming the flag (exit status 2), and
:class:`HelpFormatter` appends ``(default: X)`` and ``(choices: a, b)`` to every option that has them and
does not already say so.
"""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps descriptions as written; adds each option's default and choices to its help line."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.help is argparse.SUPPRESS:
            return text
        extra = []
        if action.choices is not None and "choices" not in text:
            extra.append("choices: " + ", ".join(map(str, action.choices)))
        if _shows_default(action) and "default" not in text:
            extra.append("default: %(default)s")
        if extra:
            text = f"{text} ({'; '.join(extra)})" if text else f"({'; '.join(extra)})"
        return text


def _shows_default(action: argparse.Action) -> bool:
    if action.required or action.default in (None, argparse.SUPPRESS) or not action.option_strings:
        return False
    # flags (store_true/store_false/help/version) have no value to show
    return action.nargs != 0


class UsageError(SystemExit):
    """A bad command line, already reported on one line; exits with status 2 unless caught."""

    def __init__(self) -> None:
        super().__init__(2)


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line: ``PROG: error: MESSAGE (see PROG --help)``, exit 2.

    Sub-parsers made with ``add_subparsers`` are of the same class, so every subcommand behaves alike.
    """

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self._print_message(f"{self.prog}: error: {one_line(message)} (see {self.prog} --help)\n", sys.stderr)
        raise UsageError()

    def add_subparsers(self, **kwargs):
        kwargs.setdefault("parser_class", Parser)
        return super().add_subparsers(**kwargs)


def one_line(text: object) -> str:
    """``text`` on one line: a message from a library may carry newlines (a server's log tail)."""
    return " ".join(str(text).split())


def fail(prog: str, message: object) -> int:
    """Print ``PROG: error: MESSAGE`` on one line to stderr; the exit status of a user error (2)."""
    print(f"{prog}: error: {one_line(message)}", file=sys.stderr)
    return 2
