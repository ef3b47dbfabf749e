// In-process stand-ins for TaskFeed tests that need outages on demand: a fake Status API behind
// the real StatusApi (an injected fetch routing the user endpoints) and a fake gateway behind the
// real Client (an injected WebSocket class that speaks the protocol's connect/subscribe replies).
// Both can be taken down and brought back; every request is recorded.

import { detailMessage, summaryTask } from '../fixtures.js';

const json = (status, body) => new Response(JSON.stringify(body), { status, headers: { 'content-type': 'application/json' } });

/**
 * The Status API of one user (t1/u1) holding `tasks` (summary objects) and `details` (by id).
 * `api.down = true` makes every request fail like a refused connection; `api.failNext(re, n)`
 * answers the next n requests whose "METHOD path" matches `re` with a 503.
 */
export function fakeStatusApi({ tasks = [], details = {} } = {}) {
  const api = {
    tasks: [...tasks],
    details: { ...details },
    calls: [],
    down: false,
    sessionStatus: 200,
    failures: [],
    /** Telemetry reports received (POST /api/telemetry/client); telemetryStatus answers them. */
    telemetry: [],
    telemetryStatus: 204,
    /** The per-user detail quota (the server's, shared with the user's other tabs) and its leases. */
    detailLimit: Infinity,
    leases: new Set(),
    channel: 'task_user:t1/u1',
    failNext(re, n = 1) {
      api.failures.push({ re, n });
    },
    count(re) {
      return api.calls.filter((c) => re.test(c)).length;
    },
    options: null,
  };
  api.options = {
    baseUrl: 'http://status.test',
    fetch: async (url, init = {}) => {
      const u = new URL(String(url));
      const method = init.method || 'GET';
      const call = `${method} ${u.pathname}${u.search}`;
      api.calls.push(call);
      if (api.down) throw new TypeError('fetch failed');
      const f = api.failures.find((x) => x.n > 0 && x.re.test(call));
      if (f) {
        f.n -= 1;
        return json(503, { error: { code: 'UNAVAILABLE', message: 'try again', retryable: true } });
      }
      const body = init.body ? JSON.parse(init.body) : null;
      const p = u.pathname;
      if (p === '/api/realtime/session') {
        if (api.sessionStatus !== 200) return json(api.sessionStatus, { error: { code: 'UNAUTHENTICATED', message: 'sign in again' } });
        return json(200, { token: 'conn-token', expiresAt: 0, sessionId: 's1', channels: [api.channel] });
      }
      if (p === '/api/realtime/subscription-token') {
        if (!api.leases.has(body.taskId) && api.leases.size >= api.detailLimit) {
          return json(429, { error: { code: 'DETAIL_SUBSCRIPTION_LIMIT', message: 'limit', retryable: false } });
        }
        api.leases.add(body.taskId);
        return json(200, { token: `sub-${body.taskId}`, channel: '', expiresAt: 0 });
      }
      if (p === '/api/realtime/subscription-release') {
        api.leases.delete(body.taskId);
        return json(200, { released: true });
      }
      if (p === '/api/telemetry/client') {
        api.telemetry.push(body);
        return api.telemetryStatus === 204 ? new Response(null, { status: 204 }) : json(api.telemetryStatus, { error: { code: 'X', message: 'no' } });
      }
      if (p === '/api/tasks') {
        const limit = Number(u.searchParams.get('limit'));
        const start = Number(u.searchParams.get('cursor') || 0);
        const items = api.tasks.slice(start, start + limit);
        return json(200, { items, nextCursor: start + limit < api.tasks.length ? String(start + limit) : null });
      }
      if (p === '/api/tasks/status:batchGet') {
        const ids = body.taskIds || Object.keys(body.knownVersions || {});
        return json(200, { tasks: api.tasks.filter((t) => ids.includes(t.id)), unchanged: [], notFound: [], asOf: '' });
      }
      const events = p.match(/^\/api\/tasks\/([^/]+)\/events$/);
      if (events) {
        const after = u.searchParams.get('afterTaskVersion');
        const d = api.details[events[1]];
        return json(200, { taskId: events[1], taskVersion: d.version, afterTaskVersion: after, events: [], nextAfterTaskVersion: after, hasMore: false, purged: false, oldestAvailableTaskVersion: '1' });
      }
      const one = p.match(/^\/api\/tasks\/([^/]+)$/);
      if (one) {
        const d = api.details[one[1]];
        return d ? json(200, d) : json(404, { error: { code: 'TASK_NOT_FOUND', message: 'no such task' } });
      }
      return json(404, { error: { code: 'NOT_FOUND', message: p } });
    },
  };
  /** Put task `id` at `version` of `last` into both the list and the detail read. */
  api.set = (id, version, last) => {
    const t = summaryTask(id, version, last);
    const i = api.tasks.findIndex((x) => x.id === id);
    if (i >= 0) api.tasks[i] = t;
    else api.tasks.unshift(t);
    api.details[id] = detailMessage(id, version, last, { snapshot: true });
    return t;
  };
  return api;
}

