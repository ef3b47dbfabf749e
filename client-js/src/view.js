// The public, read-only view of the store that TaskFeed hands out (`feed.state`, `getSnapshot()`,
// the `change` event): the reducer's bookkeeping (push buffers, snapshot baselines, seen notice
// ids, timeline paging cursors) stays inside. The view is memoized per part, so it is the same
// object while nothing changed (React's useSyncExternalStore contract) and unchanged tasks and
// details keep their identity across changes. Plus the duration selector of seed §9.3.

import { compareVersions, displayElapsedMs, isTerminal, timelineGap, timelineOf } from './store.js';

function listView(list) {
  return Object.freeze({
    phase: list.loaded ? 'ready' : list.phase === 'idle' && !list.syncing ? 'idle' : 'loading',
    syncing: list.syncing || (list.loaded && list.phase === 'buffering'),
    hasMore: list.nextCursor != null,
    loadingMore: list.loadingMore,
    error: list.error,
  });
}

function detailView(state, taskId, entry) {
  const task = state.tasks[taskId];
  const behind = !!(task && entry.detail && compareVersions(task.version, entry.detail.version) > 0);
  return Object.freeze({
    phase: entry.detail ? 'ready' : 'loading',
    detail: entry.detail,
    timeline: Object.freeze(timelineOf(state, taskId)),
    timelineComplete: entry.phase === 'ready' && !!entry.detail && entry.fetching === null && !entry.timelineFailed && timelineGap(state, taskId) === null,
    behind,
    syncing: entry.syncing || entry.phase === 'buffering' || behind,
    error: entry.error,
  });
}

/**
 * A memoizing projection: `project(state)` returns the previous view object when `state` is the
 * same, and reuses the list/detail views whose inputs did not change.
 * @returns {(state: object) => object}
 */
export function viewProjector() {
  let src = null;
  let out = null;
  let listSrc = null;
  let list = null;
  const details = new Map(); // taskId -> {entry, task, view}
  return (state) => {
    if (state === src) return out;
    if (state.list !== listSrc) {
      listSrc = state.list;
      list = listView(state.list);
    }
    const views = {};
    for (const [id, entry] of Object.entries(state.details)) {
      const cached = details.get(id);
      if (cached && cached.entry === entry && cached.task === state.tasks[id]) {
        views[id] = cached.view;
      } else {
        const view = detailView(state, id, entry);
        details.set(id, { entry, task: state.tasks[id], view });
        views[id] = view;
      }
    }
    for (const id of details.keys()) if (!(id in views)) details.delete(id);
    const notices = out && src && state.notices.queue === src.notices.queue ? out.notices : Object.freeze([...state.notices.queue]);
    const sameDetails = out && Object.keys(views).length === Object.keys(out.details).length && Object.entries(views).every(([id, v]) => out.details[id] === v);
    src = state;
    out = Object.freeze({
      connection: state.connection,
      list,
      tasks: state.tasks,
      clocks: state.clocks,
      details: sameDetails ? out.details : Object.freeze(views),
      notices,
    });
    return out;
  };
}

const ms = (iso) => (iso ? Date.parse(iso) : NaN);

/**
 * The durations of seed §9.3 for one task: `queueMs` = startedAt − createdAt (null until it
 * started); `durationMs` = the run from its start to the authoritative terminal state (the
 * backend's durationMs at terminal states, the locally ticking elapsed time while RUNNING, null
 * before it started). Times are the backend's ISO strings; `createdAt` is when it was queued.
 * @param {number} now performance.now(), as for displayElapsedMs
 */
export function taskTimes(state, taskId, now) {
  const task = state.tasks[taskId];
  if (!task) return null;
  const queue = ms(task.startedAt) - ms(task.createdAt);
  return {
    createdAt: task.createdAt,
    startedAt: task.startedAt ?? null,
    finishedAt: task.finishedAt ?? null,
    queueMs: Number.isFinite(queue) ? Math.max(0, queue) : null,
    durationMs: task.startedAt || isTerminal(task.lifecycleStatus) ? displayElapsedMs(state, taskId, now) : null,
    running: task.lifecycleStatus === 'RUNNING',
  };
}
