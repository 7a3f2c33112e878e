"""How deeply a JSON value from outside may nest: one limit for every part that reads or writes one.

JSON parsers and encoders recurse once per level and stop near 1000 (Python's recursion limit), so a
value nested close to that parses in one place and cannot be written again in the next. Every reader
refuses a deeper value by name instead: the scheduler<->agent messages (:mod:`agent_channel.protocol`),
OpenWhisk's Kafka messages (:mod:`controller_plugin.wire`) and an action's result
(:mod:`invoker_agent.batch`). Pure, like the rest of the core, so every side may import it.
"""

from __future__ import annotations

from typing import Any

MAX_NESTING = 200
"""How deeply a value carried in a message (an activation's parameters, an action's result) may nest."""

MAX_MESSAGE_NESTING = MAX_NESTING + 10
"""How deeply a whole message may nest: its values' limit plus the levels of its own structure."""


def deeper_than(value: Any, limit: int = MAX_NESTING) -> bool:
    """Whether ``value`` (parsed JSON) nests more than ``limit`` levels of arrays and objects (iterative)."""
    stack = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        children = v.values() if isinstance(v, dict) else v if isinstance(v, list | tuple) else None
        if children is None:
            continue
        if depth > limit:
            return True
        stack.extend((c, depth + 1) for c in children)
    return False


def text_deeper_than(text: str | bytes, value: Any, limit: int = MAX_NESTING) -> bool:
    """:func:`deeper_than` of ``value``, parsed from ``text``, without walking it when ``text`` holds no
    more than ``limit`` brackets that open an object or an array: every level of nesting opens one, so
    such a value cannot nest deeper (a bracket inside a string only adds to the count). Counting is one
    pass in C over the text; the walk visits every value, which a message's decoding paid at each hop."""
    if isinstance(text, str):
        opened = text.count("{") + text.count("[")
    else:
        opened = text.count(b"{") + text.count(b"[")
    return opened > limit and deeper_than(value, limit)
