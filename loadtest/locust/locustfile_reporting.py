"""Scenario: steady event reporting through the Status API (seed §15). Reporters create a task each
and report STEP_PROGRESS events; the tasks' owners are connected WebSocket users, so ``PUSH task_user``
is the commit→visible latency through the relays and gateways."""

import os

from taskcast_locust import CentrifugoWSUser, ReporterUser, env

os.environ.setdefault("TASKCAST_LT_OWNERS", env("OWNERS", "20"))


class Reporter(ReporterUser):
    host = env("STATUS_URL")
    weight = 1


class Owner(CentrifugoWSUser):
    weight = 1
