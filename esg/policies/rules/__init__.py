"""ESG's rules: each a plugin of :mod:`esg.policies.points` holding its own state, composed with ESG's
proposer by :func:`esg.policies.esg_policy.esg_policy` (``docs/adding-a-policy.md`` adds one).

* :mod:`~esg.policies.rules.jit_prewarm`: a successor's worker started beside its predecessor's batch;
* :mod:`~esg.policies.rules.wait_for_busy`: an on-time head waits for a worker that frees in time;
* :mod:`~esg.policies.rules.spare_instances`: a waiting function gets a worker on a spare instance;
* :mod:`~esg.policies.rules.pool_sizing`: pools grown onto the instances held while the load leaves room;
* :mod:`~esg.policies.rules.shared`: what they share (batches in flight, starts per node).
"""
