// The client against real processes: a gateway (WebSocket, SSE and HTTP-streaming emulation), the
// Status API for tokens and snapshots, and the outbox relay. No sleeps: every wait is on an event
// or a polled condition with a timeout.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { EventSource } from 'eventsource';
import WebSocket from 'ws';

import { Client, StatusApi, TaskFeed, taskList, timelineOf } from '../src/index.js';
import { GATEWAY_SECRET, devUser, freePort, hs256, ms, startStack, waitFor } from './support/services.js';

let stack;
let n = 0;
const uniq = () => `u${process.pid}x${++n}`;

before(async () => {
  stack = await startStack({ statusApi: { realtime: { connection_ttl_seconds: 2, subscription_ttl_seconds: 2 } } });
});
after(async () => {
  await stack?.stop();
});

const token = (sub, claims = {}) => hs256({ sub, exp: Math.floor(Date.now() / 1000) + 600, ...claims }, GATEWAY_SECRET);

function endpoints(kind) {
  const gw = stack.gateway;
  const all = {
    websocket: { transport: 'websocket', endpoint: gw.wsUrl },
    sse: { transport: 'sse', endpoint: `${gw.url}/connection/sse` },
    http_stream: { transport: 'http_stream', endpoint: `${gw.url}/connection/http_stream` },
  };
  return kind.map((k) => all[k]);
}

function makeClient(kinds, options = {}) {
  return new Client(endpoints(kinds), {
    websocket: WebSocket,
    eventsource: EventSource,
    emulationEndpoint: `${stack.gateway.url}/emulation`,
    minReconnectDelay: 50,
    maxReconnectDelay: 500,
    ...options,
  });
}

/** Resolves with the next `event` emitted by `emitter` that satisfies `pred`. */
function next(emitter, event, pred = () => true, timeoutMs = 30000) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      off();
      reject(new Error(`timeout waiting for ${event}`));
    }, ms(timeoutMs));
    const off = emitter.on(event, (ctx) => {
      if (!pred(ctx)) return;
      clearTimeout(timer);
      off();
      resolve(ctx);
    });
  });
}

for (const transport of ['websocket', 'sse', 'http_stream']) {
  describe(`client over ${transport}`, () => {
    test('server-side channel, token-protected subscription, publications, recovery after reconnect', async () => {
      const user = uniq();
      const userCh = `task_user:t1/${user}`;
      const detailCh = `task_detail:t1/${user}-task`;
      const c = makeClient([transport], { token: token(`t1/${user}`, { channels: [userCh] }) });
      const serverSub = next(c, 'subscribed', (ctx) => ctx.channel === userCh);
      c.connect();
      await c.ready(10000);
      assert.equal(c.transportName, transport);
      assert.equal((await serverSub).recoverable, true);

      let subTokens = 0;
      const sub = c.newSubscription(detailCh, {
        getToken: async ({ channel }) => {
          subTokens += 1;
          return token(`t1/${user}`, { channel });
        },
      });
      const subscribed = next(sub, 'subscribed');
      sub.subscribe();
      assert.equal((await subscribed).recovered, false);
      assert.equal(subTokens, 1);

      const got = [];
      c.on('publication', (ctx) => got.push(['user', ctx.data.n, ctx.offset]));
      sub.on('publication', (ctx) => got.push(['detail', ctx.data.n, ctx.offset]));
      await stack.gateway.publish(userCh, { n: 1 });
      await stack.gateway.publish(detailCh, { n: 1 });
      await waitFor(() => got.length === 2, { what: 'live publications' });

      // Disconnect, miss two publications per channel, reconnect: both recover them.
      c.disconnect();
      await stack.gateway.publish(userCh, { n: 2 });
      await stack.gateway.publish(detailCh, { n: 2 });
      await stack.gateway.publish(userCh, { n: 3 });
      const userRecovered = next(c, 'subscribed', (ctx) => ctx.channel === userCh);
      const detailRecovered = next(sub, 'subscribed');
      c.connect();
      assert.equal((await userRecovered).recovered, true);
      assert.equal((await detailRecovered).recovered, true);
      await waitFor(() => got.length === 5, { what: 'recovered publications' });
      assert.deepEqual(got.filter((g) => g[0] === 'user').map((g) => g[1]), [1, 2, 3]);
      assert.deepEqual(got.filter((g) => g[0] === 'detail').map((g) => g[1]), [1, 2]);
      assert.deepEqual(got.filter((g) => g[0] === 'user').map((g) => g[2]), [1, 2, 3]);
      c.disconnect();
    });
  });
}

