"""Scheduling policies, chosen by name: each a function that composes a :class:`~esg.policies.base.Policy`
from a proposer and plugins (:mod:`esg.policies.points`), registered with :func:`register`."""

from __future__ import annotations

from collections.abc import Callable

from esg.policies.base import Policy, PolicyContext

_REGISTRY: dict[str, Callable[[PolicyContext], Policy]] = {}


def register(name: str) -> Callable[[Callable[[PolicyContext], Policy]], Callable[[PolicyContext], Policy]]:
    """Register a policy's factory under ``name`` (a decorator)."""
    def deco(factory: Callable[[PolicyContext], Policy]) -> Callable[[PolicyContext], Policy]:
        _REGISTRY[name] = factory
        return factory
    return deco


def make_policy(name: str, ctx: PolicyContext) -> Policy:
    _load_builtin()
    factory = _REGISTRY.get(name)
    if factory is None:
        raise ValueError(f"unknown policy {name!r} (known: {', '.join(sorted(_REGISTRY))})")
    return factory(ctx)


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
