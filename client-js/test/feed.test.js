// TaskFeed under outages, against the real Client and StatusApi over in-process fakes
// (test/support/fake.js): failed snapshot reads are retried, the snapshot loads while realtime
// is down, an open detail catches up with the summary, start/stop/start, configuration errors,
// and the public state that React binds to. Waits are on conditions, never on wall-clock windows.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import { TaskFeed, taskTimes } from '../src/index.js';
import { summaryMessage, summaryTask } from './fixtures.js';
import { fakeGateway, fakeStatusApi, feedOptions, until } from './support/fake.js';

const LIST = /^GET \/api\/tasks\?/;

function setup({ gatewayUp = true, extra = {} } = {}) {
  const api = fakeStatusApi();
  api.set('a', 3, 9);
  const gw = fakeGateway();
  gw.up = gatewayUp;
  const feed = new TaskFeed(feedOptions(api, gw, extra));
  const errors = [];
  feed.on('error', (err) => errors.push(err));
  return { api, gw, feed, errors };
}

describe('failed snapshot reads are retried with backoff (defect 1)', () => {
  test('the list snapshot: pushes buffered meanwhile are applied once it loads', async () => {
    const { api, gw, feed, errors } = setup();
    api.failNext(LIST, 3);
    await feed.start();
    await until(() => api.count(LIST) >= 1 && gw.open().length, 'first list read');
    gw.publish(api.channel, summaryMessage('b', 2, 5));
    await until(() => feed.state.connection === 'LIVE', 'LIVE');
    assert.equal(api.count(LIST), 4, 'three failures, then the read that worked');
    assert.equal(feed.state.list.phase, 'ready');
    assert.equal(feed.state.list.error, null);
    assert.ok(feed.state.tasks.a, 'the snapshot');
    assert.equal(feed.state.tasks.b.version, '2', 'the push that arrived while the snapshot failed');
    assert.ok(errors.length >= 3, 'each failure is reported');
    feed.stop();
  });

  test('the Status API is unreachable while the gateway restarts: the re-read is retried, then LIVE', async () => {
    const { api, gw, feed } = setup();
    await feed.start();
    await until(() => feed.state.connection === 'LIVE', 'LIVE');
    const reads = api.count(LIST);
    api.down = true;
    gw.dropAll(); // the new gateway does not recover the stream: the list must be read again
    await until(() => api.count(LIST) >= reads + 3, 'retries while the Status API is down');
    assert.notEqual(feed.state.connection, 'LIVE');
    assert.ok(feed.state.tasks.a, 'the last confirmed state stays');
    api.set('n', 1, 9); // created during the outage: only the snapshot knows it
    api.down = false;
    await until(() => feed.state.connection === 'LIVE' && feed.state.tasks.n, 'LIVE with the new task');
    gw.publish(api.channel, summaryMessage('n', 2, 9));
    await until(() => feed.state.tasks.n.version === '2', 'pushes apply again');
    feed.stop();
  });

  test('while the list read fails the state says so and stays not LIVE', async () => {
    const { api, feed } = setup();
    api.failNext(LIST, 1000);
    await feed.start();
    await until(() => api.count(LIST) >= 3, 'retries');
    assert.notEqual(feed.state.connection, 'LIVE');
    assert.equal(feed.state.list.phase, 'loading');
    assert.equal(feed.state.list.syncing, true);
    assert.equal(feed.state.list.error.code, 'UNAVAILABLE');
    feed.stop();
    const after = api.count(LIST);
    await new Promise((r) => setTimeout(r, 60));
    assert.equal(api.count(LIST), after, 'stop() ends the retries');
  });

  test('the detail snapshot and the timeline read', async () => {
    const { api, feed } = setup();
    await feed.start();
    await until(() => feed.state.connection === 'LIVE', 'LIVE');
    api.failNext(/^GET \/api\/tasks\/a$/, 2);
    api.failNext(/^GET \/api\/tasks\/a\/events/, 2);
    feed.openDetail('a');
    await until(() => feed.state.details.a?.timelineComplete, 'detail and timeline');
    assert.equal(feed.state.details.a.detail.version, '3');
    assert.equal(api.count(/^GET \/api\/tasks\/a$/), 3);
    assert.equal(api.count(/^GET \/api\/tasks\/a\/events/), 3);
    feed.stop();
  });

  test('the batchGet re-read of known tasks not on the first page', async () => {
    const { api, gw, feed } = setup({ extra: { listLimit: 1 } });
    api.set('z', 2, 9); // newest: page 1 holds only z; a is known from the first snapshot's page 2
    await feed.start();
    await until(() => feed.state.connection === 'LIVE', 'LIVE');
    await feed.loadMore();
    assert.ok(feed.state.tasks.a && feed.state.tasks.z);
    api.failNext(/status:batchGet/, 2);
    gw.dropAll(); // a reconnect without recovery (the fake never recovers): list re-read + batchGet
    await until(() => api.count(/status:batchGet/) >= 3 && feed.state.connection === 'LIVE', 'resync through retries');
    feed.stop();
  });
});

