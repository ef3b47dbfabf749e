// TaskFeed: the effectful half of the task store. It wires a Client (connection JWT from
// /api/realtime/session, the server-side `task_user:` subscription, on-demand `task_detail:`
// subscriptions with tokens from /api/realtime/subscription-token) and the Status API reads to the
// pure reducer in store.js, and owns the timers: the one shared elapsed-time ticker, the STALE
// timer and the jittered low-frequency status:batchGet check while not LIVE (seed §13).

import { StatusApi, ApiError } from './api.js';
import { jittered } from './backoff.js';
import { Client, UnauthorizedError } from './client.js';
import { Emitter } from './emitter.js';
import {
  activeTaskIds,
  hasTicking,
  initialState,
  knownVersions,
  lruTouch,
  reduce,
  timelineGap,
} from './store.js';

const DEFAULTS = {
  maxDetailSubscriptions: 20,
  checkIntervalMs: 30000,
  staleAfterMs: 10000,
  tickMs: 1000,
  listLimit: 50,
};

export class TaskFeed extends Emitter {
  /**
   * @param {object} options see index.d.ts TaskFeedOptions
   */
  constructor(options) {
    super();
    this.options = { ...DEFAULTS, ...options };
    this.api = options.api instanceof StatusApi ? options.api : new StatusApi(options.api || {});
    this.now = options.now || (() => globalThis.performance.now());
    this.random = options.random || Math.random;
    this.document = options.document !== undefined ? options.document : globalThis.document;
    this.state = initialState();
    this.client = null;
    this.sessionId = '';
    this.userChannel = '';
    this.tenant = '';
    this.userReady = false;
    this.resyncing = 0;
    this.everLive = false;
    this.detailOrder = [];
    this.detailSubs = new Map();
    this.ticker = null;
    this.staleTimer = null;
    this.checkTimer = null;
    this.stopped = false;
    this._onVisibility = () => {
      if (this.document && this.document.visibilityState === 'visible') this.recalibrate();
    };
  }

  /** Fetch a session, connect, and start following the user's tasks. */
  async start() {
    const session = await this.api.session();
    this._adoptSession(session);
    const o = this.options;
    const endpoints = o.endpoints;
    this.client = new Client(endpoints, {
      ...(o.clientOptions || {}),
      token: session.token,
      getToken: async () => {
        const s = await this.api.session();
        this._adoptSession(s);
        return s.token;
      },
    });
    const c = this.client;
    c.on('connecting', () => this._lostConnection());
    c.on('disconnected', () => {
      this.userReady = false;
      this._setConnection('STALE');
      this._scheduleCheck();
    });
    c.on('subscribed', (ctx) => {
      if (ctx.channel !== this.userChannel) return;
      if (ctx.recovered) {
        this.userReady = true;
        this._updateConnection();
      } else {
        this._loadList();
      }
    });
    c.on('publication', (ctx) => {
      if (ctx.channel === this.userChannel) this.dispatch({ type: 'summary', message: ctx.data, at: this.now() });
    });
    this.document?.addEventListener?.('visibilitychange', this._onVisibility);
    c.connect();
  }

  stop() {
    this.stopped = true;
    clearInterval(this.ticker);
    this.ticker = null;
    clearTimeout(this.staleTimer);
    clearTimeout(this.checkTimer);
    this.document?.removeEventListener?.('visibilitychange', this._onVisibility);
    if (this.client) this.client.disconnect();
  }

  _adoptSession(session) {
    this.sessionId = session.sessionId;
    this.userChannel = session.channels[0];
    this.tenant = this.userChannel.slice(this.userChannel.indexOf(':') + 1).split('/')[0];
    if (session.maxDetailSubscriptions) {
      this.options.maxDetailSubscriptions = Math.min(this.options.maxDetailSubscriptions, session.maxDetailSubscriptions);
    }
  }

  dispatch(action) {
    const prev = this.state;
    this.state = reduce(prev, action);
    if (this.state === prev) return;
    this._afterChange();
    this.emit('change', this.state, action);
  }

  _afterChange() {
    const ticking = hasTicking(this.state);
    if (ticking && !this.ticker && !this.stopped) {
      this.ticker = setInterval(() => this.emit('tick', this.now()), this.options.tickMs);
    } else if (!ticking && this.ticker) {
      clearInterval(this.ticker);
      this.ticker = null;
    }
    for (const taskId of Object.keys(this.state.details)) {
      const after = timelineGap(this.state, taskId);
      if (after !== null) this._fetchEvents(taskId, after);
    }
  }

  // --- list ---------------------------------------------------------------------------------

  async _loadList() {
    this.resyncing += 1;
    this._updateConnection();
    try {
      if (!this.userReady) this.dispatch({ type: 'list/subscribed' });
      const page = await this.api.listTasks({ limit: this.options.listLimit });
      const inPage = new Set(page.items.map((t) => t.id));
      // Tasks known locally but not on the first page: one batchGet re-reads them too.
      const rest = activeTaskIds(this.state).filter((id) => !inPage.has(id));
      let extra = [];
      if (rest.length) extra = (await this.api.batchGet({ knownVersions: knownVersions(this.state, rest.slice(0, 100)) })).tasks;
      this.dispatch({ type: 'list/snapshot', tasks: [...page.items, ...extra], at: this.now() });
      this.userReady = true;
      for (const taskId of Object.keys(this.state.details)) this._loadDetail(taskId);
    } catch (err) {
      this.emit('error', err);
      this._scheduleCheck();
    } finally {
      this.resyncing -= 1;
      this._updateConnection();
    }
  }

