"""Shared-poll subscriptions (Centrifugo v6.8, ``subscription_type: shared_poll``): clients track
keys of a channel with HMAC-signed key sets; each node polls the backend's
``shared_poll_refresh`` proxy for the keys its connections track, once per channel and interval
however many connections track them, and pushes each key's change to the connections tracking
that key. ``signature.py`` and ``state.py`` are pure; ``manager.py`` runs the polls and the
fan-out; gateway/connection/shared_poll.py is one connection's side.
"""
