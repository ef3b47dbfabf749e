// TaskFeed: the effectful half of the task store. It wires a Client (connection JWT from
// /api/realtime/session, the server-side `task_user:` subscription, on-demand `task_detail:`
// subscriptions with tokens from /api/realtime/subscription-token) and the Status API reads to the
// pure reducer in store.js, and owns the timers: the one shared elapsed-time ticker, the STALE
// timer, the jittered low-frequency status:batchGet check while not LIVE (seed §13) and the
// backoff retries of every snapshot read. What it hands out is the public view of view.js.
//
// Snapshot rules (seed §8.3, §13.1): subscribe first, then read the snapshot - but a snapshot
// never waits for a subscription that cannot happen: when realtime is unavailable (session or
// transport failure, no subscription within snapshotWaitMs) the list and open details are read
// at once and kept as the last confirmed state (RECOVERING/STALE); once the subscription is
// established without recovery they are read again. A failed read is retried with full-jitter
// backoff until it succeeds or the feed stops.

import { StatusApi, ApiError } from './api.js';
import { jittered } from './backoff.js';
import { Client, ConfigurationError, UnauthorizedError } from './client.js';
import { ClientCode, ErrorCode } from './codes.js';
import { Emitter } from './emitter.js';
import { activeTaskIds, compareVersions, hasTicking, initialState, knownVersions, reduce, timelineGap } from './store.js';
import { Retries, retryable } from './retry.js';
import { feedTelemetry, observeClient, observeSubscribed } from './telemetry.js';
import { viewProjector } from './view.js';

const DEFAULTS = {
  maxDetailSubscriptions: 20,
  detailTokens: true,
  checkIntervalMs: 30000,
  liveCheckIntervalMs: 60000,
  staleAfterMs: 10000,
  tickMs: 1000,
  listLimit: 50,
  snapshotWaitMs: 3000,
  retryMinMs: 1000,
  retryMaxMs: 30000,
};
const BATCH = 100; // status:batchGet accepts at most 100 ids

