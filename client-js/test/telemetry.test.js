// Telemetry (src/telemetry.js): the batch's bounds and the send policy on their own, then a
// TaskFeed with `telemetry` on, over the in-process fakes (test/support/fake.js): what a report
// carries after a connect, pushes, a notice, a snapshot and a reconnect. Waits are on conditions.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import { Emitter, TaskFeed, Telemetry } from '../src/index.js';
import { observeFeed } from '../src/telemetry.js';
import { detailMessage, summaryMessage } from './fixtures.js';
import { fakeGateway, fakeStatusApi, feedOptions, until } from './support/fake.js';

function collector(fail) {
  const sent = [];
  return { sent, send: async (r) => (fail ? fail(r) : sent.push(r)) };
}

describe('Telemetry batch', () => {
  test('counts and samples become one report; out-of-range samples and clock skew are not sampled', async () => {
    const c = collector();
    const t = new Telemetry({ send: c.send, wallClock: () => Date.parse('2026-01-01T00:00:01.000Z') });
    assert.equal(t.empty, true);
    await t.flush();
    assert.equal(c.sent.length, 0, 'nothing happened: nothing sent');
    t.setTransport('sse');
    t.setTransport('carrier-pigeon');
    t.count('connects');
    t.count('connectFailures', 2);
    t.count('recoveries');
    t.count('recoveredFalse', 5);
    t.count('bogus');
    t.sample('snapshotLoadMs', 12.34);
    t.sample('snapshotLoadMs', -1);
    t.sample('snapshotLoadMs', 1e9);
    t.sample('snapshotLoadMs', NaN);
    t.committed('commitToVisibleMs', '2026-01-01T00:00:00.958Z');
    t.committed('commitToVisibleMs', '2026-01-01T00:00:02.000Z'); // the client's clock is behind
    t.committed('commitToVisibleMs', 'not a time');
    await t.flush();
    assert.deepEqual(c.sent, [
      {
        v: 1,
        transport: 'sse',
        counts: { connects: 1, connectFailures: 2, reconnects: 0, recoveries: 1, recoveredFalse: 1, unknownOperations: 0, unknownSchemas: 0, clockSkew: 1, connectAttempts: 3 },
        samples: { snapshotLoadMs: [12.3], commitToVisibleMs: [42] },
      },
    ]);
    assert.equal(t.empty, true, 'a sent batch is gone');
  });

  test('each sample kind is a bounded reservoir; counters are capped at the server ceiling', () => {
    const t = new Telemetry({ send: async () => {}, maxSamples: 30 });
    for (let i = 0; i < 10000; i += 1) t.sample('commitToVisibleMs', i % 500);
    t.count('reconnects', 50000);
    const r = t.report();
    assert.equal(r.samples.commitToVisibleMs.length, 10);
    assert.ok(r.samples.commitToVisibleMs.every((v) => v >= 0 && v < 500));
    assert.equal(r.counts.reconnects, 10000);
  });

  test('429/5xx keep the counters and back off; 422 drops the batch; 404 turns telemetry off', async () => {
    let status = 429;
    const seen = [];
    const t = new Telemetry({
      send: async (r) => {
        seen.push(r);
        throw Object.assign(new Error('no'), { status });
      },
      intervalMs: 1000,
    });
    t.count('connects');
    await t.flush();
    assert.equal(t.intervalMs, 2000);
    assert.equal(t.report().counts.connects, 1, 'kept for the next report');
    status = 503;
    await t.flush();
    assert.equal(t.intervalMs, 4000);
    status = 422;
    await t.flush();
    assert.equal(t.empty, true, 'a refused batch is not sent again');
    status = 404;
    t.count('connects');
    await t.flush();
    assert.equal(t.enabled, false);
    t.count('connects');
    await t.flush();
    assert.equal(seen.length, 4, 'nothing after the 404');
  });

  test('at most one report per interval, none while idle', async () => {
    const c = collector();
    const t = new Telemetry({ send: c.send, intervalMs: 5 });
    t.start();
    t.count('connects');
    await until(() => c.sent.length === 1, 'first report');
    const before = c.sent.length;
    await new Promise((r) => setTimeout(r, 30)); // several intervals with nothing to say
    assert.equal(c.sent.length, before, 'idle: nothing sent');
    t.count('reconnects');
    await until(() => c.sent.length === 2, 'second report');
    t.stop();
  });
});