  /** status:batchGet of the visible non-terminal tasks (seed §13.2). */
  async check({ recalibrate = false } = {}) {
    const ids = activeTaskIds(this.state).slice(0, 100);
    if (!ids.length) return;
    const body = recalibrate ? { taskIds: ids } : { knownVersions: knownVersions(this.state, ids) };
    const res = await this.api.batchGet(body);
    this.dispatch({ type: 'list/snapshot', tasks: res.tasks, at: this.now(), final: false });
    for (const id of res.notFound || []) this.dispatch({ type: 'task/remove', taskId: id });
  }

  /** Page visible again: re-read running tasks for fresh elapsedMs/asOf and open details (§9.2). */
  async recalibrate() {
    try {
      await this.check({ recalibrate: true });
      for (const taskId of Object.keys(this.state.details)) this._loadDetail(taskId);
    } catch (err) {
      this.emit('error', err);
    }
  }

  // --- connection status ----------------------------------------------------------------------

  _lostConnection() {
    this.userReady = false;
    if (this.state.connection !== 'STALE') this._setConnection('RECOVERING');
    if (!this.staleTimer) {
      this.staleTimer = setTimeout(() => {
        this.staleTimer = null;
        if (this.state.connection !== 'LIVE') this._setConnection('STALE');
      }, this.options.staleAfterMs);
    }
    this._scheduleCheck();
  }

  _updateConnection() {
    const live = this.client && this.client.state === 'connected' && this.userReady && this.resyncing === 0;
    if (live) {
      clearTimeout(this.staleTimer);
      this.staleTimer = null;
      clearTimeout(this.checkTimer);
      this.checkTimer = null;
      this._setConnection('LIVE');
    } else if (this.state.connection === 'LIVE') {
      this._setConnection('RECOVERING');
    }
  }

  _setConnection(status) {
    this.dispatch({ type: 'connection', status });
  }

  _scheduleCheck() {
    if (this.checkTimer || this.stopped) return;
    this.checkTimer = setTimeout(async () => {
      this.checkTimer = null;
      if (this.state.connection === 'LIVE' || this.stopped) return;
      try {
        await this.check();
      } catch (err) {
        this.emit('error', err);
      }
      this._scheduleCheck();
    }, jittered(this.options.checkIntervalMs, 0.3, this.random));
  }

  // --- details ------------------------------------------------------------------------------

  detailChannel(taskId) {
    return `task_detail:${this.tenant}/${taskId}`;
  }

  /** Follow one task's detail channel; past maxDetailSubscriptions the least recently opened closes. */
  openDetail(taskId) {
    const { order, evicted } = lruTouch(this.detailOrder, taskId, this.options.maxDetailSubscriptions);
    this.detailOrder = order;
    for (const id of evicted) this.closeDetail(id);
    if (this.detailSubs.has(taskId)) return;
    this.dispatch({ type: 'detail/open', taskId });
    const sub = this.client.newSubscription(this.detailChannel(taskId), {
      getToken: async () => {
        try {
          return (await this.api.subscriptionToken(taskId, this.sessionId)).token;
        } catch (err) {
          if (err instanceof ApiError) {
            if (err.status === 401) throw Object.assign(new UnauthorizedError(err.message), { unauthorized: true });
            if (err.status === 429) throw { code: 106, message: err.code };
            if (err.status === 404 || err.status === 403) throw { code: 103, message: err.code };
          }
          throw err;
        }
      },
    });
    this.detailSubs.set(taskId, sub);
    sub.on('subscribed', (ctx) => {
      if (!ctx.recovered) {
        this.dispatch({ type: 'detail/resubscribed', taskId });
        this._loadDetail(taskId);
      }
    });
    sub.on('publication', (ctx) => this.dispatch({ type: 'detail', message: ctx.data, at: this.now() }));
    sub.on('unsubscribed', (ctx) => this.emit('detailClosed', { taskId, ...ctx }));
    sub.subscribe();
  }

  closeDetail(taskId) {
    this.detailOrder = this.detailOrder.filter((x) => x !== taskId);
    const sub = this.detailSubs.get(taskId);
    if (sub) {
      this.detailSubs.delete(taskId);
      this.client.removeSubscription(sub);
      this.api.releaseSubscription(taskId, this.sessionId).catch(() => {});
    }
    this.dispatch({ type: 'detail/close', taskId });
  }

  async _loadDetail(taskId) {
    try {
      const detail = await this.api.getTask(taskId);
      this.dispatch({ type: 'detail/snapshot', detail, at: this.now() });
    } catch (err) {
      this.emit('error', err);
    }
  }

  async _fetchEvents(taskId, after) {
    this.dispatch({ type: 'detail/eventsRequested', taskId, after });
    try {
      const page = await this.api.events(taskId, after);
      this.dispatch({ type: 'detail/events', taskId, page });
    } catch (err) {
      this.dispatch({ type: 'detail/eventsFailed', taskId });
      this.emit('error', err);
    }
  }
}