describe('client behaviour', () => {
  test('falls back to SSE when the WebSocket handshake fails', async () => {
    const user = uniq();
    const c = new Client(
      [
        { transport: 'websocket', endpoint: `ws://127.0.0.1:${stack.gateway.port}/connection/refused` },
        { transport: 'sse', endpoint: `${stack.gateway.url}/connection/sse` },
      ],
      { websocket: WebSocket, eventsource: EventSource, emulationEndpoint: `${stack.gateway.url}/emulation`, token: token(`t1/${user}`) },
    );
    c.connect();
    await c.ready(10000);
    assert.equal(c.transportName, 'sse');
    c.disconnect();
  });

  test('an invalid token is terminal (3500): disconnected, no reconnect loop', async () => {
    const c = makeClient(['websocket'], { token: hs256({ sub: 'x' }, 'wrong-secret-wrong-secret-wrong-secret') });
    let connecting = 0;
    c.on('connecting', () => connecting++);
    const disconnected = next(c, 'disconnected');
    c.connect();
    const ctx = await disconnected;
    assert.equal(ctx.code, 3500);
    assert.equal(c.state, 'disconnected');
    assert.equal(connecting, 1);
  });

  test('connection and subscription tokens are refreshed through getToken calling the Status API', async () => {
    const user = uniq();
    const api = new StatusApi({ baseUrl: stack.api.url, headers: devUser('t1', user) });
    const seed = await stack.coordinator.createTask({ owner: user });
    let connTokens = 0;
    let session = await api.session();
    const c = makeClient(['websocket'], {
      getToken: async () => {
        connTokens += 1;
        session = await api.session();
        return session.token;
      },
    });
    let subTokens = 0;
    const sub = c.newSubscription(`task_detail:t1/${seed.id}`, {
      getToken: async () => {
        subTokens += 1;
        return (await api.subscriptionToken(seed.id, session.sessionId)).token;
      },
    });
    sub.subscribe();
    c.connect();
    await next(sub, 'subscribed');
    // ttl is 2 s in this stack: both refreshes happen while the connection stays up.
    await waitFor(() => connTokens >= 2 && subTokens >= 2, { what: 'token refreshes', timeoutMs: 30000 });
    assert.equal(c.state, 'connected');
    assert.equal(sub.state, 'subscribed');
    const pub = next(sub, 'publication');
    await stack.coordinator.step(seed, '01_prepare', 'STEP_STARTED', 'PREPARING');
    assert.equal((await pub).data.kind, 'task.detail');
    c.disconnect();
  });
});

for (const transport of ['websocket', 'sse']) {
  describe(`TaskFeed over ${transport}`, () => {
    test('subscribe-then-snapshot, live summaries to SUCCEEDED, detail timeline complete', async () => {
      const user = uniq();
      const early = await stack.coordinator.createTask({ owner: user, title: 'Created before the page' });
      const feed = new TaskFeed({
        api: { baseUrl: stack.api.url, headers: devUser('t1', user) },
        endpoints: endpoints([transport]),
        clientOptions: { websocket: WebSocket, eventsource: EventSource, emulationEndpoint: `${stack.gateway.url}/emulation` },
        document: null,
      });
      await feed.start();
      await waitFor(() => feed.state.connection === 'LIVE', { what: 'LIVE' });
      assert.ok(feed.state.tasks[early.id], 'the snapshot holds the task created before subscribing');

      const task = await stack.coordinator.createTask({ owner: user, title: 'Quarterly report' });
      await waitFor(() => feed.state.tasks[task.id], { what: 'new task appears' });
      feed.openDetail(task.id);
      await waitFor(() => feed.state.details[task.id]?.phase === 'ready', { what: 'detail snapshot' });
      await stack.coordinator.walkToSuccess(task, 42600);
      await waitFor(() => feed.state.tasks[task.id]?.lifecycleStatus === 'SUCCEEDED', { what: 'SUCCEEDED' });
      assert.equal(feed.state.tasks[task.id].durationMs, 42600);
      assert.equal(feed.state.tasks[task.id].version, '9');
      await waitFor(() => timelineOf(feed.state, task.id).length === 9, { what: 'complete timeline' });
      assert.deepEqual(
        timelineOf(feed.state, task.id).map((e) => e.eventType),
        ['TASK_CREATED', 'STEP_STARTED', 'STEP_COMPLETED', 'STEP_STARTED', 'STEP_PROGRESS', 'STEP_COMPLETED', 'STEP_STARTED', 'STEP_COMPLETED', 'TASK_COMPLETED'],
      );
      assert.deepEqual(feed.state.notices.map((x) => x.type), ['TASK_SUCCEEDED']);
      assert.equal(taskList(feed.state).length, 2);
      feed.stop();
    });
  });
}

