"""Errors the core raises for bad input: each names the thing that is wrong."""


class EsgError(ValueError):
    """Base class: a user-facing problem with input (an app, a profile, a request)."""


class AppError(EsgError):
    """An app definition is invalid (cycle, unknown function, bad SLO...)."""


class ProfileError(EsgError):
    """A profile table is missing, malformed or inconsistent with its GPU model."""


class MigError(EsgError):
    """A MIG profile or layout is unknown to, or impossible on, a GPU model."""
