"""Who may write a map key from the client side (Centrifugo's ``OnMapPublish`` / ``OnMapRemove``
rules, pure): ``map.allow_publish_for_client`` (any authenticated client; anonymous ones too with
``allow_publish_for_anonymous``), ``allow_publish_for_subscriber`` (clients subscribed to the
map, under the same anonymous rule), ``client.insecure``; the same with ``allow_remove_for_*``
for removals. The key written is the client's own unless ``map.client_key`` makes it the client
ID or the user ID (an anonymous client may not write under ``user_id``).
"""

from __future__ import annotations

from gateway.config.sections.maps import MapSettings


def may_write(m: MapSettings, *, user: str, subscribed: bool, insecure: bool, remove: bool) -> bool:
    """Whether a client write (``remove``: a removal) is allowed."""
    if remove:
        client, subscriber, anonymous = (
            m.allow_remove_for_client,
            m.allow_remove_for_subscriber,
            m.allow_remove_for_anonymous,
        )
    else:
        client, subscriber, anonymous = (
            m.allow_publish_for_client,
            m.allow_publish_for_subscriber,
            m.allow_publish_for_anonymous,
        )
    known = bool(user) or anonymous
    return (client and known) or (subscriber and subscribed and known) or insecure


def write_key(m: MapSettings, *, key: str, client_id: str, user: str) -> str | None:
    """The key a client write goes to; None: refused (``user_id`` keys of an anonymous client)."""
    if m.client_key == "client_id":
        return client_id
    if m.client_key == "user_id":
        return user or None
    return key
