"""A hypothesis RuleBasedStateMachine over the delivery path (issue 10): publish, disconnect,
reconnect-with-position, relay crash (the same publication re-sent with its idempotency key, as a
relay killed between publish and mark does), Redis flush, meta deletion and token expiry (the
client reconnects with a freshly minted token), against one real gateway process on Redis and one
convergent client. After every step: no safety violation in the client's log (silent gap, double
delivery, version going back) and the client converges on the truth within a bound.

Bounded for CI: few examples, few steps, no per-example deadline, no shrinking (a failing
sequence is reported as generated, at most ``stateful_step_count`` steps: shrinking replays
sequences against real processes, each failing one waiting out the healing bound, and ran for
minutes); the whole test stays < 60 s.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from redis.asyncio import Redis

from gateway.engine.redis_keys import RedisKeys
from tests.faults.pipeline.clients import ConvergentClient
from tests.faults.pipeline.conftest import SECRET, api, gateway_config
from tests.helpers.convergence import Checker
from tests.helpers.redis_engine import delete_prefix, unique_prefix
from tests.support import GatewayProcess

pytestmark = pytest.mark.redis

CHANNELS = ["task_user:t1/sm1", "task_user:t1/sm2"]
TASKS = ["x", "y"]
HEAL_SECONDS = 30.0  # a bound on healing under load, not the expected time
ENV: dict[str, object] = {}


@pytest.fixture(scope="module", autouse=True)
def _gateway(tmp_path_factory: pytest.TempPathFactory, redis_url: str) -> Iterator[None]:
    prefix = unique_prefix()
    engine = {"type": "redis", "redis": {"address": redis_url, "prefix": prefix, "io_timeout": "1s"}}
    gw = GatewayProcess(gateway_config(**engine), Path(tmp_path_factory.mktemp("sm"))).start()
    ENV.update(gw=gw, prefix=prefix, redis_url=redis_url)
    yield
    gw.terminate()
    ENV.clear()


class Delivery(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.gw: GatewayProcess = ENV["gw"]  # type: ignore[assignment]
        self.prefix = str(ENV["prefix"])
        self.loop = asyncio.new_event_loop()
        self.redis = Redis.from_url(str(ENV["redis_url"]))
        self.run(delete_prefix(self.redis, self.prefix))
        self.truth: dict[str, dict[str, int]] = {ch: {} for ch in CHANNELS}
        self.sent: list[tuple[str, str, int]] = []
        self.client = ConvergentClient(self.gw.ws_url, SECRET, CHANNELS, snapshot=self.snapshot)
        self.run(self.client.__aenter__())

    def run(self, coro: object) -> object:
        return self.loop.run_until_complete(coro)  # type: ignore[arg-type]

    async def snapshot(self, channel: str) -> dict[str, int]:
        return dict(self.truth[channel])

    async def _publish(self, channel: str, task: str, version: int) -> None:
        # Commit, then publish (the relay's order): the truth a snapshot reads already holds the
        # version when its publication can reach the client. Updating it only after the API's
        # reply let a client that resynced while the reply was on its way read a truth without
        # the version, position itself past the publication and never converge.
        self.truth[channel][task] = max(self.truth[channel].get(task, 0), version)
        body = {"channel": channel, "data": {"taskId": task, "version": version}}
        reply = await api(self.gw, "publish", {**body, "idempotency_key": f"{task}:{version}"})
        assert "result" in reply, reply

    @rule(channel=st.sampled_from(CHANNELS), task=st.sampled_from(TASKS))
    def publish(self, channel: str, task: str) -> None:
        version = self.truth[channel].get(task, 0) + 1
        self.run(self._publish(channel, task, version))
        self.sent.append((channel, task, version))

    @rule()
    def relay_crash_republishes_the_last(self) -> None:
        if self.sent:
            self.run(self._publish(*self.sent[-1]))

    @rule()
    def disconnect_and_reconnect_with_position(self) -> None:
        self.run(self.client.drop())

    @rule()
    def token_expiry(self) -> None:
        # the server closes an expired connection; the client reconnects with a fresh token
        self.run(self.client.drop())

    @rule()
    def redis_flush(self) -> None:
        self.run(delete_prefix(self.redis, self.prefix))

    @rule(channel=st.sampled_from(CHANNELS))
    def meta_deletion(self, channel: str) -> None:
        self.run(self.redis.delete(RedisKeys(self.prefix).meta(channel)))

    @invariant()
    def converged_without_violation(self) -> None:
        expected = {(ch, t): v for ch, tasks in self.truth.items() for t, v in tasks.items()}
        self.run(Checker().wait_converged([self.client.log], expected, within=HEAL_SECONDS))
        assert Checker().check_client(self.client.log, expected) == []

    def teardown(self) -> None:
        self.run(self.client.__aexit__(None, None, None))
        self.run(self.redis.aclose())
        self.loop.close()


Delivery.TestCase.settings = settings(
    max_examples=25,
    stateful_step_count=15,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
TestDelivery = Delivery.TestCase
