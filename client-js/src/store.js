// The task store as a pure reducer (seed §8, §9, §13): `reduce(state, action) -> state`, no I/O,
// no clock reads (monotonic times arrive inside actions as `at`, from performance.now()), no
// mutation of its inputs. The effectful side (subscriptions, fetches, the shared timer) lives in
// tasks.js and only dispatches actions here, so every ordering rule is testable without a network.
//
// Rules kept here:
// * every object only accepts a higher version (decimal strings compared as BigInt, §8.1);
// * summary (task_user channel) and detail (task_detail channel) gates are separate (§8.2);
// * subscribe first, buffer pushes, apply the snapshot, then replay the buffer by version (§8.3);
// * notices are de-duplicated by notice.id, and a notice whose version a snapshot already
//   showed is not popped again (§8.5);
// * the elapsed time of a running task ticks locally from (elapsedMs, receivedAt) (§9.1) and
//   stops at terminal states, where the backend's final value is shown (§9.2).

export const TERMINAL = Object.freeze(['SUCCEEDED', 'FAILED', 'CANCELLED']);

/** @param {string | undefined | null} s */
const big = (s) => (s == null ? -1n : BigInt(s));

/** Positive when a > b, by version (decimal strings). */
export function compareVersions(a, b) {
  const x = big(a);
  const y = big(b);
  return x > y ? 1 : x < y ? -1 : 0;
}

export function isTerminal(status) {
  return TERMINAL.includes(status);
}

export function initialState() {
  return {
    connection: 'RECOVERING',
    /** phase: idle → buffering (subscribed, snapshot pending) → ready; `loaded` once any snapshot applied */
    list: { phase: 'idle', buffer: [], loaded: false, syncing: false, nextCursor: null, loadingMore: false, error: null },
    /** taskId -> task.summary `task` object (the summary gate) */
    tasks: {},
    /** taskId -> {elapsedMs, receivedAt}: base of the locally ticking elapsed time */
    clocks: {},
    /** taskId -> highest version learned from a snapshot (list, batchGet or detail) */
    baseline: {},
    /** taskId -> open detail: {phase, buffer, detail, timeline, floor, fetching, checkedVersion, syncing, error} */
    details: {},
    notices: { seen: {}, queue: [] },
  };
}

// --- summary gate -------------------------------------------------------------------------------

function later(a, b) {
  // Same version seen twice (a snapshot read after the push, or a duplicate): keep the reading
  // with the later asOf so elapsedMs converges whatever the arrival order.
  return String(b.asOf || '') > String(a.asOf || '') ? b : a;
}

function mergeSummary(state, task, at, fromSnapshot) {
  const id = task.id;
  const cur = state.tasks[id];
  let next = state;
  const cmp = cur ? compareVersions(task.version, cur.version) : 1;
  if (cmp > 0 || (cmp === 0 && later(cur, task) !== cur)) {
    next = {
      ...next,
      tasks: { ...next.tasks, [id]: task },
      clocks: { ...next.clocks, [id]: { elapsedMs: task.elapsedMs, receivedAt: at } },
    };
  }
  if (fromSnapshot && compareVersions(task.version, next.baseline[id]) > 0) {
    next = { ...next, baseline: { ...next.baseline, [id]: task.version } };
  }
  return next;
}

function takeNotice(state, notice, taskId, version) {
  if (!notice || state.notices.seen[notice.id]) return state;
  const seen = { ...state.notices.seen, [notice.id]: true };
  // A snapshot already showed this version (e.g. after a reload): update the card, no toast.
  const shown = compareVersions(version, state.baseline[taskId]) > 0;
  const queue = shown ? [...state.notices.queue, { ...notice, taskId, version }] : state.notices.queue;
  return { ...state, notices: { seen, queue } };
}

function applySummaryPush(state, message, at) {
  const next = mergeSummary(state, message.task, at, false);
  return takeNotice(next, message.notice, message.task.id, message.task.version);
}

const byVersion = (a, b) => compareVersions(a.version, b.version);

// --- detail gate --------------------------------------------------------------------------------

/**
 * Timeline entries are normalised to the fields both a triggerEvent and /events carry.
 * `taskAttempt`: the task attempt at that version (/events carries it; for a triggerEvent it is
 * the pushed detail's own `taskAttempt`, passed as `attempt`), null when unknown.
 */
