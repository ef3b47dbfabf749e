// The Status API's user endpoints (docs/status-api.md): the authoritative snapshots, the timeline,
// status:batchGet and the realtime tokens. fetch and the auth headers are injected.

import { UnauthorizedError } from './client.js';

export class ApiError extends Error {
  constructor(status, body) {
    const err = body?.error || {};
    super(err.message || `HTTP ${status}`);
    this.name = 'ApiError';
    this.status = status;
    this.code = err.code || `HTTP_${status}`;
    this.retryable = err.retryable === true || status >= 500 || status === 429;
  }
}

export class StatusApi {
  /**
   * @param {{baseUrl?: string, fetch?: typeof fetch,
   *   headers?: Record<string,string> | (() => Record<string,string> | Promise<Record<string,string>>)}} [options]
   */
  constructor(options = {}) {
    this.baseUrl = (options.baseUrl || '').replace(/\/$/, '');
    this.fetch = options.fetch || globalThis.fetch.bind(globalThis);
    this.headers = options.headers || {};
  }

  async request(method, path, body, more = {}) {
    const extra = typeof this.headers === 'function' ? await this.headers() : this.headers;
    const init = { ...more, method, headers: { Accept: 'application/json', ...extra } };
    if (body !== undefined) {
      init.headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    const res = await this.fetch(this.baseUrl + path, init);
    const data = await res.json().catch(() => null);
    if (!res.ok) throw new ApiError(res.status, data);
    return data;
  }

  listTasks({ limit = 50, cursor } = {}) {
    const q = new URLSearchParams({ limit: String(limit) });
    if (cursor) q.set('cursor', cursor);
    return this.request('GET', `/api/tasks?${q}`);
  }

  getTask(taskId) {
    return this.request('GET', `/api/tasks/${encodeURIComponent(taskId)}`);
  }

  events(taskId, afterTaskVersion, limit = 100) {
    const q = new URLSearchParams({ afterTaskVersion: String(afterTaskVersion), limit: String(limit) });
    return this.request('GET', `/api/tasks/${encodeURIComponent(taskId)}/events?${q}`);
  }

  batchGet(body) {
    return this.request('POST', '/api/tasks/status:batchGet', body);
  }

  /** A connection JWT for the gateway; a 401 becomes UnauthorizedError (stop reconnecting). */
  async session() {
    try {
      return await this.request('GET', '/api/realtime/session');
    } catch (err) {
      if (err instanceof ApiError && (err.status === 401 || err.status === 403)) throw new UnauthorizedError(err.message);
      throw err;
    }
  }

  subscriptionToken(taskId, sessionId) {
    return this.request('POST', '/api/realtime/subscription-token', { taskId, sessionId });
  }

  releaseSubscription(taskId, sessionId) {
    return this.request('POST', '/api/realtime/subscription-release', { taskId, sessionId });
  }

  /**
   * A subscription token for a broadcast channel (seed §6.6): scope 'project' (with projectId, a
   * project of the user's), 'tenant' (the user's own) or 'system'. The server names the channel.
   */
  broadcastToken(scope, projectId) {
    return this.request('POST', '/api/realtime/broadcast-token', projectId ? { scope, projectId } : { scope });
  }

  /** One telemetry report (src/telemetry.js); `keepalive` lets the last one outlive the page. */
  telemetry(report) {
    return this.request('POST', '/api/telemetry/client', report, { keepalive: true });
  }
}
