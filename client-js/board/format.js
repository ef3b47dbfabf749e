// Pure formatting for the task board: durations, relative and exact times, sizes, labels.
// No DOM and no clock reads (callers pass `now`), so node:test covers it directly
// (test/browser/format.test.js).

/** "PARSE_FAILED" -> "Parse failed". */
export function label(code) {
  return code ? code.charAt(0) + code.slice(1).toLowerCase().replace(/_/g, ' ') : '';
}

/**
 * An operation's name: its registered displayName (the payload's `displayName`, seed §4.6), else
 * the code made readable ("FOO.BAR" -> "Foo bar"). Nothing is hardcoded per product.
 */
export function opName(code, displayName) {
  return displayName || label(String(code || '').replace(/\./g, '_'));
}

/** A businessStatus's name: its registered displayName (`businessStatusDisplay`), else the code made readable. */
export function statusName(code, display) {
  return (display && display.name) || label(code);
}

/** 850 -> "850 ms", 42600 -> "42.6 s", 125000 -> "2 min 05 s", 7.3e6 -> "2 h 01 min"; null -> "—". */
export function formatDuration(ms) {
  if (ms == null || !Number.isFinite(ms)) return '—';
  if (ms < 1000) return `${Math.max(0, Math.round(ms))} ms`;
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(1)} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${String(Math.floor(s % 60)).padStart(2, '0')} s`;
  return `${Math.floor(m / 60)} h ${String(m % 60).padStart(2, '0')} min`;
}

/** Bytes in binary units: 482113 -> "471 KB", 40112890 -> "38.3 MB", 900 -> "900 B". */
export function formatBytes(n) {
  if (n == null || !Number.isFinite(n) || n < 0) return '';
  const units = ['B', 'KB', 'MB', 'GB', 'TB'];
  let v = n;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i += 1;
  }
  const digits = i === 0 || v >= 100 ? 0 : 1;
  return `${v.toFixed(digits).replace(/\.0$/, '')} ${units[i]}`;
}

/**
 * "just now", "42 s ago", "5 min ago", "3 h ago", "yesterday", "4 days ago" (past), and "in 5 min"
 * for a time slightly in the future (clock skew between browser and server).
 * @param {string | null | undefined} iso
 * @param {number} nowMs wall-clock milliseconds (Date.now())
 */
export function relativeTime(iso, nowMs) {
  if (!iso) return '';
  const t = Date.parse(iso);
  if (Number.isNaN(t)) return '';
  const diff = Math.round((nowMs - t) / 1000);
  const abs = Math.abs(diff);
  if (abs < 10) return 'just now';
  let text;
  if (abs < 60) text = `${abs} s`;
  else if (abs < 3600) text = `${Math.floor(abs / 60)} min`;
  else if (abs < 86400) text = `${Math.floor(abs / 3600)} h`;
  else if (abs < 172800) return diff > 0 ? 'yesterday' : 'tomorrow';
  else text = `${Math.floor(abs / 86400)} days`;
  return diff > 0 ? `${text} ago` : `in ${text}`;
}

/** The exact local time for a tooltip: "2026-12-01 10:52:07.412 (UTC+01:00)". */
export function exactTime(iso) {
  if (!iso) return '';
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return '';
  const p = (n, w = 2) => String(n).padStart(w, '0');
  const off = -d.getTimezoneOffset();
  const tz = `UTC${off >= 0 ? '+' : '-'}${p(Math.floor(Math.abs(off) / 60))}:${p(Math.abs(off) % 60)}`;
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}.${p(d.getMilliseconds(), 3)} (${tz})`;
}

/** "10:52:07" local, 24-hour clock (the timeline). */
export function clock(iso) {
  if (!iso) return '';
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return '';
  const p = (n) => String(n).padStart(2, '0');
  return `${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
}

/** Milliseconds between two ISO times, or null when either is missing. */
export function between(a, b) {
  if (!a || !b) return null;
  const x = Date.parse(a);
  const y = Date.parse(b);
  return Number.isNaN(x) || Number.isNaN(y) ? null : Math.max(0, y - x);
}

/**
 * The moment a list row shows for a task: when it finished (terminal), started (running) or was
 * queued (pending) - never the creation time for a finished task.
 * @returns {{verb: string, at: string | null}}
 */
export function milestone(task) {
  switch (task.lifecycleStatus) {
    case 'SUCCEEDED':
      return { verb: 'Finished', at: task.finishedAt || null };
    case 'FAILED':
      return { verb: 'Failed', at: task.finishedAt || null };
    case 'CANCELLED':
      return { verb: 'Cancelled', at: task.finishedAt || null };
    case 'RUNNING':
      return { verb: 'Started', at: task.startedAt || task.createdAt || null };
    default:
      return { verb: 'Created', at: task.createdAt || null };
  }
}

/** The board's state filters: which lifecycle statuses each one shows. */
export const FILTERS = {
  all: { label: 'All', match: () => true },
  active: { label: 'Active', match: (s) => s === 'PENDING' || s === 'RUNNING' },
  succeeded: { label: 'Succeeded', match: (s) => s === 'SUCCEEDED' },
  failed: { label: 'Failed', match: (s) => s === 'FAILED' },
  cancelled: { label: 'Cancelled', match: (s) => s === 'CANCELLED' },
};

/** Tasks matching a state filter name and a case-insensitive title search. */
export function filterTasks(tasks, filter, query) {
  const f = (FILTERS[filter] || FILTERS.all).match;
  const q = String(query || '').trim().toLowerCase();
  return tasks.filter((t) => f(t.lifecycleStatus) && (!q || String(t.title || '').toLowerCase().includes(q)));
}

/**
 * How a step reads in the detail view, aware of the task's terminal state: after a task FAILED or
 * was CANCELLED, a step that never started did not run (it is not "queued" any more), and a step
 * still RUNNING was stopped.
 * @returns {{key: string, text: string}} key is a CSS class / data-state value
 */
export function stepState(step, taskStatus) {
  const ended = taskStatus === 'FAILED' || taskStatus === 'CANCELLED';
  if (step.lifecycleStatus === 'PENDING') {
    if (ended || taskStatus === 'SUCCEEDED') return { key: 'SKIPPED', text: 'Not run' };
    return { key: 'PENDING', text: 'Waiting' };
  }
  if (step.lifecycleStatus === 'RUNNING' && ended) return { key: 'CANCELLED', text: 'Stopped' };
  return { key: step.lifecycleStatus, text: statusName(step.businessStatus, step.businessStatusDisplay) || label(step.lifecycleStatus) };
}
