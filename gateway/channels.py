"""Channel names: namespace resolution, name validation and user-limited channels (pure).

Rules as Centrifugo (PROTOCOL.md §7): a leading ``channel.private_prefix`` is stripped; the
namespace is the part before the first ``namespace_boundary``; no boundary ⇒ the
``without_namespace`` options; an unknown namespace ⇒ error 102; a name longer than
``channel.max_length``, non-ASCII without ``channel_regex``, or not matching the regex ⇒ 107.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from gateway.config.schema import ChannelOptions, Settings
from gateway.protocol import codes


@dataclass(frozen=True, slots=True)
class ChannelRules:
    """A resolved channel: its namespace name ("" for none) and options."""

    namespace: str
    options: ChannelOptions
    private: bool


@lru_cache(maxsize=256)
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def resolve(settings: Settings, channel: str) -> ChannelRules | codes.Error:
    """Resolve and validate a channel name; returns an Error (102 or 107) when refused."""
    cfg = settings.channel
    if len(channel) > cfg.max_length:
        return codes.ERROR_BAD_REQUEST
    private = bool(cfg.private_prefix) and channel.startswith(cfg.private_prefix)
    opts = settings.channel_options(channel)
    if opts is None:
        return codes.ERROR_UNKNOWN_CHANNEL
    name = channel[len(cfg.private_prefix) :] if private else channel
    namespace, sep, rest = name.partition(cfg.namespace_boundary)
    if not sep:
        namespace, rest = "", name
    if opts.channel_regex:
        if not _compiled(opts.channel_regex).fullmatch(rest):
            return codes.ERROR_BAD_REQUEST
    elif not channel.isascii():
        return codes.ERROR_BAD_REQUEST
    return ChannelRules(namespace, opts, private)


def user_allowed(settings: Settings, channel: str, user: str) -> bool:
    """True when ``channel`` is user-limited (``…#42,43``) and lists ``user``."""
    boundary = settings.channel.user_boundary
    if not boundary or boundary not in channel or not user:
        return False
    users = channel.rsplit(boundary, 1)[1]
    return user in users.split(settings.channel.user_separator)
