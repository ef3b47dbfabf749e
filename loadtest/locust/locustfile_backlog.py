"""Scenario: outbox backlog catch-up. Reporters keep reporting through the Status API while the
runner (``run.py backlog``) pauses the relays with SIGSTOP and resumes them; the project channel's
subscribers see the backlog as ``PUSH task_project`` latency, and the runner reports how long after the
resume the latency came back down."""

from taskcast_locust import HOT_CHANNEL, CentrifugoWSUser, ReporterUser, env


class Reporter(ReporterUser):
    host = env("STATUS_URL")
    weight = 1


class ProjectWatcher(CentrifugoWSUser):
    extra_channels = [HOT_CHANNEL]
    weight = 1
