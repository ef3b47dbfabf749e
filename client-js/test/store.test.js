// The task store as a pure reducer: table-style cases for each rule, then property-style runs
// (many seeds) where shuffled, duplicated and gapped message sequences must converge.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import {
  cardKind,
  compareVersions,
  displayElapsedMs,
  hasTicking,
  initialState,
  lruTouch,
  reduce,
  taskList,
  timelineGap,
  timelineOf,
} from '../src/store.js';
import { detailMessage, eventsPage, prng, shuffle, summaryMessage, summaryTask } from './fixtures.js';

const run = (actions, state = initialState()) => actions.reduce(reduce, state);
const ready = () => run([{ type: 'list/subscribed' }, { type: 'list/snapshot', tasks: [], at: 0 }]);
const push = (m, at = 0) => ({ type: 'summary', message: m, at });

describe('version gates', () => {
  test('versions compare as BigInt beyond 2^53', () => {
    assert.equal(compareVersions('9007199254740993', '9007199254740992'), 1);
    assert.equal(compareVersions('10', '9'), 1);
    assert.equal(compareVersions('12', '12'), 0);
  });

  test('an older or equal summary never replaces a newer one', () => {
    const s = run([push(summaryMessage('a', 5, 9)), push(summaryMessage('a', 3, 9)), push(summaryMessage('a', 5, 9))], ready());
    assert.equal(s.tasks.a.version, '5');
  });

  test('summary and detail gates are separate (seed §8.2)', () => {
    let s = run([{ type: 'detail/open', taskId: 'a' }, { type: 'detail/snapshot', detail: detailMessage('a', 10, 20, { snapshot: true }) }], ready());
    s = run([push(summaryMessage('a', 12, 20))], s);
    assert.equal(s.tasks.a.version, '12');
    assert.equal(s.details.a.detail.version, '10');
    s = run([{ type: 'detail', message: detailMessage('a', 11, 20) }], s);
    assert.equal(s.details.a.detail.version, '11');
    assert.equal(s.tasks.a.version, '12');
  });

  test('pushes before the snapshot are buffered and replayed by version (seed §8.3)', () => {
    let s = run([{ type: 'list/subscribed' }, push(summaryMessage('a', 4, 9)), push(summaryMessage('a', 3, 9))]);
    assert.deepEqual(s.tasks, {});
    s = run([{ type: 'list/snapshot', tasks: [summaryTask('a', 2, 9)], at: 1 }], s);
    assert.equal(s.tasks.a.version, '4');
    assert.equal(s.list.phase, 'ready');
  });

  test('a stale snapshot does not overwrite a newer push', () => {
    const s = run([push(summaryMessage('a', 7, 9)), { type: 'list/snapshot', tasks: [summaryTask('a', 6, 9)], at: 0 }], ready());
    assert.equal(s.tasks.a.version, '7');
  });
});

describe('task attempts (seed §3.3)', () => {
  const retried = (task, taskAttempt) => ({ ...task, taskAttempt });
  test('summary and detail keep taskAttempt, behind their version gates', () => {
    const at2 = { ...summaryMessage('a', 6, 9), task: retried(summaryTask('a', 6, 9), 2) };
    const at1 = { ...summaryMessage('a', 5, 9), task: retried(summaryTask('a', 5, 9), 1) };
    let s = run([push(at2), push(at1)], ready());
    assert.equal(s.tasks.a.taskAttempt, 2, 'an older version of attempt 1 does not win');
    s = run([{ type: 'list/snapshot', tasks: [retried(summaryTask('a', 4, 9), 1)], at: 0 }], s);
    assert.equal(s.tasks.a.taskAttempt, 2, 'nor an older snapshot');
    s = run([{ type: 'detail/open', taskId: 'a' }, { type: 'detail/snapshot', detail: { ...detailMessage('a', 5, 9, { snapshot: true }), taskAttempt: 1 } }], s);
    const created = { ...detailMessage('a', 6, 9), taskAttempt: 2 };
    created.triggerEvent = { ...created.triggerEvent, eventType: 'TASK_ATTEMPT_CREATED', stepId: null, operationCode: null, stepAttempt: null };
    s = run([{ type: 'detail', message: created }, { type: 'detail', message: { ...detailMessage('a', 4, 9), taskAttempt: 1 } }], s);
    assert.equal(s.details.a.detail.taskAttempt, 2);
    const entry = timelineOf(s, 'a').find((e) => e.taskVersion === '6');
    assert.equal(entry.eventType, 'TASK_ATTEMPT_CREATED');
    assert.equal(entry.taskAttempt, 2, 'a pushed entry takes the attempt of its detail');
  });

  test('timeline entries from /events keep their own taskAttempt', () => {
    let s = run([{ type: 'detail/open', taskId: 'a' }, { type: 'detail/snapshot', detail: { ...detailMessage('a', 3, 9, { snapshot: true }), taskAttempt: 2 } }], ready());
    const page = eventsPage('a', 0, 3, 10);
    page.events = page.events.map((e) => ({ ...e, taskAttempt: e.taskVersion === '3' ? 2 : 1 }));
    s = reduce(s, { type: 'detail/events', taskId: 'a', page });
    assert.deepEqual(timelineOf(s, 'a').map((e) => e.taskAttempt), [1, 1, 2]);
  });
});

