// The page becoming visible again recalibrates locally ticked durations: TaskFeed re-reads its
// running tasks with status:batchGet by id (not by known versions: the versions did not change,
// only elapsedMs/asOf did) and reloads open details (seed §9.2). No network: a fake Status API
// and a fake document.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { TaskFeed } from '../src/index.js';
import { summaryTask } from './fixtures.js';

class FakeDocument extends EventTarget {
  constructor() {
    super();
    this.visibilityState = 'hidden';
  }

  show() {
    this.visibilityState = 'visible';
    this.dispatchEvent(new Event('visibilitychange'));
  }

  hide() {
    this.visibilityState = 'hidden';
    this.dispatchEvent(new Event('visibilitychange'));
  }
}

/** The real StatusApi over an injected fetch that answers status:batchGet and records bodies. */
function fakeApi(calls) {
  return {
    baseUrl: 'http://status.test',
    fetch: async (url, init) => {
      assert.match(String(url), /\/api\/tasks\/status:batchGet$/);
      calls.push(JSON.parse(init.body));
      const running = { ...summaryTask('t-run', 3, 5, { asOfMs: 60000 }), elapsedMs: 60000 }; // a later reading
      return new Response(JSON.stringify({ tasks: [running], unchanged: [], notFound: [] }), {
        status: 200,
        headers: { 'content-type': 'application/json' },
      });
    },
  };
}

test('visible again re-reads running tasks by id and adopts the fresh elapsed time', async () => {
  const calls = [];
  const doc = new FakeDocument();
  const feed = new TaskFeed({ api: fakeApi(calls), document: doc, now: () => 0 });
  feed.dispatch({ type: 'list/snapshot', tasks: [summaryTask('t-run', 3, 5), summaryTask('t-done', 5, 5)], at: 0, final: true });
  doc.addEventListener('visibilitychange', feed._onVisibility); // what start() wires up

  doc.hide();
  assert.equal(calls.length, 0, 'hiding the page does nothing');
  doc.show();
  await new Promise((resolve) => setImmediate(resolve));

  assert.equal(calls.length, 1);
  assert.deepEqual(calls[0], { taskIds: ['t-run'] }, 'only non-terminal tasks, by id, without knownVersions');
  assert.equal(feed.state.tasks['t-run'].elapsedMs, 60000, 'the server value replaces the local tick base');
  feed.stop();
});

test('stop() unhooks the visibility listener', async () => {
  const calls = [];
  const doc = new FakeDocument();
  const feed = new TaskFeed({ api: fakeApi(calls), document: doc, now: () => 0 });
  feed.dispatch({ type: 'list/snapshot', tasks: [summaryTask('t-run', 3, 5)], at: 0, final: true });
  doc.addEventListener('visibilitychange', feed._onVisibility);
  feed.stop();
  doc.show();
  await new Promise((resolve) => setImmediate(resolve));
  assert.equal(calls.length, 0);
});