export function timelineEntry(taskVersion, e, attempt = null) {
  return {
    taskVersion: String(taskVersion),
    eventId: e.eventId,
    eventType: e.eventType,
    taskAttempt: e.taskAttempt ?? attempt ?? null,
    stepId: e.stepId ?? null,
    operationCode: e.operationCode ?? null,
    durationMs: e.durationMs ?? null,
    data: e.data ?? null,
    error: e.error ?? null,
    committedAt: e.committedAt,
  };
}

function emptyDetail() {
  return { phase: 'buffering', buffer: [], detail: null, timeline: {}, floor: '0', fetching: null, checkedVersion: null, timelineFailed: false, syncing: false, error: null };
}

function mergeDetail(entry, message) {
  let next = entry;
  const cur = entry.detail;
  const cmp = cur ? compareVersions(message.version, cur.version) : 1;
  if (cmp > 0 || (cmp === 0 && later(cur, message) !== cur)) {
    const { triggerEvent: _e, ...detail } = message;
    next = { ...next, detail };
  }
  if (message.triggerEvent && !next.timeline[message.version]) {
    next = { ...next, timeline: { ...next.timeline, [message.version]: timelineEntry(message.version, message.triggerEvent, message.taskAttempt) } };
  }
  return next;
}

function withDetail(state, taskId, entry) {
  return { ...state, details: { ...state.details, [taskId]: entry } };
}

/** {code, message} of a failed read, for the public state (never the raw error object). */
function publicError(err) {
  return { code: String(err?.code ?? err?.name ?? 'ERROR'), message: String(err?.message ?? err) };
}

// --- the reducer --------------------------------------------------------------------------------

/**
 * @param {ReturnType<typeof initialState>} state
 * @param {import('../index').StoreAction} action
 */