describe('notices (seed §8.5)', () => {
  test('shown once by notice.id, duplicates and replays ignored', () => {
    const m = summaryMessage('a', 3, 9, { noticeAt: [3] });
    const s = run([push(m), push(m), push(summaryMessage('a', 3, 9, { noticeAt: [3] }))], ready());
    assert.deepEqual(s.notices.queue.map((n) => n.id), ['a:3']);
    const d = reduce(s, { type: 'notice/dismiss', id: 'a:3' });
    assert.equal(d.notices.queue.length, 0);
    assert.equal(run([push(m)], d).notices.queue.length, 0);
  });

  test('not re-shown when a snapshot already showed that version', () => {
    const s = run(
      [{ type: 'list/subscribed' }, push(summaryMessage('a', 9, 9, { noticeAt: [9] })), { type: 'list/snapshot', tasks: [summaryTask('a', 9, 9)], at: 0 }],
    );
    assert.equal(s.tasks.a.lifecycleStatus, 'SUCCEEDED');
    assert.equal(s.notices.queue.length, 0);
  });

  test('a newer push after the snapshot still notifies', () => {
    const s = run([{ type: 'list/snapshot', tasks: [summaryTask('a', 5, 9)], at: 0 }, push(summaryMessage('a', 6, 9, { noticeAt: [6] }))], ready());
    assert.deepEqual(s.notices.queue.map((n) => n.id), ['a:6']);
  });
});

describe('elapsed time (seed §9)', () => {
  test('ticks from receivedAt on the monotonic clock while RUNNING', () => {
    const s = run([push(summaryMessage('a', 3, 9), 1000)], ready());
    assert.equal(displayElapsedMs(s, 'a', 1000), 2000);
    assert.equal(displayElapsedMs(s, 'a', 4500), 5500);
    assert.equal(hasTicking(s), true);
  });

  test('terminal states show the backend final value and stop the ticker', () => {
    const s = run([push(summaryMessage('a', 3, 9), 0), push(summaryMessage('a', 9, 9), 100)], ready());
    assert.equal(displayElapsedMs(s, 'a', 1e9), 42600);
    assert.equal(hasTicking(s), false);
  });

  test('a same-version re-read with a later asOf recalibrates the base', () => {
    let s = run([push(summaryMessage('a', 3, 9), 0)], ready());
    s = reduce(s, { type: 'list/snapshot', tasks: [summaryTask('a', 3, 9, { asOfMs: 60000 })], at: 50000, final: false });
    assert.equal(s.tasks.a.version, '3');
    assert.equal(displayElapsedMs(s, 'a', 50000), 2000);
  });
});