describe('realtime unavailable (defect 2)', () => {
  test('the snapshot loads with the gateway down, STALE, then LIVE without a reload', async () => {
    const { api, gw, feed } = setup({ gatewayUp: false });
    await feed.start();
    await until(() => feed.state.list.phase === 'ready', 'snapshot without a subscription');
    assert.ok(feed.state.tasks.a);
    await until(() => feed.state.connection === 'STALE', 'STALE');
    feed.openDetail('a');
    await until(() => feed.state.details.a.phase === 'ready', 'detail snapshot without a subscription');
    const reads = api.count(LIST);
    api.set('a', 5, 9);
    gw.up = true;
    await until(() => feed.state.connection === 'LIVE', 'LIVE');
    assert.ok(api.count(LIST) > reads, 're-read once subscribed (pushes may have been missed)');
    await until(() => feed.state.details.a.detail.version === '5', 'detail re-read after subscribing');
    assert.equal(feed.state.tasks.a.version, '5');
    feed.stop();
  });

  test('the Status API session fails: the snapshot still loads, the session is retried', async () => {
    const { api, feed } = setup();
    api.failNext(/realtime\/session/, 2);
    await feed.start();
    await until(() => feed.state.tasks.a, 'snapshot');
    await until(() => feed.state.connection === 'LIVE', 'LIVE after the session retries');
    feed.stop();
  });

  test('stop and start during an outage keep the last confirmed state', async () => {
    const { api, gw, feed } = setup();
    await feed.start();
    await until(() => feed.state.connection === 'LIVE', 'LIVE');
    feed.stop();
    gw.up = false;
    api.down = true;
    await feed.start();
    await until(() => feed.state.connection === 'STALE', 'STALE');
    assert.ok(feed.state.tasks.a, 'the list is never cleared');
    assert.equal(feed.state.list.phase, 'ready');
    feed.stop();
  });
});

