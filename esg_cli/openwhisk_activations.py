"""Activation records as OpenWhisk's controller reads and writes them, for the REST stand-in.

Reads go through the same CouchDB views the controller queries (``CouchDbRestStore.query``/``count``,
``WhiskEntityQueries.listCollectionInNamespace``, ``ArtifactActivationStore``), so a list shows what
OpenWhisk's ``activations`` design documents index:

* ``whisks.v2.1.0/activations``, key ``[namespace, start]``: every activation of a namespace;
* ``whisks-filters.v2.1.1/activations``, key ``[namespace/[package/]action, start]``: ``?name=``.

A list asks from ``[path, upto or "\\ufff0", "\\ufff0"]`` down to ``[path, since or 0]``, newest first,
with ``skip`` and ``limit``; ``docs=true`` reads the documents, otherwise the rows' values are the
summaries the view emits. A count reduces the same range and subtracts ``skip``. The views must be
installed (OpenWhisk's ``initdb``; ``esg up`` runs the same initialisation): without them every read is
the controller's 500, never a silently empty list.
"""

from __future__ import annotations

from typing import Any

from controller_plugin.activation_store import ActivationStore, record_of
from esg_cli import openwhisk_views as views

ACTIVATIONS_VIEW = ("whisks.v2.1.0", "activations")
FILTERS_VIEW = ("whisks-filters.v2.1.1", "activations")
TOP = "\ufff0"


def _range(namespace: str, opts: views.ListOptions) -> tuple[tuple[str, str], list[Any], list[Any]]:
    view = FILTERS_VIEW if opts.name else ACTIVATIONS_VIEW
    path = f"{namespace}/{opts.name}" if opts.name else namespace
    start = [path, opts.since if opts.since is not None else 0]
    end = [path, opts.upto if opts.upto is not None else TOP, TOP]
    return view, start, end


def list_activations(store: ActivationStore, namespace: str, opts: views.ListOptions) -> list[dict[str, Any]]:
    """``GET .../activations``: summaries, or extended records with ``docs``; StoreError if the store fails."""
    (design, view), start, end = _range(namespace, opts)
    answer = store.view(design, view, startkey=end, endkey=start, descending=True, skip=opts.skip,
                        limit=opts.limit, include_docs=opts.docs, reduce=False)
    rows = answer.get("rows") or []
    if opts.docs:
        return [views.extended(record_of(row["doc"])) for row in rows if isinstance(row.get("doc"), dict)]
    return [row["value"] for row in rows if isinstance(row.get("value"), dict)]


def count_activations(store: ActivationStore, namespace: str, opts: views.ListOptions) -> dict[str, int]:
    """``GET .../activations?count=true``: ``{"activations": n}``."""
    (design, view), start, end = _range(namespace, opts)
    rows = store.view(design, view, startkey=start, endkey=end, reduce=True).get("rows") or []
    total = int(rows[0]["value"]) if rows else 0
    return {"activations": max(0, total - opts.skip)}


def fetch(store: ActivationStore, namespace: str, activation_id: str) -> dict[str, Any] | None:
    """The record stored as ``namespace/activationId``, or None."""
    doc = store.get(namespace, activation_id)
    return None if doc is None else record_of(doc)
