// Keyed retry timers with full-jitter backoff for TaskFeed's snapshot reads (list, detail:<id>,
// events:<id>, recalibrate): one timer and one attempt counter per key, reset on success.

import { ApiError } from './api.js';
import { backoffMs } from './backoff.js';

/** Retry a failed read unless the answer is final (400, 403, 404, ...: retrying cannot help). */
export function retryable(err) {
  return !(err instanceof ApiError) || err.retryable || err.status === 401 || err.status === 408;
}

export class Retries {
  /**
   * @param {{retryMinMs: number, retryMaxMs: number}} options
   * @param {() => number} random
   */
  constructor(options, random) {
    this.options = options;
    this.random = random;
    /** @type {Map<string, {attempt: number, timer: any}>} */
    this.map = new Map();
  }

  /** Run `fn` after the key's next backoff delay (replacing a pending timer); false when `err` is final. */
  schedule(key, fn, err) {
    if (!retryable(err)) return false;
    const r = this.map.get(key) || { attempt: 0, timer: null };
    clearTimeout(r.timer);
    r.timer = setTimeout(() => {
      r.timer = null;
      fn();
    }, backoffMs(r.attempt++, this.options.retryMinMs, this.options.retryMaxMs, this.random));
    this.map.set(key, r);
    return true;
  }

  /** A retry timer is pending for `key`. */
  waiting(key) {
    return !!this.map.get(key)?.timer;
  }

  /** The key is in a failure streak (a timer is pending or the read is being retried now). */
  failing(key) {
    return this.map.has(key);
  }

  /** Cancel the pending timer but keep the attempt count (a read is starting now). */
  pause(key) {
    const r = this.map.get(key);
    if (r) clearTimeout(r.timer);
  }

  /** Success (or the object went away): forget the key. */
  done(key) {
    this.pause(key);
    this.map.delete(key);
  }

  clear() {
    for (const key of [...this.map.keys()]) this.done(key);
  }
}
