"""Scenario: one hot project channel fanned out to every connected client (seed §15). One publisher
posts to ``task_project:<tenant>/hot`` through the gateway server API; WebSocket and SSE subscribers
report publish→receive latency as ``PUSH task_project`` / ``SSE push``."""

from taskcast_locust import HOT_CHANNEL, CentrifugoWSUser, HotPublisherUser, SSEUser, env


class Publisher(HotPublisherUser):
    host = env("API_URL")
    fixed_count = 1


class HotSubscriber(CentrifugoWSUser):
    extra_channels = [HOT_CHANNEL]
    weight = 4


class HotSSESubscriber(SSEUser):
    weight = 1
