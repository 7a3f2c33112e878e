"""Posing as the invokers: agents known by their heartbeats, each behind a stable virtual invoker id.

Each agent (node name) gets an id 0..K-1, stored in Redis so a restart keeps it; only the leader hands
out ids (a standby follows the agents it already knows an id for, and learns new ones from Redis). While
an agent heartbeats, the leader pings ``health`` every second as that id with the agent's memory; once
it has been silent for the agent timeout it is dead, its pings stop (the controller marks the id Offline
after 10 s) and its in-flight batches are taken back or failed.

**Silent, measured by reads.** A heartbeat counts as seen at the start of the read that brought it, and
an agent is silent only when a read that *started* more than the timeout after that came back without
a newer one (:meth:`AgentRegistry.expire` takes the start of the latest read the loop has handled). A
scheduler that was itself paused, or whose reads fell behind, therefore never declares an agent lost
from the gap of its own stall: the heartbeats queued meanwhile arrive with the first read after it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from agent_channel.protocol import Heartbeat
from controller_plugin import wire
from esg.cluster import NodeState

DEFAULT_USER_MEMORY_MB = 1024


@dataclass
class Agent:
    node: str
    invoker_id: int
    heartbeat: Heartbeat
    last_seen_s: float
    alive: bool = True

    def instance(self) -> wire.InvokerInstance:
        return wire.InvokerInstance(instance=self.invoker_id, user_memory_mb=max(self.heartbeat.memory_mb, 128),
                                    unique_name=self.node, displayed_name=self.node)


class AgentRegistry:
    def __init__(self, assign_id: Callable[[str], int], known_ids: dict[str, int], timeout_s: float,
                 reload_ids: Callable[[], dict[str, int]] | None = None) -> None:
        self._assign = assign_id
        self._reload = reload_ids
        self.ids = dict(known_ids)
        self.timeout_s = timeout_s
        self.agents: dict[str, Agent] = {}
        self.leading = True
        """Whether this scheduler may hand out invoker ids (a standby may not)."""

    def heartbeat(self, hb: Heartbeat, now_s: float) -> Agent | None:
        """Record a heartbeat read by a read that started at ``now_s``; return the agent if it just joined
        (or came back)."""
        agent = self.agents.get(hb.node)
        if agent is None:
            iid = self.ids.get(hb.node)
            if iid is None and not self.leading and self._reload is not None:
                self.ids.update(self._reload())
                iid = self.ids.get(hb.node)
            if iid is None:
                if not self.leading:
                    return None     # the leader gives it an id; this standby learns it then
                iid = self._assign(hb.node)
                self.ids[hb.node] = iid
            agent = self.agents[hb.node] = Agent(hb.node, iid, hb, now_s)
            return agent
        if hb.seq and agent.heartbeat.seq and hb.seq < agent.heartbeat.seq and agent.alive:
            return None  # an old heartbeat arriving late
        agent.heartbeat = hb
        agent.last_seen_s = now_s
        if not agent.alive:
            agent.alive = True
            return agent
        return None

    def expire(self, now_s: float) -> list[Agent]:
        """Agents silent for the timeout as of ``now_s`` -- the start of the latest read handled, never the
        clock alone -- now marked dead (each reported once)."""
        dead = []
        for a in self.agents.values():
            if a.alive and now_s - a.last_seen_s > self.timeout_s:
                a.alive = False
                dead.append(a)
        return dead

    def live(self) -> list[Agent]:
        return [a for a in self.agents.values() if a.alive and not a.heartbeat.draining]

    def any_alive(self) -> bool:
        return any(a.alive for a in self.agents.values())

    def alive_as(self, invoker_id: int) -> bool:
        """Whether the agent behind virtual invoker ``invoker_id`` is alive."""
        return any(a.alive and a.invoker_id == invoker_id for a in self.agents.values())

    def node_states(self) -> list[NodeState]:
        return [a.heartbeat.node_state() for a in self.live()]

    def invoker_count(self) -> int:
        return max(self.ids.values(), default=-1) + 1

    def instance(self, invoker_id: int) -> wire.InvokerInstance:
        """The InvokerInstanceId acks for topic ``invoker{invoker_id}`` carry."""
        for a in self.agents.values():
            if a.invoker_id == invoker_id:
                return a.instance()
        return wire.InvokerInstance(instance=invoker_id, user_memory_mb=DEFAULT_USER_MEMORY_MB)

    def pings(self) -> list[bytes]:
        return [wire.encode(wire.ping_message(a.instance())) for a in self.agents.values() if a.alive]
