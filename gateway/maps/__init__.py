"""Map subscriptions (Centrifugo v6.8+ subscription type ``map``): keyed state per channel.

A map channel holds entries (key → publication, each with the stream offset of its last change
and, in expiring modes, a TTL) and, unless its mode is ``ephemeral``, a bounded stream of the
changes (updates and removals) with an epoch and offsets. A subscriber pages through the state
as of one stream position, catches up from the stream, and goes live (PROTOCOL.md's stream
rules apply to the live part).

The pure pieces live here: ``options`` (a namespace's ``map`` section resolved), ``state`` (one
channel's keyed state and stream, the memory engine's store and the reference the Redis scripts
follow) and ``phases`` (the subscribe flow's decisions). The engines are
gateway/engine/map_memory.py and map_redis.py; the connection side is
gateway/connection/map_subscribe.py. Imports no asyncio, redis or starlette.
"""
