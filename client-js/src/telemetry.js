// Telemetry: what this browser saw, reported to the Status API in batches (POST
// /api/telemetry/client, docs/client-js.md "Telemetry"), for the client row of the design's
// metrics (seed §14.1): connection attempts/successes/failures, reconnects, recoveries answered
// recovered=false, snapshot load time, steps shown generically (unknown operationCode / data
// schema), notice display latency, and the commit→visible delay of every pushed version shown.
//
// Bounded and rate-limited by construction: counters are plain integers, each sample kind keeps
// a uniform reservoir of at most `maxSamples / 3` values per report, at most one report is sent
// per `intervalMs` (and none when nothing happened), a 429/5xx/network failure doubles the
// interval (up to 10 minutes) and keeps the counters, a 413/422 drops the batch, and a 401/403/404
// (telemetry off on the server) stops reporting. Nothing identifying is sent: the server knows the
// user from the request's auth anyway, and the only label is the transport name.

import { cardKind } from './store.js';

export const TELEMETRY_COUNTS = [
  'connects',
  'connectFailures',
  'reconnects',
  'recoveries',
  'recoveredFalse',
  'unknownOperations',
  'unknownSchemas',
  'clockSkew',
];
export const TELEMETRY_SAMPLES = ['commitToVisibleMs', 'snapshotLoadMs', 'noticeDisplayMs'];
/** The server's per-report ceilings (status_api/telemetry.py): counts and sample values. */
const MAX_COUNT = 10000;
const MAX_MS = { commitToVisibleMs: 3600000, snapshotLoadMs: 120000, noticeDisplayMs: 3600000 };
const MAX_BACKOFF_MS = 600000;
const TRANSPORTS = new Set(['websocket', 'sse', 'http_stream']);

const DEFAULTS = { intervalMs: 30000, maxSamples: 180 };

export class Telemetry {
  /**
   * @param {object} options
   * @param {(report: object) => Promise<unknown>} options.send POSTs one report; rejects with {status}
   * @param {number} [options.intervalMs] at most one report per interval (default 30000)
   * @param {number} [options.maxSamples] samples per report, all kinds together (default 180)
   * @param {() => number} [options.wallClock] epoch ms, compared with the server's committedAt (default Date.now)
   * @param {() => number} [options.random]
   */
  constructor(options) {
    const o = { ...DEFAULTS, ...options };
    this.send = o.send;
    this.baseIntervalMs = Math.max(1, o.intervalMs);
    this.intervalMs = this.baseIntervalMs;
    this.perKind = Math.max(1, Math.floor(o.maxSamples / TELEMETRY_SAMPLES.length));
    this.wallClock = o.wallClock || (() => Date.now());
    this.random = o.random || Math.random;
    this.transport = '';
    this.enabled = true;
    this.timer = null;
    this.sending = null;
    this._reset();
  }

  _reset() {
    this.counts = Object.fromEntries(TELEMETRY_COUNTS.map((k) => [k, 0]));
    this.samples = Object.fromEntries(TELEMETRY_SAMPLES.map((k) => [k, []]));
    this.seen = Object.fromEntries(TELEMETRY_SAMPLES.map((k) => [k, 0]));
  }

  /** The transport of the current connection ('websocket' | 'sse' | 'http_stream'). */
  setTransport(name) {
    if (TRANSPORTS.has(name)) this.transport = name;
  }

  count(name, n = 1) {
    if (name in this.counts) this.counts[name] = Math.min(MAX_COUNT, this.counts[name] + n);
  }

  /** Record one duration (ms) of a kind; out-of-range values are not sent (the server would refuse the report). */
  sample(name, ms) {
    const buf = this.samples[name];
    if (!buf || !Number.isFinite(ms) || ms < 0 || ms > MAX_MS[name]) return;
    this.seen[name] += 1;
    const v = Math.round(ms * 10) / 10;
    if (buf.length < this.perKind) buf.push(v);
    else {
      const j = Math.floor(this.random() * this.seen[name]);
      if (j < this.perKind) buf[j] = v;
    }
  }

  /**
   * A version committed at `committedAt` (ISO time from the server) is now shown: sample the
   * delay as `kind` (commitToVisibleMs, noticeDisplayMs). A client clock behind the server's
   * gives a negative delay: counted as clockSkew, not sampled.
   */
  committed(kind, committedAt) {
    const at = typeof committedAt === 'string' ? Date.parse(committedAt) : NaN;
    if (!Number.isFinite(at)) return;
    const ms = this.wallClock() - at;
    if (ms < 0) this.count('clockSkew');
    else this.sample(kind, ms);
  }

  /** Nothing to report since the last one. */
  get empty() {
    return TELEMETRY_COUNTS.every((k) => this.counts[k] === 0) && TELEMETRY_SAMPLES.every((k) => this.samples[k].length === 0);
  }

  /** The pending report (what flush() would send), in the wire shape. */
  report() {
    const counts = { ...this.counts, connectAttempts: Math.min(MAX_COUNT, this.counts.connects + this.counts.connectFailures) };
    // The server checks recoveredFalse <= recoveries; both are clamped the same way.
    counts.recoveredFalse = Math.min(counts.recoveredFalse, counts.recoveries);
    const samples = {};
    for (const k of TELEMETRY_SAMPLES) if (this.samples[k].length) samples[k] = [...this.samples[k]];
    return { v: 1, transport: this.transport, counts, samples };
  }