describe('the task store on top of the official centrifuge-js', () => {
  test('same channels and tokens: snapshot, live summaries and a detail subscription converge', async () => {
    const { Centrifuge } = await import('centrifuge');
    const { initialState, reduce } = await import('../src/store.js');
    const user = uniq();
    const api = new StatusApi({ baseUrl: stack.api.url, headers: devUser('t1', user) });
    const early = await stack.coordinator.createTask({ owner: user });
    let session = await api.session();
    let state = initialState();
    const dispatch = (action) => {
      state = reduce(state, action);
    };
    const userChannel = session.channels[0];
    const centrifuge = new Centrifuge(stack.gateway.wsUrl, {
      websocket: WebSocket,
      token: session.token,
      getToken: async () => (session = await api.session()).token,
    });
    centrifuge.on('subscribed', async (ctx) => {
      if (ctx.channel !== userChannel || ctx.recovered) return;
      dispatch({ type: 'list/subscribed' });
      const page = await api.listTasks({ limit: 50 });
      dispatch({ type: 'list/snapshot', tasks: page.items, at: performance.now() });
    });
    centrifuge.on('publication', (ctx) => {
      if (ctx.channel === userChannel) dispatch({ type: 'summary', message: ctx.data, at: performance.now() });
    });
    centrifuge.connect();
    await waitFor(() => state.list.phase === 'ready' && state.tasks[early.id], { what: 'snapshot' });
    const task = await stack.coordinator.createTask({ owner: user });
    await waitFor(() => state.tasks[task.id], { what: 'live summary' });
    dispatch({ type: 'detail/open', taskId: task.id });
    const sub = centrifuge.newSubscription(`task_detail:t1/${task.id}`, {
      getToken: async () => (await api.subscriptionToken(task.id, session.sessionId)).token,
    });
    sub.on('subscribed', async (ctx) => {
      if (ctx.recovered) return;
      dispatch({ type: 'detail/resubscribed', taskId: task.id });
      dispatch({ type: 'detail/snapshot', detail: await api.getTask(task.id) });
    });
    sub.on('publication', (ctx) => dispatch({ type: 'detail', message: ctx.data }));
    sub.subscribe();
    await waitFor(() => state.details[task.id]?.phase === 'ready', { what: 'detail snapshot' });
    await stack.coordinator.walkToSuccess(task, 1234);
    await waitFor(() => state.tasks[task.id].lifecycleStatus === 'SUCCEEDED' && state.details[task.id].detail.version === '9', {
      what: 'SUCCEEDED in both gates',
    });
    assert.equal(state.tasks[task.id].durationMs, 1234);
    centrifuge.disconnect();
  });
});

describe('TaskFeed with realtime unavailable (real Status API)', () => {
  test('cold start with the gateway unreachable: the snapshot is shown and the feed says STALE', async () => {
    const user = uniq();
    const task = await stack.coordinator.createTask({ owner: user, title: 'Before the outage' });
    const closed = await freePort(); // nothing listens here
    const feed = new TaskFeed({
      api: { baseUrl: stack.api.url, headers: devUser('t1', user) },
      endpoints: [{ transport: 'websocket', endpoint: `ws://127.0.0.1:${closed}/connection/websocket` }],
      clientOptions: { websocket: WebSocket, minReconnectDelay: 50, maxReconnectDelay: 200 },
      staleAfterMs: 200,
      document: null,
    });
    try {
      await feed.start();
      await waitFor(() => feed.state.list.phase === 'ready' && feed.state.tasks[task.id], { what: 'snapshot without realtime' });
      await waitFor(() => feed.state.connection === 'STALE', { what: 'STALE' });
      feed.openDetail(task.id);
      await waitFor(() => feed.state.details[task.id]?.phase === 'ready', { what: 'detail snapshot without realtime' });
      assert.equal(feed.state.details[task.id].detail.title, 'Before the outage');
    } finally {
      feed.stop();
    }
  });
});
