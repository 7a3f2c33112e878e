"""At most once: a batch runs only under a claim its agent took, and a claim the scheduler revoked cannot be taken.

Each dispatched batch has a claim key in its node's key space (``esg:{prefix}:node:{node}:claim:{batch}``,
:meth:`agent_channel.keys.Keys.claim`), absent until one side acts:

* the **agent**, right before it starts a batch, takes the claim (:data:`CLAIM`): it sets ``running``
  when the key is absent and the batch's leader epoch is not older than the newest its node was told of
  (``esg:{prefix}:node:{node}:epoch``); otherwise it gets what is there -- ``revoked`` (the scheduler took
  the batch back), ``running`` (this node started it before: a restarted agent does not start it again),
  ``done`` -- or ``stale`` (a newer leader exists), and does not run it. When it answers, the claim
  becomes ``done`` in the answer's own transaction;
* the **scheduler** that wants a batch back (its agent went silent; a new leader taking over what an
  older one sent) revokes it (``controller_plugin/channel.py``): in one fenced script, an absent claim
  becomes ``revoked`` and the dispatch leaves the stream -- the batch can then never start, and only
  then is it sent again elsewhere; a ``running`` or ``done`` claim is left alone and reported, and the
  batch is not run again (its result is awaited, or its activations are answered with an error).

Redis runs each script alone, so the two never interleave: either the agent's claim or the revocation
comes first. Claims expire with the batch's data (``data_ttl_s``: past the controller's deadline).
"""

from __future__ import annotations

from collections.abc import Sequence

import redis

from agent_channel.keys import Keys

RUNNING = "running"
DONE = "done"
REVOKED = "revoked"
STALE = "stale"
CLAIMED = "claimed"

# KEYS: the node's epoch key, then the claim keys; ARGV: per claim its batch's epoch and TTL (s).
CLAIM = """
local newest = tonumber(redis.call('GET', KEYS[1]) or '0')
local out = {}
for i = 2, #KEYS do
  local epoch = tonumber(ARGV[2 * i - 3])
  local cur = redis.call('GET', KEYS[i])
  if cur then
    out[i - 1] = cur
  elseif epoch < newest then
    out[i - 1] = 'stale'
  else
    redis.call('SET', KEYS[i], 'running', 'EX', ARGV[2 * i - 2])
    out[i - 1] = 'claimed'
  end
end
return out
"""


def claim(client: redis.Redis, keys: Keys, node: str, batches: Sequence[tuple[str, int, int]]) -> list[str]:
    """Take the claims of ``(batch_id, epoch, ttl_s)`` batches on ``node``: :data:`CLAIMED` for each this
    agent may now run, else why not (:data:`REVOKED`, :data:`RUNNING`, :data:`DONE` or :data:`STALE`)."""
    if not batches:
        return []
    args: list[int] = []
    for _, epoch, ttl in batches:
        args += [epoch, max(1, ttl)]
    got = client.eval(CLAIM, 1 + len(batches), keys.node_epoch(node),
                      *(keys.claim(node, b) for b, _, _ in batches), *args)
    return [g.decode() if isinstance(g, bytes) else g for g in got]