describe('timeline', () => {
  test('appended from triggerEvent; a hole is reported, then filled from /events', () => {
    let s = run([{ type: 'detail/open', taskId: 'a' }, { type: 'detail/snapshot', detail: detailMessage('a', 2, 9, { snapshot: true }) }], ready());
    assert.equal(timelineGap(s, 'a'), '0');
    s = reduce(s, { type: 'detail/eventsRequested', taskId: 'a', after: '0' });
    assert.equal(timelineGap(s, 'a'), null, 'no second fetch while one is in flight');
    s = reduce(s, { type: 'detail/events', taskId: 'a', page: eventsPage('a', 0, 2, 10) });
    assert.equal(timelineGap(s, 'a'), null);
    s = run([{ type: 'detail', message: detailMessage('a', 3, 9) }, { type: 'detail', message: detailMessage('a', 5, 9) }], s);
    assert.equal(timelineGap(s, 'a'), '3');
    s = reduce(s, { type: 'detail/events', taskId: 'a', page: eventsPage('a', 3, 5, 10) });
    assert.deepEqual(timelineOf(s, 'a').map((e) => e.taskVersion), ['1', '2', '3', '4', '5']);
  });

  test('a purged window moves the floor instead of refetching forever', () => {
    let s = run([{ type: 'detail/open', taskId: 'a' }, { type: 'detail/snapshot', detail: detailMessage('a', 6, 9, { snapshot: true }) }], ready());
    const page = { ...eventsPage('a', 3, 6, 10), purged: true, oldestAvailableTaskVersion: '4' };
    s = reduce(s, { type: 'detail/events', taskId: 'a', page });
    assert.equal(timelineGap(s, 'a'), null);
  });

  test('messages of a detail that is not open are ignored', () => {
    const s = reduce(ready(), { type: 'detail', message: detailMessage('zz', 2, 3) });
    assert.deepEqual(s.details, {});
  });
});

describe('cards and LRU', () => {
  test('unknown operationCode or data.schema falls back to the generic card', () => {
    assert.equal(cardKind({ operationCode: 'DOCUMENT.PARSE', data: { schema: 'document.parse.progress.v1', value: {} } }), 'document-parse');
    assert.equal(cardKind({ operationCode: 'DOCUMENT.PARSE', data: { schema: 'document.parse.progress.v9', value: {} } }), 'generic');
    assert.equal(cardKind({ operationCode: 'AUDIO.MIX', data: null }), 'generic');
    assert.equal(cardKind({ operationCode: 'VIDEO.TRANSCODE', data: null }), 'video-transcode');
  });

  test('detail subscriptions are capped with LRU eviction', () => {
    let order = [];
    const evicted = [];
    for (const id of ['a', 'b', 'c', 'a', 'd', 'e']) {
      const r = lruTouch(order, id, 3);
      order = r.order;
      evicted.push(...r.evicted);
    }
    assert.deepEqual(order, ['a', 'd', 'e']);
    assert.deepEqual(evicted, ['b', 'c']);
  });
});

// --- property-style: many seeds -----------------------------------------------------------------

const TASKS = 4;
const SEEDS = 300;

function world(random) {
  const tasks = [];
  for (let i = 0; i < TASKS; i++) {
    const last = 2 + Math.floor(random() * 8);
    const failed = random() < 0.4;
    const noticeAt = [];
    for (let v = 2; v <= last; v++) if (random() < 0.3 || v === last) noticeAt.push(v);
    tasks.push({ id: `t${i}`, last, failed, noticeAt });
  }
  return tasks;
}

function summaryStream(tasks, random, { dropRate = 0 } = {}) {
  const msgs = [];
  for (const t of tasks) {
    for (let v = 1; v <= t.last; v++) {
      if (v !== t.last && random() < dropRate) continue; // a gap (the final version always lands)
      const m = summaryMessage(t.id, v, t.last, t);
      msgs.push(m);
      if (random() < 0.3) msgs.push(structuredClone(m)); // duplicate delivery
    }
  }
  return msgs;
}

const comparable = (s) => ({ tasks: s.tasks, connection: s.connection, phase: s.list.phase });