describe('an open detail is never left behind the summary (defect 3)', () => {
  test('while STALE, a newer summary from batchGet makes the detail re-read its snapshot', async () => {
    const { api, gw, feed } = setup();
    await feed.start();
    await until(() => feed.state.connection === 'LIVE', 'LIVE');
    feed.openDetail('a');
    await until(() => feed.state.details.a?.phase === 'ready', 'detail');
    gw.up = false;
    gw.dropAll();
    await until(() => feed.state.connection === 'STALE', 'STALE');
    api.set('a', 9, 9);
    await until(() => feed.state.tasks.a.lifecycleStatus === 'SUCCEEDED', 'the batchGet check');
    await until(() => feed.state.details.a.detail.version === '9', 'the detail catches up');
    assert.equal(feed.state.details.a.detail.lifecycleStatus, 'SUCCEEDED');
    assert.equal(feed.state.details.a.behind, false);
    feed.stop();
  });

  test('while LIVE, the low-frequency batchGet check repairs a silently lost publication (§13.2)', async () => {
    const { api, feed } = setup({ extra: { liveCheckIntervalMs: 40 } });
    await feed.start();
    await until(() => feed.state.connection === 'LIVE', 'LIVE');
    const checks = api.count(/status:batchGet/);
    api.set('a', 9, 9); // committed, but its publication never arrives: no gap, no disconnect
    await until(() => feed.state.tasks.a.lifecycleStatus === 'SUCCEEDED', 'the LIVE check');
    assert.equal(feed.state.connection, 'LIVE', 'repaired without leaving LIVE');
    assert.ok(api.count(/status:batchGet/) > checks);
    feed.stop();
  });

  test('§6.5: at the server\'s per-user limit the oldest invisible detail makes room', async () => {
    const { api, gw, feed } = setup();
    api.set('b', 1, 9);
    api.set('c', 1, 9);
    api.set('d', 1, 9);
    api.detailLimit = 2; // another tab of the user holds nothing; this feed's two details fill it
    await feed.start();
    await until(() => feed.state.connection === 'LIVE', 'LIVE');
    feed.openDetail('a');
    feed.openDetail('b');
    await until(() => api.leases.has('a') && api.leases.has('b'), 'two leases');
    feed.setDetailVisible('a', false);
    const closed = [];
    feed.on('detailClosed', (e) => closed.push(e.taskId));
    feed.openDetail('c');
    await until(() => api.leases.has('c') && !feed.state.details.a, 'a (invisible) evicted for c');
    assert.deepEqual(Object.keys(feed.state.details).sort(), ['b', 'c']);
    assert.deepEqual([...api.leases].sort(), ['b', 'c']);
    // every open detail visible: nothing is evicted, the server's refusal stands
    feed.openDetail('d');
    await until(() => closed.includes('d') || api.count(/subscription-token/) >= 5, 'd refused');
    assert.ok(feed.state.details.b && feed.state.details.c, 'visible details are kept');
    assert.ok(!api.leases.has('d'));
    assert.ok(gw.open().length >= 1);
    feed.stop();
  });

  test('§6.5 through the subscribe proxy (detailTokens: false): a 106 makes room the same way', async () => {
    const { api, gw, feed } = setup({ extra: { detailTokens: false } });
    for (const id of ['b', 'c', 'd']) api.set(id, 1, 9);
    api.detailLimit = 2;
    // The proxy: no token; the user's quota on the Status API (leases shared with the token path).
    gw.authorize = (channel, token) => {
      const taskId = channel.split('/').pop();
      assert.equal(token, undefined, 'no subscription token in proxy mode');
      if (!api.leases.has(taskId) && api.leases.size >= api.detailLimit) return { code: 106, message: 'limit exceeded' };
      api.leases.add(taskId);
      return null;
    };
    await feed.start();
    await until(() => feed.state.connection === 'LIVE', 'LIVE');
    feed.openDetail('a');
    feed.openDetail('b');
    await until(() => gw.subscribed.has('task_detail:t1/a') && gw.subscribed.has('task_detail:t1/b'), 'two details');
    feed.setDetailVisible('a', false);
    const closed = [];
    feed.on('detailClosed', (e) => closed.push(e.taskId));
    feed.openDetail('c');
    await until(() => gw.subscribed.has('task_detail:t1/c') && !feed.state.details.a, 'a (invisible) evicted for c');
    assert.deepEqual([...api.leases].sort(), ['b', 'c'], "a's lease was released, not left to expire");
    assert.equal(api.count(/subscription-token/), 0);
    assert.deepEqual(closed, []);
    // every open detail visible: the refusal stands
    feed.openDetail('d');
    await until(() => closed.includes('d'), 'd refused');
    assert.ok(feed.state.details.b && feed.state.details.c && !api.leases.has('d'));
    feed.stop();
  });

  test('the public view flags a detail that is behind', () => {
    const feed = new TaskFeed(feedOptions(fakeStatusApi(), null));
    feed.dispatch({ type: 'list/snapshot', tasks: [summaryTask('a', 3, 9)], at: 0 });
    feed.openDetail('a');
    assert.equal(feed.state.details.a.phase, 'loading');
    feed.dispatch({ type: 'detail/snapshot', detail: detailOf('a', 3) });
    assert.equal(feed.state.details.a.behind, false);
    feed.dispatch({ type: 'list/snapshot', tasks: [summaryTask('a', 4, 9)], at: 0, final: false });
    assert.equal(feed.state.details.a.behind, true);
    assert.equal(feed.state.details.a.syncing, true);
  });
});

