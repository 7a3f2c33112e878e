"""The scheduler<->agent channel on Redis: stream and key names, connecting, and stream entries.

Both ends import it (the scheduler in ``controller_plugin``, the agent in ``invoker_agent``) so they agree
on where messages and data live; the message shapes themselves are :mod:`agent_channel.protocol`.
"""
