// Message builders shaped like schema/json/task-summary and task-detail (the examples in
// schema/examples/valid), and a seeded PRNG for property-style tests.

export function prng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export function shuffle(items, random) {
  const out = [...items];
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [out[i], out[j]] = [out[j], out[i]];
  }
  return out;
}

const iso = (ms) => new Date(Date.UTC(2026, 8, 21, 7, 10, 0) + ms).toISOString();

/** The lifecycle of task `id` at `version` (1 = created … last = terminal). */
export function lifecycleAt(version, last, failed) {
  if (version === 1) return 'PENDING';
  if (version < last) return 'RUNNING';
  return failed ? 'FAILED' : 'SUCCEEDED';
}

export function summaryTask(id, version, last, { failed = false, asOfMs } = {}) {
  const lifecycle = lifecycleAt(version, last, failed);
  const terminal = version === last;
  return {
    id,
    projectId: null,
    product: 'DOCUMENT',
    taskType: 'DOCUMENT_PROCESS',
    title: `Task ${id}`,
    lifecycleStatus: lifecycle,
    businessStatus: terminal ? (failed ? 'REJECTED' : 'COMPLETED') : version === 1 ? 'QUEUED' : 'PARSING',
    health: 'HEALTHY',
    version: String(version),
    createdAt: iso(0),
    startedAt: version > 1 ? iso(1000) : null,
    finishedAt: terminal ? iso(version * 1000) : null,
    elapsedMs: version > 1 ? (version - 1) * 1000 : null,
    durationMs: terminal ? 42600 : null,
    asOf: iso(asOfMs ?? version * 1000),
    currentOperation: null,
    failedStepId: null,
    failureCode: null,
    failureMessage: null,
    summaryData: null,
  };
}

/** A task.summary push; versions listed in `noticeAt` carry a notice `{id}:{version}`. */
export function summaryMessage(id, version, last, opts = {}) {
  const message = { kind: 'task.summary', schemaVersion: 1, task: summaryTask(id, version, last, opts) };
  if ((opts.noticeAt || []).includes(version)) {
    message.notice = {
      id: `${id}:${version}`,
      type: version === last ? (opts.failed ? 'TASK_FAILED' : 'TASK_SUCCEEDED') : 'STEP_FAILED',
      level: 'ERROR',
      title: `Notice ${version}`,
      message: 'something happened',
      requiresAction: false,
    };
  }
  return message;
}

export function triggerEvent(id, version) {
  return {
    eventId: `evt-${id}-${version}`,
    eventType: version === 1 ? 'TASK_CREATED' : 'STEP_PROGRESS',
    stepId: version === 1 ? null : '02_parse',
    operationCode: version === 1 ? null : 'DOCUMENT.PARSE',
    stepAttempt: version === 1 ? null : 1,
    stepVersion: version === 1 ? null : String(version),
    durationMs: null,
    data: null,
    error: null,
    committedAt: iso(version * 1000),
  };
}

export function detailMessage(id, version, last, { snapshot = false, asOfMs } = {}) {
  const s = summaryTask(id, version, last, { asOfMs });
  return {
    kind: 'task.detail',
    schemaVersion: 1,
    taskId: id,
    version: String(version),
    taskVersion: String(version),
    projectId: null,
    product: s.product,
    taskType: s.taskType,
    title: s.title,
    lifecycleStatus: s.lifecycleStatus,
    businessStatus: s.businessStatus,
    health: 'HEALTHY',
    createdAt: s.createdAt,
    startedAt: s.startedAt,
    finishedAt: s.finishedAt,
    asOf: s.asOf,
    failedStepId: null,
    failureCode: null,
    failureMessage: null,
    durations: { queueMs: 1000, runMs: null, totalMs: null, elapsedMs: s.elapsedMs, durationSource: null },
    steps: [
      {
        id: '02_parse',
        operationCode: 'DOCUMENT.PARSE',
        attempt: 1,
        version: String(version),
        lifecycleStatus: s.lifecycleStatus,
        businessStatus: s.businessStatus,
        health: 'HEALTHY',
        startedAt: s.startedAt,
        finishedAt: s.finishedAt,
        durationMs: null,
        durationSource: null,
        queueDurationMs: null,
        lastHeartbeatAt: null,
        progress: { current: version, total: last, unit: 'page' },
        data: { schema: 'document.parse.progress.v1', value: { currentPage: version, totalPages: last } },
        error: null,
      },
    ],
    triggerEvent: snapshot ? null : triggerEvent(id, version),
  };
}

/** GET /events page for versions (after, upTo], as the Status API answers it. */
export function eventsPage(id, after, top, limit = 3) {
  const events = [];
  for (let v = after + 1; v <= top && events.length < limit; v++) {
    events.push({ ...triggerEvent(id, v), taskVersion: String(v), lifecycleStatus: 'RUNNING', businessStatus: 'PARSING' });
  }
  const last = events.length ? Number(events[events.length - 1].taskVersion) : after;
  return {
    taskId: id,
    taskVersion: String(top),
    afterTaskVersion: String(after),
    events,
    nextAfterTaskVersion: String(last),
    hasMore: last < top && events.length > 0,
    purged: false,
    oldestAvailableTaskVersion: '1',
  };
}
