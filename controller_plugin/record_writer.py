"""The activation records on their way to OpenWhisk's activation store, off the main loop.

:class:`RecordWriter` owns a thread and its own :class:`~controller_plugin.activation_store.ActivationStore`
session. The ack pipeline hands it each record once the ack's ledger entry (which holds the record) is
written; the thread writes what has gathered in one ``_bulk_docs`` and tells the main loop which
activations are finished with (:class:`Stored`), so their ledger entries are marked ``done`` only then.
While the store fails it retries, logging once per outage; nothing is dropped (a restart stores again
what the ledger still holds). A record the store refuses outright is logged with the store's reason.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from controller_plugin.activation_store import ActivationStore, StoreError

log = logging.getLogger("esg.scheduler")

MAX_BATCH = 500
RETRY_S = 0.5
DRAIN_S = 2.0


@dataclass(frozen=True)
class Stored:
    """Activations whose records the store took."""

    ids: tuple[str, ...]


class RecordWriter:
    def __init__(self, store: ActivationStore, deliver: Callable[[Stored], None]) -> None:
        self.store = store
        self.deliver = deliver
        self._queue: queue.Queue[Mapping[str, Any]] = queue.Queue()

    def put(self, record: Mapping[str, Any]) -> None:
        self._queue.put(record)

    def backlog(self) -> int:
        return self._queue.qsize()

    def run(self, stop: threading.Event, drain_s: float = DRAIN_S) -> None:
        """Write until ``stop``; then, for up to ``drain_s`` more, what is still waiting."""
        failing = False
        batch: list[Mapping[str, Any]] = []
        end: float | None = None
        while True:
            if end is None and stop.is_set():
                end = time.monotonic() + drain_s
            if end is not None and (time.monotonic() > end or (not batch and self._queue.empty())):
                return
            while len(batch) < MAX_BATCH:
                try:
                    batch.append(self._queue.get(timeout=0.05) if not batch else self._queue.get_nowait())
                except queue.Empty:
                    break
            if not batch:
                continue
            try:
                refused = self.store.put_many(batch)
            except StoreError as exc:
                if not failing:
                    log.error("%s; retrying (%d records waiting)", exc, len(batch) + self._queue.qsize())
                failing = True
                time.sleep(RETRY_S) if end is not None else stop.wait(RETRY_S)
                continue
            if failing:
                log.info("the activation store answers again")
            failing = False
            for aid, reason in refused:
                log.error("the activation store refused the record of %s: %s", aid, reason)
            self.deliver(Stored(tuple(r["activationId"] for r in batch)))
            batch = []

    def write_now(self) -> list[str]:
        """In the caller's thread, once (the writer's thread has ended): write what is waiting; the ids
        the store took or refused (an unreachable store is logged, and the ledger keeps them)."""
        batch: list[Mapping[str, Any]] = []
        while True:
            try:
                batch.append(self._queue.get_nowait())
            except queue.Empty:
                break
        if not batch:
            return []
        try:
            refused = self.store.put_many(batch)
        except StoreError as exc:
            log.error("%s: %d records left for the next start", exc, len(batch))
            return []
        for aid, reason in refused:
            log.error("the activation store refused the record of %s: %s", aid, reason)
        return [r["activationId"] for r in batch]