function detailOf(id, version) {
  const api = fakeStatusApi();
  api.set(id, version, 9);
  return api.details[id];
}

describe('lifecycle (defect 4)', () => {
  test('start() after stop() (React StrictMode) ticks again and goes LIVE; stop() emits nothing', async () => {
    const { feed } = setup();
    await feed.start();
    await until(() => feed.state.connection === 'LIVE', 'LIVE');
    const changes = [];
    feed.on('change', (s, action) => changes.push(action));
    feed.stop();
    assert.deepEqual(changes, [], 'stop() emits no change (no STALE)');
    assert.equal(feed.state.connection, 'LIVE');
    let ticks = 0;
    feed.on('tick', () => ticks++);
    await feed.start();
    await until(() => feed.state.connection === 'LIVE' && ticks >= 3, 'LIVE and ticking after restart');
    assert.ok(feed.client && feed.client.state === 'connected');
    feed.stop();
    const n = ticks;
    await new Promise((r) => setTimeout(r, 30));
    assert.equal(ticks, n, 'no tick after stop()');
  });

  test('start() twice is one start', async () => {
    const { gw, feed } = setup();
    const p = feed.start();
    assert.equal(feed.start(), p);
    await p;
    await until(() => feed.state.connection === 'LIVE', 'LIVE');
    assert.equal(gw.connects, 1);
    feed.stop();
  });

  test('no WebSocket implementation (Node without ws): a ConfigurationError, not a retry loop', async () => {
    const api = fakeStatusApi();
    const feed = new TaskFeed({ ...feedOptions(api, null), clientOptions: {} });
    const errors = [];
    feed.on('error', (err) => errors.push(err));
    await assert.rejects(feed.start(), { name: 'ConfigurationError', code: 'NO_TRANSPORT' });
    assert.equal(errors.length, 1);
    assert.equal(errors[0].code, 'NO_TRANSPORT');
    assert.match(errors[0].message, /websocket/);
    const calls = api.calls.length;
    await new Promise((r) => setTimeout(r, 50));
    assert.equal(api.calls.length, calls, 'nothing keeps retrying');
    assert.equal(feed.running, false);
  });

  test('a 401 from /api/realtime/session rejects start() with UnauthorizedError and stops', async () => {
    const { api, feed, errors } = setup();
    api.sessionStatus = 401;
    await assert.rejects(feed.start(), { name: 'UnauthorizedError' });
    assert.equal(errors[0].name, 'UnauthorizedError');
    assert.equal(feed.running, false);
    assert.equal(feed.state.connection, 'STALE');
    const calls = api.calls.length;
    await new Promise((r) => setTimeout(r, 50));
    assert.equal(api.calls.length, calls, 'no retry loop');
  });

  test('one missing fallback implementation is reported once; the others are used', async () => {
    const api = fakeStatusApi();
    api.set('a', 3, 9);
    const gw = fakeGateway();
    const feed = new TaskFeed({
      ...feedOptions(api, gw),
      endpoints: [
        { transport: 'websocket', endpoint: 'ws://gateway.test/connection/websocket' },
        { transport: 'sse', endpoint: 'http://gateway.test/connection/sse' },
      ],
    });
    const errors = [];
    feed.on('error', (err) => errors.push(err));
    await feed.start();
    await until(() => feed.state.connection === 'LIVE', 'LIVE');
    assert.deepEqual(errors.map((e) => e.code), ['NO_TRANSPORT']);
    feed.stop();
  });
});