export function reduce(state, action) {
  switch (action.type) {
    case 'connection':
      return state.connection === action.status ? state : { ...state, connection: action.status };

    case 'list/subscribed':
      // Subscribed (again) before reading the snapshot: buffer until it arrives.
      return state.list.phase === 'buffering' ? state : { ...state, list: { ...state.list, phase: 'buffering', buffer: [] } };

    case 'list/loading':
      return state.list.syncing ? state : { ...state, list: { ...state.list, syncing: true } };

    case 'list/failed':
      // A failed read keeps the last confirmed tasks (seed §13.1); the feed retries with backoff.
      return { ...state, list: { ...state.list, syncing: action.retrying !== false, error: publicError(action.error) } };

    case 'list/moreLoading':
      return state.list.loadingMore === action.loading ? state : { ...state, list: { ...state.list, loadingMore: action.loading } };

    case 'list/page': {
      // A further page (cursor): merged like a snapshot, it never changes the buffering phase.
      let next = state;
      for (const task of action.tasks) next = mergeSummary(next, task, action.at, true);
      return { ...next, list: { ...next.list, nextCursor: action.nextCursor ?? null, loadingMore: false } };
    }

    case 'summary': {
      if (action.message?.kind !== 'task.summary') return state;
      if (state.list.phase !== 'ready') {
        return { ...state, list: { ...state.list, buffer: [...state.list.buffer, { message: action.message, at: action.at }] } };
      }
      return applySummaryPush(state, action.message, action.at);
    }

    case 'list/snapshot': {
      // Snapshot items (GET /api/tasks, status:batchGet) carry no notices and set the baseline.
      let next = state;
      for (const task of action.tasks) next = mergeSummary(next, task, action.at, true);
      if (action.final === false) return next;
      const list = { ...next.list, loaded: true, syncing: false, error: null };
      if ('nextCursor' in action) list.nextCursor = action.nextCursor ?? null;
      if (next.list.phase === 'ready') return { ...next, list };
      const buffered = [...next.list.buffer].sort((a, b) => byVersion(a.message.task, b.message.task));
      next = { ...next, list: { ...list, phase: 'ready', buffer: [] } };
      for (const item of buffered) next = applySummaryPush(next, item.message, item.at);
      return next;
    }

    case 'task/remove': {
      if (!state.tasks[action.taskId]) return state;
      const { [action.taskId]: _t, ...tasks } = state.tasks;
      const { [action.taskId]: _c, ...clocks } = state.clocks;
      return { ...state, tasks, clocks };
    }

    case 'detail/open':
      return state.details[action.taskId] ? state : withDetail(state, action.taskId, emptyDetail());

    case 'detail/close': {
      if (!state.details[action.taskId]) return state;
      const { [action.taskId]: _d, ...details } = state.details;
      return { ...state, details };
    }

    case 'detail': {
      const message = action.message;
      if (message?.kind !== 'task.detail') return state;
      const entry = state.details[message.taskId];
      if (!entry) return state; // not open: the summary channel still carries the task
      if (entry.phase !== 'ready') return withDetail(state, message.taskId, { ...entry, buffer: [...entry.buffer, message] });
      return withDetail(state, message.taskId, mergeDetail(entry, message));
    }

    case 'detail/resubscribed': {
      const entry = state.details[action.taskId];
      if (!entry) return state;
      return withDetail(state, action.taskId, { ...entry, phase: 'buffering', buffer: entry.phase === 'buffering' ? entry.buffer : [] });
    }

    case 'detail/snapshot': {
      const snap = action.detail;
      const entry = state.details[snap.taskId];
      if (!entry) return state;
      let next = mergeDetail(entry, { ...snap, triggerEvent: null });
      const buffered = [...entry.buffer].sort(byVersion);
      next = { ...next, phase: 'ready', buffer: [], syncing: false, error: null };
      for (const m of buffered) next = mergeDetail(next, m);
      let out = withDetail(state, snap.taskId, next);
      if (compareVersions(snap.version, out.baseline[snap.taskId]) > 0) {
        out = { ...out, baseline: { ...out.baseline, [snap.taskId]: snap.version } };
      }
      return out;
    }

    case 'detail/loading':
    case 'detail/failed': {
      const entry = state.details[action.taskId];
      if (!entry) return state;
      const failed = action.type === 'detail/failed';
      const error = failed ? publicError(action.error) : entry.error;
      return withDetail(state, action.taskId, { ...entry, syncing: !failed || action.retrying !== false, error });
    }

    case 'detail/eventsRetry': {
      // The retry timer of a failed /events read: forget the check so timelineGap reports the hole again.
      const entry = state.details[action.taskId];
      if (!entry || entry.fetching !== null) return state;
      return withDetail(state, action.taskId, { ...entry, checkedVersion: null });
    }

    case 'detail/eventsRequested': {
      const entry = state.details[action.taskId];
      if (!entry) return state;
      return withDetail(state, action.taskId, { ...entry, fetching: String(action.after) });
    }

    case 'detail/events': {
      const entry = state.details[action.taskId];
      if (!entry) return state;
      const page = action.page;
      const timeline = { ...entry.timeline };
      for (const e of page.events || []) {
        if (!timeline[e.taskVersion]) timeline[e.taskVersion] = timelineEntry(e.taskVersion, e);
      }
      let floor = entry.floor;
      if (page.purged && page.oldestAvailableTaskVersion) {
        const f = String(big(page.oldestAvailableTaskVersion) - 1n);
        if (compareVersions(f, floor) > 0) floor = f;
      }
      const checkedVersion = page.hasMore ? entry.checkedVersion : String(page.taskVersion ?? entry.checkedVersion);
      return withDetail(state, action.taskId, { ...entry, timeline, floor, fetching: null, checkedVersion, timelineFailed: false });
    }

    case 'detail/eventsFailed': {
      const entry = state.details[action.taskId];
      if (!entry) return state;
      // Marked checked so the hole is not re-read in a loop; the feed's retry timer clears it (eventsRetry).
      return withDetail(state, action.taskId, { ...entry, fetching: null, checkedVersion: entry.detail?.version ?? null, timelineFailed: true });
    }

    case 'notice/dismiss':
      return {
        ...state,
        notices: { ...state.notices, queue: state.notices.queue.filter((n) => n.id !== action.id) },
      };

    default:
      return state;
  }
}

// --- selectors ----------------------------------------------------------------------------------

/** Tasks newest first (createdAt, then id) for the list. */
export function taskList(state) {
  return Object.values(state.tasks).sort((a, b) =>
    a.createdAt === b.createdAt ? (a.id < b.id ? 1 : -1) : a.createdAt < b.createdAt ? 1 : -1,
  );
}

