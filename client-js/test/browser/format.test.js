// The board's pure formatting (board/format.js): sizes, durations, relative times, the moment a
// row shows, filters and terminal-aware step states.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import {
  between,
  exactTime,
  filterTasks,
  formatBytes,
  formatDuration,
  milestone,
  opName,
  statusName,
  relativeTime,
  stepState,
} from '../../board/format.js';

test('sizes are human, in binary units', () => {
  assert.equal(formatBytes(900), '900 B');
  assert.equal(formatBytes(482113), '471 KB');
  assert.equal(formatBytes(40112890), '38.3 MB');
  assert.equal(formatBytes(2 * 1024 ** 3), '2 GB');
  assert.equal(formatBytes(undefined), '');
});

test('durations', () => {
  assert.equal(formatDuration(null), '—');
  assert.equal(formatDuration(850), '850 ms');
  assert.equal(formatDuration(42600), '42.6 s');
  assert.equal(formatDuration(125000), '2 min 05 s');
  assert.equal(formatDuration(7.3e6), '2 h 01 min');
});

test('relative times, with the exact time for the tooltip', () => {
  const now = Date.parse('2026-12-01T10:00:00Z');
  assert.equal(relativeTime('2026-12-01T09:59:55Z', now), 'just now');
  assert.equal(relativeTime('2026-12-01T09:59:18Z', now), '42 s ago');
  assert.equal(relativeTime('2026-12-01T09:55:00Z', now), '5 min ago');
  assert.equal(relativeTime('2026-12-01T07:00:00Z', now), '3 h ago');
  assert.equal(relativeTime('2026-11-30T09:00:00Z', now), 'yesterday');
  assert.equal(relativeTime('2026-11-27T10:00:00Z', now), '4 days ago');
  assert.equal(relativeTime('2026-12-01T10:05:00Z', now), 'in 5 min');
  assert.equal(relativeTime(null, now), '');
  assert.match(exactTime('2026-12-01T10:00:00.250Z'), /^2026-12-0\d \d\d:\d\d:00\.250 \(UTC[+-]\d\d:\d\d\)$/);
  assert.equal(between('2026-12-01T10:00:00Z', '2026-12-01T10:00:04.5Z'), 4500);
  assert.equal(between(null, '2026-12-01T10:00:00Z'), null);
});

test('a finished task shows when it finished, not when it was created', () => {
  const task = { lifecycleStatus: 'SUCCEEDED', createdAt: '2026-12-01T08:06:19Z', startedAt: '2026-12-01T08:06:19.5Z', finishedAt: '2026-12-01T08:06:23.7Z' };
  assert.deepEqual(milestone(task), { verb: 'Finished', at: '2026-12-01T08:06:23.7Z' });
  assert.equal(milestone({ ...task, lifecycleStatus: 'RUNNING', finishedAt: null }).at, task.startedAt);
  assert.equal(milestone({ ...task, lifecycleStatus: 'PENDING', startedAt: null, finishedAt: null }).verb, 'Created');
});

test('state filter and title search', () => {
  const tasks = [
    { title: 'Quarterly report.pdf', lifecycleStatus: 'RUNNING' },
    { title: 'Archive.rar', lifecycleStatus: 'FAILED' },
    { title: 'Quarterly minutes', lifecycleStatus: 'SUCCEEDED' },
  ];
  assert.equal(filterTasks(tasks, 'all', '').length, 3);
  assert.deepEqual(filterTasks(tasks, 'active', '').map((t) => t.title), ['Quarterly report.pdf']);
  assert.deepEqual(filterTasks(tasks, 'all', '  quarterly ').map((t) => t.title), ['Quarterly report.pdf', 'Quarterly minutes']);
  assert.deepEqual(filterTasks(tasks, 'failed', 'arch').map((t) => t.title), ['Archive.rar']);
  assert.equal(filterTasks(tasks, 'unknown-filter', '').length, 3);
});

test('steps after a failure read "Not run", not queued', () => {
  const pending = { lifecycleStatus: 'PENDING', businessStatus: 'QUEUED' };
  assert.equal(stepState(pending, 'FAILED').text, 'Not run');
  assert.equal(stepState(pending, 'CANCELLED').key, 'SKIPPED');
  assert.equal(stepState(pending, 'RUNNING').text, 'Waiting');
  assert.equal(stepState({ lifecycleStatus: 'RUNNING', businessStatus: 'PARSING' }, 'CANCELLED').text, 'Stopped');
  assert.equal(stepState({ lifecycleStatus: 'FAILED', businessStatus: 'PARSE_FAILED' }, 'FAILED').text, 'Parse failed');
  assert.equal(opName('VIDEO.PUBLISH', 'Publish video'), 'Publish video', 'the registered displayName');
  assert.equal(opName('VIDEO.PUBLISH'), 'Video publish', 'no hardcoded names: the code made readable');
  assert.equal(statusName('PARSE_FAILED', { name: 'Parsing failed', severity: 'ERROR' }), 'Parsing failed');
  assert.equal(statusName('PARSE_FAILED', null), 'Parse failed');
  assert.equal(opName('FOO.BAR_BAZ'), 'Foo bar baz');
});