describe('public state and the React binding', () => {
  test('no internals: no push buffers, baselines or seen-notice ids', async () => {
    const { gw, api, feed } = setup();
    await feed.start();
    await until(() => feed.state.connection === 'LIVE', 'LIVE');
    gw.publish(api.channel, summaryMessage('a', 4, 9, { noticeAt: [4] }));
    feed.openDetail('a');
    await until(() => feed.state.details.a?.phase === 'ready' && feed.state.notices.length === 1, 'notice and detail');
    const s = feed.state;
    assert.deepEqual(Object.keys(s).sort(), ['clocks', 'connection', 'details', 'list', 'notices', 'tasks']);
    assert.deepEqual(Object.keys(s.list).sort(), ['error', 'hasMore', 'loadingMore', 'phase', 'syncing']);
    assert.deepEqual(Object.keys(s.details.a).sort(), ['behind', 'detail', 'error', 'phase', 'syncing', 'timeline', 'timelineComplete']);
    assert.ok(Array.isArray(s.details.a.timeline));
    assert.equal(s.notices[0].id, 'a:4');
    assert.ok(Object.isFrozen(s) && Object.isFrozen(s.list));
    feed.dismissNotice('a:4');
    assert.equal(feed.state.notices.length, 0);
    feed.stop();
  });

  test('subscribe/getSnapshot follow the useSyncExternalStore contract', () => {
    const feed = new TaskFeed(feedOptions(fakeStatusApi(), null));
    const { subscribe, getSnapshot } = feed; // React calls them unbound
    const first = getSnapshot();
    assert.equal(getSnapshot(), first, 'same object while nothing changed');
    let calls = 0;
    const unsubscribe = subscribe(() => calls++);
    feed.dispatch({ type: 'list/snapshot', tasks: [summaryTask('a', 3, 9)], at: 0 });
    assert.equal(calls, 1);
    const second = getSnapshot();
    assert.notEqual(second, first);
    assert.equal(getSnapshot(), second);
    feed.dispatch({ type: 'list/snapshot', tasks: [summaryTask('b', 1, 9)], at: 0, final: false });
    assert.equal(getSnapshot().tasks.a, second.tasks.a, 'unchanged tasks keep their identity');
    unsubscribe();
    feed.dispatch({ type: 'connection', status: 'STALE' });
    assert.equal(calls, 2);
  });

  test('paging: loadMore reads the next page until hasMore is false', async () => {
    const { api, feed } = setup({ extra: { listLimit: 2 } });
    for (let i = 0; i < 4; i++) api.set(`p${i}`, 2, 9);
    await feed.start();
    await until(() => feed.state.connection === 'LIVE', 'LIVE');
    assert.equal(Object.keys(feed.state.tasks).length, 2);
    assert.equal(feed.state.list.hasMore, true);
    await feed.loadMore();
    await feed.loadMore();
    assert.equal(Object.keys(feed.state.tasks).length, 5);
    assert.equal(feed.state.list.hasMore, false);
    await feed.loadMore();
    assert.equal(api.count(LIST), 3);
    feed.stop();
  });

  test('taskTimes: queued, started, finished and the durations of seed §9.3', () => {
    const feed = new TaskFeed(feedOptions(fakeStatusApi(), null));
    const pending = summaryTask('p', 1, 9);
    const running = summaryTask('r', 3, 9);
    const done = summaryTask('d', 9, 9);
    feed.dispatch({ type: 'list/snapshot', tasks: [pending, running, done], at: 100 });
    assert.deepEqual(taskTimes(feed.state, 'p', 100), { createdAt: pending.createdAt, startedAt: null, finishedAt: null, queueMs: null, durationMs: null, running: false });
    const r = taskTimes(feed.state, 'r', 1100);
    assert.equal(r.queueMs, 1000);
    assert.equal(r.durationMs, 2000 + 1000, 'elapsedMs + local ticking');
    assert.equal(r.running, true);
    const d = taskTimes(feed.state, 'd', 99999);
    assert.equal(d.durationMs, 42600, 'the backend final value');
    assert.equal(d.finishedAt, done.finishedAt);
    assert.equal(taskTimes(feed.state, 'nope', 0), null);
  });
});
