"""Lifecycle webhooks, a Taskcast extension (docs/webhooks.md): connect, disconnect, subscribe,
unsubscribe, presence join/leave and channel occupied/vacated, POSTed to the application backend
in signed batches, at least once, from a bounded queue that never blocks a client.

``hooks`` is the seam the node and the connections call (a no-op unless webhooks are
configured); ``events`` the pure wire format, selection and signature; ``occupancy`` the pure
first-subscriber / last-leaver decision of one process; ``redis_occupancy`` the same decided once
across a cluster in Redis; ``delivery`` the bounded queue and POSTs of one webhook;
``lifecycle`` turns hook calls into events for the deliveries. Imports nothing of
gateway/connection or the transports.
"""