const chunks = (ids) => Array.from({ length: Math.ceil(ids.length / BATCH) }, (_, i) => ids.slice(i * BATCH, (i + 1) * BATCH));

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
    /** The reducer's state (internal: includes buffers and baselines); `state` is the public view. */
    this.store = initialState();
    this._view = viewProjector();
    this.client = null;
    this.sessionId = '';
    this.userChannel = '';
    this.tenant = '';
    this.running = false;
    this.generation = 0;
    this.unbind = [];
    this.userSubscribed = false;
    this.userSubGen = 0;
    /** The list snapshot was read after a user-channel subscription of this client (recovery keeps it valid). */
    this.listSynced = false;
    this.userReady = false;
    this.listLoad = null;
    this.detailLoads = new Map();
    this.detailAsked = new Map();
    this.detailOrder = [];
    this.detailSubs = new Map();
    this.retries = new Retries(this.options, this.random);
    this.ticker = null;
    this.staleTimer = null;
    this.checkTimer = null;
    this.checkLive = false;
    /** Open details marked invisible (setDetailVisible): evicted first (§6.5). */
    this.hiddenDetails = new Set();
    this.snapshotTimer = null;
    this._started = null;
    /** Opt-in client telemetry (options.telemetry, docs/client-js.md "Telemetry"); null when off. */
    this.telemetry = feedTelemetry(this, options.telemetry);
    this._onVisibility = () => {
      if (this.document && this.document.visibilityState === 'visible') this.recalibrate();
      else if (this.document?.visibilityState === 'hidden') this.telemetry?.flush();
    };
    /** For React's useSyncExternalStore: both are bound, pass them as they are. */
    this.subscribe = (fn) => this.on('change', () => fn());
    this.getSnapshot = () => this.state;
  }

  /** The public state (memoized: the same object until something changes). */
  get state() {
    return this._view(this.store);
  }

  /**
   * Start following the user's tasks: read the session, connect, load the list snapshot. Resolves
   * once started (not once LIVE); rejects only on a ConfigurationError (no usable transport) or
   * an UnauthorizedError from /api/realtime/session. Idempotent; start() after stop() works.
   */
  start() {
    if (!this.running) {
      this.running = true;
      this.telemetry?.start();
      this._started = this._start(++this.generation);
    }
    return this._started;
  }

  async _start(gen) {
    const o = this.options;
    const c = new Client(o.endpoints, {
      ...(o.clientOptions || {}),
      getToken: async () => {
        const s = await this.api.session();
        if (gen === this.generation) this._adoptSession(s);
        return s.token;
      },
    });
    this.client = c;
    if (!c.endpoints.length) {
      const err = new ConfigurationError(`taskcast: no usable transport in ${c.unusable.map((e) => e.transport).join(', ')} (pass clientOptions.websocket / eventsource)`);
      this.emit('error', err);
      this.stop();
      throw err;
    }
    this._bindClient(c);
    this.document?.addEventListener?.('visibilitychange', this._onVisibility);
    this._afterChange();
    if (!this.store.list.loaded) this.dispatch({ type: 'list/loading' });
    let session = null;
    try {
      session = await this.api.session();
    } catch (err) {
      if (gen !== this.generation) return;
      this.emit('error', err);
      if (err instanceof UnauthorizedError) {
        this.stop();
        this._setConnection('STALE');
        throw err;
      }
      this._realtimeUnavailable(); // the Status API's snapshot may still answer; getToken retries the session
    }
    if (gen !== this.generation) return;
    if (session) {
      this._adoptSession(session);
      c.token = session.token;
    }
    clearTimeout(this.snapshotTimer);
    this.snapshotTimer = setTimeout(() => this._realtimeUnavailable(), o.snapshotWaitMs);
    c.connect();
  }

  /** Stop all network activity and timers; the state (last confirmed) is kept, no change is emitted. */
  stop() {
    this.running = false;
    this.generation += 1;
    this._started = null;
    for (const off of this.unbind.splice(0)) off();
    clearInterval(this.ticker);
    this.ticker = null;
    for (const t of [this.staleTimer, this.checkTimer, this.snapshotTimer]) clearTimeout(t);
    this.staleTimer = this.checkTimer = this.snapshotTimer = null;
    this.retries.clear();
    this.document?.removeEventListener?.('visibilitychange', this._onVisibility);
    for (const taskId of this.detailSubs.keys()) this.api.releaseSubscription(taskId, this.sessionId).catch(() => {});
    this.detailSubs.clear();
    if (this.client) this.client.disconnect();
    this.client = null;
    this.userSubscribed = this.userReady = this.listSynced = false;
    if (this.telemetry) {
      this.telemetry.stop();
      this.telemetry.flush();
    }
  }

  _bindClient(c) {
    const on = (event, fn) => this.unbind.push(c.on(event, fn));
    if (this.telemetry) this.unbind.push(...observeClient(c, this.telemetry));
    on('connecting', (ctx) => {
      this._lostConnection();
      if (ctx.code !== ClientCode.CONNECT_CALLED) this._realtimeUnavailable();
    });
    on('disconnected', () => {
      this._lostConnection();
      this._setConnection('STALE');
      this._realtimeUnavailable();
    });
    on('error', (ctx) => {
      if (ctx.type === 'configuration') this.emit('error', new ConfigurationError(ctx.error.message));
      if (ctx.type === 'connectToken') this._realtimeUnavailable();
    });
    on('subscribed', (ctx) => {
      if (ctx.channel !== this.userChannel) return;
      if (this.telemetry) observeSubscribed(this.telemetry, ctx);
      clearTimeout(this.snapshotTimer);
      this.userSubscribed = true;
      this.userSubGen += 1;
      if (ctx.recovered && this.listSynced) {
        this.userReady = true;
        this._updateConnection();
      } else {
        this.dispatch({ type: 'list/subscribed' });
        this._loadList();
      }
    });
    on('publication', (ctx) => {
      if (ctx.channel === this.userChannel) this.dispatch({ type: 'summary', message: ctx.data, at: this.now() });
    });
  }

  _adoptSession(session) {
    this.sessionId = session.sessionId;
    this.userChannel = session.channels[0];
    this.tenant = this.userChannel.slice(this.userChannel.indexOf(':') + 1).split('/')[0];
    if (session.maxDetailSubscriptions) {
      this.options.maxDetailSubscriptions = Math.min(this.options.maxDetailSubscriptions, session.maxDetailSubscriptions);
    }
    for (const taskId of this.detailOrder) this._subscribeDetail(taskId);
  }

  dispatch(action) {
    const prev = this.store;
    this.store = reduce(prev, action);
    if (this.store === prev) return;
    this._afterChange();
    this.emit('change', this.state, action);
  }

  /** Same as dispatch({type: 'notice/dismiss', id}). */
  dismissNotice(id) {
    this.dispatch({ type: 'notice/dismiss', id });
  }

  _afterChange() {
    const ticking = this.running && hasTicking(this.store);
    if (ticking && !this.ticker) {
      this.ticker = setInterval(() => this.emit('tick', this.now()), this.options.tickMs);
    } else if (!ticking && this.ticker) {
      clearInterval(this.ticker);
      this.ticker = null;
    }
    for (const [taskId, entry] of Object.entries(this.store.details)) {
      const after = timelineGap(this.store, taskId);
      if (after !== null) this._fetchEvents(taskId, after);
      // The summary gate is ahead and the detail channel cannot be trusted to catch up (not
      // LIVE, or not subscribed): read the detail snapshot, once per summary version (§8.2).
      const task = this.store.tasks[taskId];
      if (!this.running || !task || !entry.detail || compareVersions(task.version, entry.detail.version) <= 0) continue;
      const live = this.store.connection === 'LIVE' && this.detailSubs.get(taskId)?.state === 'subscribed';
      if (!live && this.detailAsked.get(taskId) !== task.version) {
        this.detailAsked.set(taskId, task.version);
        this._loadDetail(taskId);
      }
    }
  }

  /** Run `fn` again after a full-jitter backoff (per key: list, detail:<id>, events:<id>, ...). */
  _retry(key, fn, err) {
    if (this.running) this.retries.schedule(key, () => this.running && fn(), err);
  }

  // --- list ---------------------------------------------------------------------------------

  /** Realtime is not there (yet): read the list snapshot now instead of waiting for the subscription. */
  _realtimeUnavailable() {
    if (!this.running) return;
    clearTimeout(this.snapshotTimer);
    if (!this.store.list.loaded && !this.listLoad && !this.retries.waiting('list')) this._loadList();
    for (const [taskId, entry] of Object.entries(this.store.details)) {
      if (!entry.detail && !this.detailLoads.has(taskId) && !this.retries.waiting(`detail:${taskId}`)) this._loadDetail(taskId);
    }
  }

  /** GET /api/tasks (first page) + status:batchGet of known active tasks not on it; one at a time. */
  _loadList() {
    if (this.listLoad) {
      this.listLoad.again = true;
      return this.listLoad.promise;
    }
    this.retries.pause('list');
    const subGen = this.userSubscribed ? this.userSubGen : -1;
    const load = { again: false, promise: null };
    this.listLoad = load;
    this.dispatch({ type: 'list/loading' });
    this._updateConnection();
    load.promise = (async () => {
      const started = this.now();
      try {
        const page = await this.api.listTasks({ limit: this.options.listLimit });
        const inPage = new Set(page.items.map((t) => t.id));
        const rest = activeTaskIds(this.store).filter((id) => !inPage.has(id));
        const extra = [];
        for (const ids of chunks(rest)) extra.push(...(await this.api.batchGet({ knownVersions: knownVersions(this.store, ids) })).tasks);
        this.dispatch({ type: 'list/snapshot', tasks: [...page.items, ...extra], at: this.now(), nextCursor: page.nextCursor });
        this.telemetry?.sample('snapshotLoadMs', this.now() - started);
        this.retries.done('list');
        if (subGen !== -1 && subGen === this.userSubGen && this.userSubscribed) {
          this.listSynced = true;
          this.userReady = true;
        }
      } catch (err) {
        this.dispatch({ type: 'list/failed', error: err, retrying: this.running && retryable(err) });
        this.emit('error', err);
        this._retry('list', () => this._loadList(), err);
        this._scheduleCheck();
      } finally {
        this.listLoad = null;
        if (load.again && this.running) this._loadList();
        this._updateConnection();
      }
    })();
    return load.promise;
  }

  /** The next page of GET /api/tasks after what is loaded (state.list.hasMore). */
  async loadMore() {
    const { nextCursor, loadingMore } = this.store.list;
    if (!nextCursor || loadingMore) return;
    this.dispatch({ type: 'list/moreLoading', loading: true });
    try {
      const page = await this.api.listTasks({ limit: this.options.listLimit, cursor: nextCursor });
      this.dispatch({ type: 'list/page', tasks: page.items, nextCursor: page.nextCursor, at: this.now() });
    } catch (err) {
      this.dispatch({ type: 'list/moreLoading', loading: false });
      this.emit('error', err);
    }
  }

  /** status:batchGet of the visible non-terminal tasks (seed §13.2). */
  async check({ recalibrate = false } = {}) {
    for (const ids of chunks(activeTaskIds(this.store))) {
      const body = recalibrate ? { taskIds: ids } : { knownVersions: knownVersions(this.store, ids) };
      const res = await this.api.batchGet(body);
      this.dispatch({ type: 'list/snapshot', tasks: res.tasks, at: this.now(), final: false });
      for (const id of res.notFound || []) this.dispatch({ type: 'task/remove', taskId: id });
    }
  }

  /** Page visible again: re-read running tasks for fresh elapsedMs/asOf and open details (§9.2). */
  async recalibrate() {
    try {
      await this.check({ recalibrate: true });
      this.retries.done('recalibrate');
      for (const taskId of Object.keys(this.store.details)) this._loadDetail(taskId);
    } catch (err) {
      this.emit('error', err);
      this._retry('recalibrate', () => this.recalibrate(), err);
    }
  }

  // --- connection status ----------------------------------------------------------------------

  _lostConnection() {
    this.userSubscribed = false;
    this.userReady = false;
    if (this.store.connection !== 'STALE') this._setConnection('RECOVERING');
    this._rescheduleCheck();
    if (!this.staleTimer) {
      this.staleTimer = setTimeout(() => {
        this.staleTimer = null;
        if (this.store.connection !== 'LIVE') this._setConnection('STALE');
      }, this.options.staleAfterMs);
    }
    this._scheduleCheck();
  }

  _updateConnection() {
    const live = this.running && this.client?.state === 'connected' && this.userReady && !this.listLoad && !this.retries.failing('list');
    if (live) {
      clearTimeout(this.staleTimer);
      this.staleTimer = null;
      if (this.store.connection !== 'LIVE') {
        this._setConnection('LIVE');
        this._rescheduleCheck();
      }
    } else if (this.store.connection === 'LIVE') {
      this._setConnection('RECOVERING');
      this._rescheduleCheck();
    }
  }

  /** The connection changed between LIVE and not: the next check follows the new interval. */
  _rescheduleCheck() {
    if (this.checkTimer && this.checkLive !== (this.store.connection === 'LIVE')) {
      clearTimeout(this.checkTimer);
      this.checkTimer = null;
    }
    this._scheduleCheck();
  }

  _setConnection(status) {
    this.dispatch({ type: 'connection', status });
  }

  /**
   * The §13.2 low-frequency status:batchGet check of the non-terminal tasks: every
   * checkIntervalMs while not LIVE, and every liveCheckIntervalMs while LIVE (a publication lost
   * silently while LIVE — no gap, no disconnect — is repaired too; skipped while the page is hidden,
   * which recalibrates when it becomes visible). ±30 % jitter; an interval of 0 turns it off.
   */
  _scheduleCheck() {
    if (this.checkTimer || !this.running) return;
    const live = this.store.connection === 'LIVE';
    const interval = live ? this.options.liveCheckIntervalMs : this.options.checkIntervalMs;
    if (!(interval > 0)) return;
    this.checkLive = live;
    this.checkTimer = setTimeout(async () => {
      this.checkTimer = null;
      if (!this.running) return;
      const hidden = this.document?.visibilityState === 'hidden';
      if (!(this.store.connection === 'LIVE' && hidden)) {
        try {
          await this.check();
        } catch (err) {
          this.emit('error', err);
        }
      }
      this._scheduleCheck();
    }, jittered(interval, 0.3, this.random));
  }

  // --- details ------------------------------------------------------------------------------

  detailChannel(taskId) {
    return `task_detail:${this.tenant}/${taskId}`;
  }

  /**
   * Follow one task's detail: its `task_detail:` subscription and its snapshot (read at once
   * when realtime is not connected). Past maxDetailSubscriptions the least recently opened closes.
   */
  openDetail(taskId) {
    this.hiddenDetails.delete(taskId);
    const order = this.detailOrder.filter((x) => x !== taskId);
    order.push(taskId);
    const evicted = [];
    while (order.length > this.options.maxDetailSubscriptions) {
      // §6.5: the least recently opened *invisible* detail goes first, then the least recently opened.
      const hidden = order.findIndex((id) => this.hiddenDetails.has(id));
      evicted.push(order.splice(hidden >= 0 ? hidden : 0, 1)[0]);
    }
    this.detailOrder = order;
    for (const id of evicted) this.closeDetail(id);
    if (this.store.details[taskId]) return;
    this.dispatch({ type: 'detail/open', taskId });
    this._subscribeDetail(taskId);
    if (this.running && this.client?.state !== 'connected') this._loadDetail(taskId);
  }

  _subscribeDetail(taskId) {
    const c = this.client;
    if (!this.running || !c || !this.tenant || this.detailSubs.has(taskId)) return;
    // detailTokens false: no token; the gateway's subscribe proxy asks the Status API (docs/status-api.md).
    const getToken = async () => {
      try {
        return await this._detailToken(taskId);
      } catch (err) {
        if (err instanceof ApiError) {
          if (err.status === 401) throw Object.assign(new UnauthorizedError(err.message), { unauthorized: true });
          if (err.status === 429) throw { code: 106, message: err.code };
          if (err.status === 404 || err.status === 403) throw { code: 103, message: err.code };
        }
        throw err;
      }
    };
    const sub = c.newSubscription(this.detailChannel(taskId), this.options.detailTokens ? { getToken } : {});
    let askedAgain = false;
    this.detailSubs.set(taskId, sub);
    const loadIfMissing = () => {
      if (this.client === c && this.store.details[taskId] && !this.store.details[taskId].detail) this._loadDetail(taskId);
    };
    sub.on('subscribed', (ctx) => {
      askedAgain = false;
      if (this.telemetry) observeSubscribed(this.telemetry, ctx);
      if (!ctx.recovered) {
        this.dispatch({ type: 'detail/resubscribed', taskId });
        this._loadDetail(taskId);
      }
    });
    sub.on('publication', (ctx) => this.dispatch({ type: 'detail', message: ctx.data, at: this.now() }));
    sub.on('error', loadIfMissing);
    sub.on('unsubscribed', async (ctx) => {
      if (this.client !== c || ctx.reason === 'unsubscribe called') return;
      // The subscribe proxy's 106 (the token path's limit is handled in _detailToken): make room
      // the same way, then subscribe once more.
      if (ctx.code === ErrorCode.LIMIT_EXCEEDED && !this.options.detailTokens && !askedAgain) {
        askedAgain = true;
        if ((await this._makeRoom(taskId)) && this.detailSubs.get(taskId) === sub) {
          sub.subscribe();
          return;
        }
      }
      loadIfMissing();
      this.emit('detailClosed', { taskId, ...ctx });
    });
    sub.subscribe();
  }

  /**
   * Mark an open detail visible or not (scrolled away, a background tab of your UI). When a detail
   * must make room (maxDetailSubscriptions here, or the server's per-user DETAIL_SUBSCRIPTION_LIMIT
   * across the user's tabs), the least recently opened invisible one is closed first (seed §6.5).
   * Opening a detail marks it visible.
   */
  setDetailVisible(taskId, visible) {
    if (visible) this.hiddenDetails.delete(taskId);
    else if (this.store.details[taskId]) this.hiddenDetails.add(taskId);
  }

  /**
   * A subscription token; on 429 DETAIL_SUBSCRIPTION_LIMIT room is made (_makeRoom) and the token
   * asked for once more. The server never relaxes its limit.
   */
  async _detailToken(taskId) {
    try {
      return (await this.api.subscriptionToken(taskId, this.sessionId)).token;
    } catch (err) {
      if (!(err instanceof ApiError && err.status === 429 && (await this._makeRoom(taskId)))) throw err;
      return (await this.api.subscriptionToken(taskId, this.sessionId)).token;
    }
  }

  /**
   * Seed §6.5, on the server's detail limit (429 DETAIL_SUBSCRIPTION_LIMIT from the token path,
   * 106 from the subscribe proxy; the same per-user quota): close the least recently opened
   * invisible detail other than `taskId` and release its lease. Resolves true once one was closed
   * (ask again), false when every other open detail is visible (the refusal stands).
   */
  async _makeRoom(taskId) {
    const victim = this.detailOrder.find((id) => id !== taskId && this.hiddenDetails.has(id));
    if (!victim) return false;
    await this._closeDetail(victim);
    return true;
  }

  closeDetail(taskId) {
    this._closeDetail(taskId);
  }

  /** Close a detail; resolves once its lease is released (or the release failed). */
  _closeDetail(taskId) {
    let released = Promise.resolve();
    this.hiddenDetails.delete(taskId);
    this.detailOrder = this.detailOrder.filter((x) => x !== taskId);
    for (const key of [`detail:${taskId}`, `events:${taskId}`]) this.retries.done(key);
    this.detailAsked.delete(taskId);
    const sub = this.detailSubs.get(taskId);
    if (sub) {
      this.detailSubs.delete(taskId);
      this.client?.removeSubscription(sub);
      released = this.api.releaseSubscription(taskId, this.sessionId).catch(() => {});
    }
    this.dispatch({ type: 'detail/close', taskId });
    return released;
  }

  /** GET /api/tasks/{id}; one at a time per task, retried with backoff while the detail is open. */
  _loadDetail(taskId) {
    const cur = this.detailLoads.get(taskId);
    if (cur) {
      cur.again = true;
      return cur.promise;
    }
    const key = `detail:${taskId}`;
    this.retries.pause(key);
    const load = { again: false, promise: null };
    this.detailLoads.set(taskId, load);
    this.dispatch({ type: 'detail/loading', taskId });
    load.promise = (async () => {
      const started = this.now();
      try {
        const detail = await this.api.getTask(taskId);
        this.dispatch({ type: 'detail/snapshot', detail, at: this.now() });
        this.telemetry?.sample('snapshotLoadMs', this.now() - started);
        this.retries.done(key);
      } catch (err) {
        if (!this.store.details[taskId]) return;
        this.dispatch({ type: 'detail/failed', taskId, error: err, retrying: this.running && retryable(err) });
        this.emit('error', err);
        this._retry(key, () => this.store.details[taskId] && this._loadDetail(taskId), err);
      } finally {
        this.detailLoads.delete(taskId);
        if (load.again && this.running && this.store.details[taskId]) this._loadDetail(taskId);
      }
    })();
    return load.promise;
  }

  async _fetchEvents(taskId, after) {
    this.dispatch({ type: 'detail/eventsRequested', taskId, after });
    try {
      const page = await this.api.events(taskId, after);
      this.dispatch({ type: 'detail/events', taskId, page });
      this.retries.done(`events:${taskId}`);
    } catch (err) {
      this.dispatch({ type: 'detail/eventsFailed', taskId });
      this.emit('error', err);
      this._retry(`events:${taskId}`, () => this.dispatch({ type: 'detail/eventsRetry', taskId }), err);
    }
  }
}