  /** Report periodically until stop(). */
  start() {
    if (!this.timer && this.enabled) this._schedule();
  }

  stop() {
    clearTimeout(this.timer);
    this.timer = null;
  }

  _schedule() {
    clearTimeout(this.timer);
    this.timer = setTimeout(async () => {
      this.timer = null;
      await this.flush();
      if (this.enabled) this._schedule();
    }, this.intervalMs);
    this.timer.unref?.();
  }

  /** Send what was collected now (one report; none when empty or disabled). Never rejects. */
  async flush() {
    if (this.sending) return this.sending;
    if (!this.enabled || this.empty) return undefined;
    const report = this.report();
    const counts = this.counts;
    this._reset();
    this.sending = (async () => {
      try {
        await this.send(report);
        this.intervalMs = this.baseIntervalMs;
      } catch (err) {
        const status = err && typeof err.status === 'number' ? err.status : 0;
        if (status === 401 || status === 403 || status === 404) {
          this.enabled = false;
          this.stop();
        } else if (status !== 413 && status !== 422) {
          // Keep the counters for the next report (samples are a sample: dropping them is fine).
          for (const k of TELEMETRY_COUNTS) this.count(k, counts[k]);
          this.intervalMs = Math.min(MAX_BACKOFF_MS, this.intervalMs * 2);
        }
      } finally {
        this.sending = null;
      }
    })();
    return this.sending;
  }
}

const SEEN_MAX = 2000;

/** A bounded "seen" set: forgets everything when full (a repeat then counts once more, never unboundedly). */
function seenOnce(set, key) {
  if (set.has(key)) return false;
  if (set.size >= SEEN_MAX) set.clear();
  set.add(key);
  return true;
}

/**
 * Connection counters from a Client's events; returns the unbind functions.
 * @param {import('./client.js').Client} client
 * @param {Telemetry} t
 */
export function observeClient(client, t) {
  let connected = false;
  let everConnected = false;
  return [
    client.on('connected', (ctx) => {
      t.setTransport(ctx.transport);
      t.count('connects');
      if (everConnected) t.count('reconnects');
      connected = everConnected = true;
    }),
    client.on('connecting', (ctx) => {
      // A drop of a live connection is a reconnect to come; a close before connect is a failed attempt.
      if (!connected && ctx.code !== 0) t.count('connectFailures');
      connected = false;
    }),
    client.on('disconnected', (ctx) => {
      if (!connected && ctx.code !== 0) t.count('connectFailures');
      connected = false;
    }),
  ];
}

/** A (re)subscription's recovery outcome (Client server-side subs and Subscription objects alike). */
export function observeSubscribed(t, ctx) {
  if (!ctx.wasRecovering) return;
  t.count('recoveries');
  if (!ctx.recovered) t.count('recoveredFalse');
}

/**
 * commit→visible, notice display and unknown operation/schema from a TaskFeed's changes: a
 * pushed version counts once it is what the feed shows (buffered or duplicate pushes do not).
 * @returns {() => void} unbind
 */
export function observeFeed(feed, t) {
  const notices = new Set();
  const steps = new Set();
  const unknownSteps = (taskId, list) => {
    for (const step of list || []) {
      const op = step.operationCode;
      if (!op || !seenOnce(steps, `${taskId}/${step.id}/${op}/${step.data?.schema ?? ''}`)) continue;
      if (cardKind({ operationCode: op }) === 'generic') t.count('unknownOperations');
      else if (cardKind(step) === 'generic') t.count('unknownSchemas');
    }
  };
  return feed.on('change', (_state, action) => {
    const store = feed.store;
    if (action.type === 'summary' && action.message?.task) {
      const msg = action.message;
      if (store.tasks[msg.task.id] === msg.task) t.committed('commitToVisibleMs', msg.task.asOf);
      const id = msg.notice?.id;
      if (id && store.notices.queue.some((n) => n.id === id) && seenOnce(notices, id)) t.committed('noticeDisplayMs', msg.task.asOf);
    } else if (action.type === 'detail' && action.message?.taskId) {
      const msg = action.message;
      const shown = store.details[msg.taskId]?.detail;
      if (shown && shown.version === msg.version && shown.asOf === msg.asOf) {
        t.committed('commitToVisibleMs', msg.asOf);
        unknownSteps(msg.taskId, msg.steps);
      }
    } else if (action.type === 'detail/snapshot' && action.detail?.taskId) {
      unknownSteps(action.detail.taskId, action.detail.steps);
    }
  });
}

/**
 * The TaskFeed's telemetry for its `telemetry` option (false/undefined: none; true: defaults;
 * an object: Telemetry options), reporting through the feed's StatusApi.
 * @returns {Telemetry | null}
 */
export function feedTelemetry(feed, option) {
  if (!option) return null;
  const own = option === true ? {} : option;
  const t = new Telemetry({ random: feed.random, ...own, send: (report) => feed.api.telemetry(report) });
  observeFeed(feed, t);
  return t;
}
