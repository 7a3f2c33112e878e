"""Where the channel lives in Redis: one deployment's streams and data keys.

``prefix`` is OpenWhisk's topic prefix (one deployment); ``scope`` is prefix + controller id (one
scheduler role: the leader and its standbys), as in the ledger (``controller_plugin/ledger.py``), so
several deployments and several controllers share one Redis without mixing.

Everything one node's agent writes lives under that node's own key space, ``esg:{prefix}:node:{node}:``,
so that a Redis ACL user per node (:mod:`agent_channel.acl`) can write there and nowhere else: what the
scheduler reads from a node's space was written by that node (or by the scheduler), never forged by
another. The trust is in the key, not in a field of the message (``docs/deployment.md``, "Redis").

* ``esg:{prefix}:node:{node}:dispatch`` -- stream of :class:`~agent_channel.protocol.DispatchMessage` and
  :class:`~agent_channel.protocol.PrewarmMessage` for one node, written by the leading scheduler.
  Consumer group ``agents``; the node's agent is consumer ``{node}``, so a restarted agent finds what it
  had taken and not answered in its own pending list. Entries are acknowledged and deleted once
  answered: the stream holds only unfinished dispatches.
* ``esg:{prefix}:node:{node}:results:{controller}`` -- stream of
  :class:`~agent_channel.protocol.BatchResult` from that node to the schedulers of one controller (each
  dispatch names it in ``reply_to``); the leader reads it and trims what its ledger has recorded, so a
  standby that takes over finds there every result the old leader had not recorded.
* ``esg:{prefix}:node:{node}:heartbeats`` -- stream of :class:`~agent_channel.protocol.Heartbeat` from
  that node (capped at about :data:`HEARTBEAT_MAXLEN` entries); every scheduler reads it.
* ``esg:{prefix}:node:{node}:claim:{batch_id}`` -- a batch's at-most-once claim (``running``, ``done`` or
  ``revoked``; :mod:`agent_channel.claims`), with a TTL.
* ``esg:{prefix}:node:{node}:epoch`` -- the newest leader epoch that node has been told of: its agent
  refuses a dispatch of an older one.
* ``esg:{prefix}:node:{node}:data:{activationId}:{function}`` -- a function's output (JSON) for its
  successors on other nodes, with a TTL; every agent may read it, only its producer write it; the
  scheduler deletes a request's keys when it answers it.
* ``esg:{prefix}:hello`` -- stream of node names: an agent announces itself there (write only), so the
  schedulers start reading its heartbeats; a name is believed only once its heartbeat stream exists.

Every entry of a stream has one field, :data:`FIELD`, holding the encoded message.
"""

from __future__ import annotations

from dataclasses import dataclass

FIELD = b"m"
AGENT_GROUP = "agents"
HEARTBEAT_MAXLEN = 100
#: A results stream whose scheduler is gone for good stops growing here (its scheduler trims it).
RESULTS_MAXLEN = 100_000
HELLO_MAXLEN = 1000


@dataclass(frozen=True)
class Keys:
    prefix: str = ""
    controller_id: str = "0"

    @property
    def scope(self) -> str:
        return f"{self.prefix}{self.controller_id}"

    def node_space(self, node: str) -> str:
        """The key prefix of everything ``node``'s agent writes."""
        return f"esg:{self.prefix}:node:{node}:"

    def dispatch(self, node: str) -> str:
        return f"{self.node_space(node)}dispatch"

    def results(self, node: str) -> str:
        return f"{self.node_space(node)}results:{self.controller_id}"

    def heartbeats(self, node: str) -> str:
        return f"{self.node_space(node)}heartbeats"

    def claim(self, node: str, batch_id: str) -> str:
        return f"{self.node_space(node)}claim:{batch_id}"

    def node_epoch(self, node: str) -> str:
        return f"{self.node_space(node)}epoch"

    def data(self, node: str, activation_id: str, function: str) -> str:
        return f"{self.node_space(node)}data:{activation_id}:{function}"

    @property
    def hello(self) -> str:
        return f"esg:{self.prefix}:hello"

    def is_results_of(self, node: str, key: str) -> bool:
        """Whether ``key`` is one of ``node``'s results streams (the only ``reply_to`` its agent answers to)."""
        return key.startswith(f"{self.node_space(node)}results:") and ":" not in key[len(self.node_space(node)) + 8:]

    def is_data_of(self, node: str, key: str) -> bool:
        """Whether ``key`` is an output stored by ``node``'s agent."""
        return key.startswith(f"{self.node_space(node)}data:")

    def node_of(self, key: str) -> str | None:
        """The node whose key space holds ``key`` (None: no node's)."""
        head = f"esg:{self.prefix}:node:"
        if not key.startswith(head):
            return None
        node, sep, _ = key[len(head):].partition(":")
        return node if sep and node else None
