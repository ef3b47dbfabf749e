"""Scenario: reconnect storm. At ``TASKCAST_LT_STORM_AT`` s, ``TASKCAST_LT_STORM_PERCENT`` % of the
WebSocket users lose their connection at once; they come back with recovery. ``WS reconnect
recovered=true`` is the time from the drop until LIVE again; any ``recovered=false`` row counts the
clients that would need the snapshot. A publisher keeps the hot channel moving meanwhile."""

from taskcast_locust import HOT_CHANNEL, CentrifugoWSUser, HotPublisherUser, env


class Publisher(HotPublisherUser):
    host = env("API_URL")
    fixed_count = 1


class StormClient(CentrifugoWSUser):
    extra_channels = [HOT_CHANNEL]
