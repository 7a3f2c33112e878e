"""Scheduling policies behind one interface: ESG and the baselines, chosen by name."""

from __future__ import annotations

from collections.abc import Callable

from esg.policies.base import Policy, PolicyContext

_REGISTRY: dict[str, Callable[[PolicyContext], Policy]] = {}


def register(name: str):
    def deco(factory):
        _REGISTRY[name] = factory
        return factory
    return deco


def make_policy(name: str, ctx: PolicyContext) -> Policy:
    _load_builtin()
    try:
        return _REGISTRY[name](ctx)
    except KeyError:
        raise ValueError(f"unknown policy {name!r} (known: {', '.join(sorted(_REGISTRY))})") from None


def policy_names() -> list[str]:
    _load_builtin()
    return sorted(_REGISTRY)


def _load_builtin() -> None:
    import importlib
    for mod in ("esg_policy", "infless", "fastgshare", "orion", "aquatope"):
        try:
            importlib.import_module(f"esg.policies.{mod}")
        except ModuleNotFoundError as exc:
            if exc.name != f"esg.policies.{mod}":
                raise