/**
 * A gateway speaking just enough of the protocol: connect (server-side `channel` subscription,
 * never recovered), subscribe (detail channels), and publications. `gw.up = false` refuses new
 * sockets (close 1006 before open); `gw.dropAll()` closes the open ones. `gw.authorize(channel,
 * token)`, when set, answers a subscribe first: an `{code, message}` refuses it (a subscribe proxy).
 */
export function fakeGateway(channel = 'task_user:t1/u1') {
  // `recovery`: extra fields of the server-side sub in the connect reply, e.g. {was_recovering: true, recovered: false}.
  const gw = { up: true, sockets: [], connects: 0, offset: 0, subscribed: new Set(), recovery: {} };
  class FakeWebSocket {
    constructor(url) {
      this.url = url;
      this.readyState = 0;
      gw.sockets.push(this);
      queueMicrotask(() => {
        if (this.readyState !== 0) return;
        if (!gw.up) {
          this.readyState = 3;
          this.onclose?.({ code: 1006, reason: '' });
          return;
        }
        this.readyState = 1;
        this.onopen?.();
      });
    }
    send(frame) {
      for (const line of frame.split('\n')) {
        const cmd = JSON.parse(line);
        if (cmd.connect) {
          gw.connects += 1;
          this.reply({ id: cmd.id, connect: { client: `c${gw.connects}`, subs: { [channel]: { recoverable: true, epoch: 'E', offset: gw.offset, ...gw.recovery } } } });
        } else if (cmd.subscribe) {
          const refused = gw.authorize?.(cmd.subscribe.channel, cmd.subscribe.token);
          if (refused) {
            this.reply({ id: cmd.id, error: refused });
            continue;
          }
          gw.subscribed.add(cmd.subscribe.channel);
          this.reply({ id: cmd.id, subscribe: { recoverable: true, epoch: 'E', offset: 0 } });
        } else if (cmd.unsubscribe) {
          gw.subscribed.delete(cmd.unsubscribe.channel);
          this.reply({ id: cmd.id, unsubscribe: {} });
        } else if (cmd.id) {
          this.reply({ id: cmd.id });
        }
      }
    }
    reply(obj) {
      queueMicrotask(() => {
        if (this.readyState === 1) this.onmessage?.({ data: JSON.stringify(obj) });
      });
    }
    close() {
      this.readyState = 3;
    }
  }
  gw.WebSocket = FakeWebSocket;
  gw.open = () => gw.sockets.filter((s) => s.readyState === 1);
  gw.dropAll = () => {
    for (const s of gw.open()) {
      s.readyState = 3;
      s.onclose?.({ code: 1006, reason: '' });
    }
  };
  gw.publish = (ch, data) => {
    gw.offset += 1;
    for (const s of gw.open()) s.reply({ push: { channel: ch, pub: { data, offset: gw.offset } } });
  };
  return gw;
}

/** Resolves when `cond()` is truthy; polls every few ms, fails after `timeoutMs`. */
export async function until(cond, what = 'condition', timeoutMs = 10000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = cond();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timeout waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 2));
  }
}

/** TaskFeed options for the fakes: fast retries and timers (the waits are on conditions). */
export function feedOptions(api, gw, extra = {}) {
  return {
    api: api.options,
    endpoints: 'ws://gateway.test/connection/websocket',
    clientOptions: { websocket: gw?.WebSocket, minReconnectDelay: 5, maxReconnectDelay: 20 },
    document: null,
    retryMinMs: 5,
    retryMaxMs: 20,
    staleAfterMs: 30,
    checkIntervalMs: 50,
    snapshotWaitMs: 50,
    tickMs: 5,
    ...extra,
  };
}
