// One client-side channel subscription: unsubscribed → subscribing → subscribed, its stream
// position {epoch, offset} for recovery (PROTOCOL.md §3.3–3.4), and its token (subscription JWT
// from getToken, refreshed with sub_refresh before it expires, §5.4).

import { backoffMs } from './backoff.js';
import { ErrorCode, UnsubscribeCode, isTemporaryError } from './codes.js';
import { Emitter } from './emitter.js';

export class Subscription extends Emitter {
  /**
   * @param {import('./client.js').Client} client
   * @param {string} channel
   * @param {{token?: string, getToken?: (ctx: {channel: string}) => Promise<string>,
   *   minResubscribeDelay?: number, maxResubscribeDelay?: number}} [options]
   */
  constructor(client, channel, options = {}) {
    super();
    this.client = client;
    this.channel = channel;
    this.state = 'unsubscribed';
    this.token = options.token || '';
    this.getToken = options.getToken;
    this.minDelay = options.minResubscribeDelay ?? 500;
    this.maxDelay = options.maxResubscribeDelay ?? 20000;
    /** @type {{epoch: string, offset: number} | null} */
    this.position = null;
    this.recoverable = false;
    this.attempts = 0;
    this.timer = null;
    this.refreshTimer = null;
    this.inflight = false;
  }

  subscribe() {
    if (this.state !== 'unsubscribed') return;
    this._setState('subscribing', { code: 0, reason: 'subscribe called' });
    this.client._subscriptionWanted(this);
  }

  unsubscribe() {
    if (this.state === 'unsubscribed') return;
    const wasSubscribed = this.state === 'subscribed';
    this._clearTimers();
    this._setState('unsubscribed', { code: 0, reason: 'unsubscribe called' });
    if (wasSubscribed) this.client._sendUnsubscribe(this.channel);
  }

  /** Called by the client when the connection is ready (or again after a reconnect). */
  async _send() {
    if (this.state !== 'subscribing' || this.inflight) return;
    this.inflight = true;
    try {
      if (!this.token && this.getToken) {
        this.token = await this.getToken({ channel: this.channel });
      }
      if (this.state !== 'subscribing' || !this.client._isConnected()) return;
      const req = { channel: this.channel };
      if (this.token) req.token = this.token;
      if (this.recoverable && this.position) {
        req.recover = true;
        if (this.position.epoch) req.epoch = this.position.epoch;
        if (this.position.offset) req.offset = this.position.offset;
      }
      const reply = await this.client._call({ subscribe: req });
      if (this.state !== 'subscribing') return;
      this._subscribed(reply.subscribe || {});
    } catch (err) {
      this._failed(err);
    } finally {
      this.inflight = false;
    }
  }

  _subscribed(res) {
    this.attempts = 0;
    const wasRecovering = res.was_recovering === true;
    const recovered = res.recovered === true;
    this.recoverable = res.recoverable === true;
    if (this.recoverable || res.positioned) {
      this.position = { epoch: res.epoch || '', offset: res.offset || 0 };
    }
    this._setState('subscribed', {
      channel: this.channel,
      recovered,
      wasRecovering,
      recoverable: this.recoverable,
      streamPosition: this.position ? { ...this.position } : undefined,
    });
    for (const pub of res.publications || []) this._publication(pub);
    if (res.expires && res.ttl) this._scheduleRefresh(res.ttl);
  }

  _failed(err) {
    if (this.state !== 'subscribing') return;
    const error = err && typeof err.code === 'number' ? err : { code: 0, message: String(err) };
    if (error.code === ErrorCode.TOKEN_EXPIRED) this.token = '';
    if (error.code === ErrorCode.UNRECOVERABLE_POSITION) this.position = null;
    this.emit('error', { channel: this.channel, error });
    if (error.unauthorized) {
      this._setState('unsubscribed', { code: 1, reason: 'unauthorized' });
    } else if (isTemporaryError(error) || error.transport) {
      this._retryLater();
    } else {
      this._setState('unsubscribed', { code: error.code, reason: error.message || 'subscribe error' });
    }
  }

  _retryLater() {
    clearTimeout(this.timer);
    const delay = backoffMs(this.attempts++, this.minDelay, this.maxDelay, this.client.random);
    this.timer = setTimeout(() => this._send(), delay);
  }

  _publication(pub) {
    if (typeof pub.offset === 'number' && this.position) this.position.offset = pub.offset;
    this.emit('publication', { channel: this.channel, data: pub.data, offset: pub.offset, tags: pub.tags });
  }

  /** Server unsubscribe push (PROTOCOL.md §2.2): >= 2500 resubscribes, else final. */
  _serverUnsubscribe(code, reason) {
    if (code >= UnsubscribeCode.INSUFFICIENT_STATE) {
      if (code === UnsubscribeCode.EXPIRED || code === UnsubscribeCode.STATE_INVALIDATED) this.token = '';
      if (code === UnsubscribeCode.STATE_INVALIDATED) this.position = null;
      this._clearTimers();
      this._setState('subscribing', { code, reason });
      this._send();
    } else {
      this._clearTimers();
      this._setState('unsubscribed', { code, reason });
    }
  }

  /** The connection dropped: go back to subscribing, keep the position for recovery. */
  _connectionLost() {
    if (this.state === 'subscribed') {
      this._clearTimers();
      this._setState('subscribing', { code: 1, reason: 'transport closed' });
    }
    this.inflight = false;
  }

  _scheduleRefresh(ttlSeconds) {
    clearTimeout(this.refreshTimer);
    this.refreshTimer = setTimeout(() => this._refresh(), ttlSeconds * 1000);
  }

  async _refresh() {
    if (this.state !== 'subscribed' || !this.getToken) return;
    try {
      const token = await this.getToken({ channel: this.channel });
      if (!token) return;
      this.token = token;
      const reply = await this.client._call({ sub_refresh: { channel: this.channel, token } });
      const res = reply.sub_refresh || {};
      if (res.expires && res.ttl) this._scheduleRefresh(res.ttl);
    } catch (err) {
      if (err && err.unauthorized) {
        this._setState('unsubscribed', { code: 1, reason: 'unauthorized' });
        return;
      }
      if (err && typeof err.code === 'number' && !isTemporaryError(err) && !err.transport) {
        this._setState('unsubscribed', { code: err.code, reason: err.message });
        return;
      }
      clearTimeout(this.refreshTimer);
      this.refreshTimer = setTimeout(() => this._refresh(), 10000 + this.client.random() * 10000);
    }
  }

  _clearTimers() {
    clearTimeout(this.timer);
    clearTimeout(this.refreshTimer);
  }

  _setState(state, ctx) {
    this.state = state;
    this.emit('state', state);
    this.emit(state, { channel: this.channel, ...ctx });
  }
}
