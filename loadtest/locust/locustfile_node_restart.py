"""Scenario: a gateway node restarted under load. The runner (``run.py node_restart``) stops one gateway
with SIGTERM (clients get 3001 and reconnect through nginx to the other node) and starts it again;
``WS reconnect recovered=…`` rows show how long the moved clients needed and whether history sufficed."""

from taskcast_locust import HOT_CHANNEL, CentrifugoWSUser, HotPublisherUser, env


class Publisher(HotPublisherUser):
    host = env("API_URL")
    fixed_count = 1


class Client(CentrifugoWSUser):
    extra_channels = [HOT_CHANNEL]
