"""Scenario: many idle connections (seed §15). Each user holds one WebSocket with its own
``task_user`` channel, answers pings and does nothing else. Watch ``WS connect`` and the gateway's
memory/CPU; failures mean dropped idle connections."""

from locust import constant
from taskcast_locust import CentrifugoWSUser


class IdleConnection(CentrifugoWSUser):
    wait_time = constant(5)
