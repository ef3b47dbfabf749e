"""One client connection: ``client`` (the driver: feeds the Session, runs its timer and its
commands in order), its parts — ``subscriptions``, ``channel_commands``, ``personal``,
``refresh`` (server-side refresh), ``proxy_streams`` (stream subscriptions over the gRPC proxy),
``delivery`` (per-subscription shaping) — who may do what (``authorization`` over ``tokens``)
and its output side (``sendqueue``: the Transport protocol, the bounded per-tick send queue and
the node's Flusher).
"""