describe('property: summaries converge', () => {
  test(`shuffled + duplicated + gapped sequences, snapshot anywhere (${SEEDS} seeds)`, () => {
    for (let seed = 1; seed <= SEEDS; seed++) {
      const random = prng(seed);
      const tasks = world(random);
      const msgs = summaryStream(tasks, random, { dropRate: 0.3 });
      const snapshotTasks = tasks.map((t) => summaryTask(t.id, 1 + Math.floor(random() * t.last), t.last, t));
      const expected = Object.fromEntries(tasks.map((t) => [t.id, summaryTask(t.id, t.last, t.last, t)]));
      const allNotices = new Set(msgs.filter((m) => m.notice).map((m) => m.notice.id));
      let reference;
      for (let k = 0; k < 6; k++) {
        const order = shuffle(msgs, random);
        const cut = Math.floor(random() * (order.length + 1));
        const actions = [
          { type: 'list/subscribed' },
          ...order.slice(0, cut).map((m, i) => push(m, i)),
          { type: 'list/snapshot', tasks: snapshotTasks, at: cut },
          ...order.slice(cut).map((m, i) => push(m, cut + i)),
        ];
        const s = run(actions);
        assert.deepEqual(s.tasks, expected, `seed ${seed}`);
        const shown = s.notices.queue.map((n) => n.id);
        assert.equal(new Set(shown).size, shown.length, `seed ${seed}: a notice shown twice`);
        for (const n of s.notices.queue) {
          const base = snapshotTasks.find((t) => t.id === n.taskId).version;
          assert.ok(compareVersions(n.version, base) > 0, `seed ${seed}: notice ${n.id} re-shown from a snapshot`);
        }
        for (const id of allNotices) {
          const [task, v] = id.split(':');
          const base = snapshotTasks.find((t) => t.id === task).version;
          if (compareVersions(v, base) > 0) assert.ok(shown.includes(id), `seed ${seed}: notice ${id} lost`);
        }
        if (reference) assert.deepEqual(comparable(s), reference, `seed ${seed}: orders diverged`);
        reference = comparable(s);
      }
    }
  });

  test(`without a snapshot every distinct notice is shown exactly once (${SEEDS} seeds)`, () => {
    for (let seed = 1; seed <= SEEDS; seed++) {
      const random = prng(seed * 7919);
      const tasks = world(random);
      const msgs = summaryStream(tasks, random);
      const s = run(shuffle(msgs, random).map((m) => push(m)), ready());
      const expected = new Set(msgs.filter((m) => m.notice).map((m) => m.notice.id));
      assert.deepEqual(new Set(s.notices.queue.map((n) => n.id)), expected, `seed ${seed}`);
      assert.equal(s.notices.queue.length, expected.size, `seed ${seed}`);
      assert.deepEqual(taskList(s).length, TASKS);
    }
  });
});

describe('property: details and timelines converge', () => {
  test(`shuffled + duplicated + gapped detail pushes, gaps filled from /events (${SEEDS} seeds)`, () => {
    for (let seed = 1; seed <= SEEDS; seed++) {
      const random = prng(seed * 104729);
      const last = 3 + Math.floor(random() * 10);
      const msgs = [];
      for (let v = 1; v <= last; v++) {
        if (v !== last && random() < 0.35) continue;
        msgs.push(detailMessage('a', v, last));
        if (random() < 0.3) msgs.push(detailMessage('a', v, last));
      }
      const snapV = 1 + Math.floor(random() * last);
      const pageSize = 1 + Math.floor(random() * 4);
      let reference;
      for (let k = 0; k < 5; k++) {
        const order = shuffle(msgs, random);
        const cut = Math.floor(random() * (order.length + 1));
        let s = run([
          { type: 'list/subscribed' },
          { type: 'list/snapshot', tasks: [], at: 0 },
          { type: 'detail/open', taskId: 'a' },
          ...order.slice(0, cut).map((m) => ({ type: 'detail', message: m })),
          { type: 'detail/snapshot', detail: detailMessage('a', snapV, last, { snapshot: true }) },
          ...order.slice(cut).map((m) => ({ type: 'detail', message: m })),
        ]);
        // What TaskFeed does: fetch /events after the hole until the timeline is contiguous.
        for (let guard = 0; guard < 50; guard++) {
          const after = timelineGap(s, 'a');
          if (after === null) break;
          s = reduce(s, { type: 'detail/eventsRequested', taskId: 'a', after });
          s = reduce(s, { type: 'detail/events', taskId: 'a', page: eventsPage('a', Number(after), last, pageSize) });
        }
        assert.equal(s.details.a.detail.version, String(last), `seed ${seed}`);
        assert.deepEqual(
          timelineOf(s, 'a').map((e) => e.taskVersion),
          Array.from({ length: last }, (_, i) => String(i + 1)),
          `seed ${seed}`,
        );
        const view = { detail: s.details.a.detail, timeline: timelineOf(s, 'a') };
        if (reference) assert.deepEqual(view, reference, `seed ${seed}: orders diverged`);
        reference = view;
      }
    }
  });
});
