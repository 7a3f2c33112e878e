"""Where the channel lives in Redis: one deployment's streams and data keys.

``prefix`` is OpenWhisk's topic prefix (one deployment); ``scope`` is prefix + controller id (one
scheduler), as in the ledger (``controller_plugin/ledger.py``), so several deployments and several
schedulers share one Redis without mixing.

* ``esg:{prefix}:node:{node}:dispatch`` -- stream of :class:`~agent_channel.protocol.DispatchMessage` for one node,
  from every scheduler of the deployment. Consumer group ``agents``; the node's agent is consumer
  ``{node}``, so a restarted agent finds what it had taken and not answered in its own pending list.
  Entries are acknowledged and deleted once answered: the stream holds only unfinished dispatches.
* ``esg:{scope}:results`` -- stream of :class:`~agent_channel.protocol.BatchResult` for one scheduler (each
  dispatch names it in ``reply_to``); the scheduler reads it from its end and trims what it read.
* ``esg:{prefix}:heartbeats`` -- stream of :class:`~agent_channel.protocol.Heartbeat` from every agent (capped at
  about :data:`HEARTBEAT_MAXLEN` entries); every scheduler of the deployment reads all of it.
* ``esg:{prefix}:data:{activationId}:{function}`` -- a function's output (JSON) for its successors on
  other nodes, with a TTL; the scheduler deletes the keys of a request when it answers it.

Every entry of a stream has one field, :data:`FIELD`, holding the encoded message.
"""

from __future__ import annotations

from dataclasses import dataclass

FIELD = b"m"
AGENT_GROUP = "agents"
HEARTBEAT_MAXLEN = 1000
#: A results stream whose scheduler is gone for good stops growing here (its scheduler trims it).
RESULTS_MAXLEN = 100_000


@dataclass(frozen=True)
class Keys:
    prefix: str = ""
    controller_id: str = "0"

    @property
    def scope(self) -> str:
        return f"{self.prefix}{self.controller_id}"

    def dispatch(self, node: str) -> str:
        return f"esg:{self.prefix}:node:{node}:dispatch"

    @property
    def results(self) -> str:
        return f"esg:{self.scope}:results"

    @property
    def heartbeats(self) -> str:
        return f"esg:{self.prefix}:heartbeats"

    def data(self, activation_id: str, function: str) -> str:
        return f"esg:{self.prefix}:data:{activation_id}:{function}"