/**
 * The elapsed time to show now (seed §9.1–9.2): the backend's final durationMs (or elapsedMs) at
 * terminal states; while RUNNING, elapsedMs + (now - receivedAt) on the monotonic clock.
 * @param {number} now performance.now()
 */
export function displayElapsedMs(state, taskId, now) {
  const task = state.tasks[taskId];
  if (!task) return null;
  if (isTerminal(task.lifecycleStatus)) return task.durationMs ?? task.elapsedMs ?? null;
  const clock = state.clocks[taskId];
  if (!clock || clock.elapsedMs == null) return task.elapsedMs ?? null;
  if (task.lifecycleStatus !== 'RUNNING') return clock.elapsedMs;
  return clock.elapsedMs + Math.max(0, now - clock.receivedAt);
}

/** True while some task's elapsed time must tick (RUNNING with a start): the shared timer runs. */
export function hasTicking(state) {
  return Object.values(state.tasks).some((t) => t.lifecycleStatus === 'RUNNING' && t.startedAt);
}

/** Non-terminal task ids (what the low-frequency batchGet check covers). */
export function activeTaskIds(state) {
  return Object.values(state.tasks)
    .filter((t) => !isTerminal(t.lifecycleStatus))
    .map((t) => t.id);
}

/** {taskId: version} for status:batchGet knownVersions. */
export function knownVersions(state, ids) {
  const out = {};
  for (const id of ids) if (state.tasks[id]) out[id] = state.tasks[id].version;
  return out;
}

/** Timeline entries of an open detail, oldest first. */
export function timelineOf(state, taskId) {
  const entry = state.details[taskId];
  if (!entry) return [];
  if (Array.isArray(entry.timeline)) return entry.timeline; // the public FeedState keeps it sorted
  return Object.values(entry.timeline).sort((a, b) => compareVersions(a.taskVersion, b.taskVersion));
}

/**
 * The version after which /events must be read to fill a hole in an open detail's timeline, or
 * null when it is complete (contiguous from the floor to the detail version), being fetched, or
 * already checked at this version.
 */
export function timelineGap(state, taskId) {
  const entry = state.details[taskId];
  if (!entry || entry.phase !== 'ready' || !entry.detail || entry.fetching !== null) return null;
  const top = big(entry.detail.version);
  if (entry.checkedVersion !== null && big(entry.checkedVersion) >= top) return null;
  let v = big(entry.floor);
  while (v < top && entry.timeline[String(v + 1n)]) v += 1n;
  return v < top ? String(v) : null;
}

const KNOWN_DATA = {
  'document.parse.progress.v1': 'document-parse',
  'document.parse.completed.v2': 'document-parse',
  'video.transcode.progress.v1': 'video-transcode',
  'file.prepare.completed.v1': 'file-prepare',
  'result.persist.completed.v1': 'result-persist',
};
const KNOWN_OPS = {
  'DOCUMENT.PARSE': 'document-parse',
  'VIDEO.TRANSCODE': 'video-transcode',
  'FILE.PREPARE': 'file-prepare',
  'RESULT.PERSIST': 'result-persist',
  'REVIEW.MANUAL': 'review',
};

/**
 * Which card renders a step: an operation-specific card only when both the operationCode and
 * the data.schema (if any) are known; anything else falls back to the generic lifecycle card
 * (seed §17: a client that does not know an operationCode still shows the step).
 */
export function cardKind(step) {
  const op = KNOWN_OPS[step.operationCode];
  if (!op) return 'generic';
  if (!step.data) return op;
  return KNOWN_DATA[step.data.schema] === op ? op : 'generic';
}

/**
 * Least-recently-used bookkeeping for detail subscriptions (seed §6.5): touching `id` moves it to
 * the end; past `cap` the oldest entries are evicted (returned so the caller unsubscribes them).
 * @returns {{order: string[], evicted: string[]}}
 */
export function lruTouch(order, id, cap) {
  const next = order.filter((x) => x !== id);
  next.push(id);
  const evicted = next.length > cap ? next.splice(0, next.length - cap) : [];
  return { order: next, evicted };
}