test('observeFeed: a detail push counts once it is the shown detail; its unknown schema once per step', () => {
  const feed = new Emitter();
  const t = new Telemetry({ send: async () => {}, wallClock: () => Date.parse(detailMessage('a', 5, 9).asOf) + 40 });
  observeFeed(feed, t);
  const message = detailMessage('a', 5, 9);
  message.steps[0].data = { schema: 'document-parse.v99', pages: 1 };
  feed.store = { details: { a: { detail: { ...message } } } };
  feed.emit('change', {}, { type: 'detail', message });
  feed.emit('change', {}, { type: 'detail', message: detailMessage('a', 6, 9) }); // buffered: not shown
  feed.emit('change', {}, { type: 'detail/snapshot', detail: message });
  const r = t.report();
  assert.deepEqual(r.samples.commitToVisibleMs, [40]);
  assert.equal(r.counts.unknownSchemas, 1);
  assert.equal(r.counts.unknownOperations, 0);
});

describe('TaskFeed telemetry', () => {
  const committedMs = 5000; // fixtures' times are offsets from 2026-09-21T07:10:00Z
  const wallClock = () => Date.UTC(2026, 8, 21, 7, 10, 0) + committedMs + 250;

  function setup(telemetry) {
    const api = fakeStatusApi();
    api.set('a', 3, 9);
    const gw = fakeGateway();
    const feed = new TaskFeed(feedOptions(api, gw, { telemetry }));
    return { api, gw, feed };
  }

  test('off by default: no report, no telemetry object', async () => {
    const { api, gw, feed } = setup(undefined);
    await feed.start();
    await until(() => feed.state.connection === 'LIVE', 'LIVE');
    gw.publish(api.channel, summaryMessage('a', 4, 9));
    await until(() => feed.state.tasks.a.version === '4', 'push');
    feed.stop();
    assert.equal(feed.telemetry, null);
    assert.equal(api.telemetry.length, 0);
  });

  test('a report carries connects, snapshot load, commit→visible of shown pushes only, notices, unknown operations and recovered=false', async () => {
    const { api, gw, feed } = setup({ intervalMs: 60000, wallClock });
    await feed.start();
    await until(() => feed.state.connection === 'LIVE', 'LIVE');
    const push = summaryMessage('a', 4, 9, { asOfMs: committedMs, noticeAt: [4] });
    gw.publish(api.channel, push);
    await until(() => feed.state.tasks.a.version === '4', 'push shown');
    gw.publish(api.channel, push); // a duplicate delivery: not shown again, not sampled again
    gw.publish(api.channel, summaryMessage('a', 2, 9, { asOfMs: committedMs })); // stale: never shown
    const snapshot = detailMessage('a', 4, 9, { snapshot: true });
    snapshot.steps[0].operationCode = 'SPACESHIP.LAUNCH'; // shown with the generic card
    api.details.a = snapshot;
    feed.openDetail('a');
    await until(() => feed.state.details.a?.detail, 'detail snapshot');
    // The gateway comes back without the stream: recovered=false.
    gw.recovery = { was_recovering: true, recovered: false };
    gw.dropAll();
    await until(() => gw.connects === 2 && feed.state.connection === 'LIVE', 'reconnected');
    feed.stop(); // flushes
    await until(() => api.telemetry.length === 1, 'the report');
    const [r] = api.telemetry;
    assert.equal(r.v, 1);
    assert.equal(r.transport, 'websocket');
    assert.equal(r.counts.connects, 2);
    assert.equal(r.counts.reconnects, 1);
    assert.equal(r.counts.connectAttempts, 2 + r.counts.connectFailures);
    assert.equal(r.counts.recoveries, 1);
    assert.equal(r.counts.recoveredFalse, 1);
    assert.equal(r.counts.unknownOperations, 1);
    assert.deepEqual(r.samples.commitToVisibleMs, [250], 'the summary push, once');
    assert.deepEqual(r.samples.noticeDisplayMs, [250]);
    assert.ok(r.samples.snapshotLoadMs.length >= 2, 'list and detail snapshots');
    assert.ok(r.samples.snapshotLoadMs.every((ms) => ms >= 0));
  });

  test('the server turning telemetry off (404) stops the reports', async () => {
    const { api, gw, feed } = setup({ intervalMs: 5, wallClock });
    api.telemetryStatus = 404;
    await feed.start();
    await until(() => api.telemetry.length === 1, 'first report');
    gw.dropAll();
    await until(() => gw.connects === 2 && feed.state.connection === 'LIVE', 'reconnected');
    await new Promise((r) => setTimeout(r, 30));
    feed.stop();
    assert.equal(api.telemetry.length, 1);
    assert.equal(feed.telemetry.enabled, false);
  });
});
