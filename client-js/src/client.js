// The connection state machine: disconnected → connecting → connected over the Centrifugo client
// protocol v2 JSON (PROTOCOL.md §1). It owns the transport list (WebSocket first, SSE /
// HTTP-streaming emulation as fallbacks tried only while no transport has ever opened, like
// centrifuge-js), full-jitter reconnects, the server ping watchdog, token refresh, server-side
// subscriptions (the `channels` claim) with their recovery positions, and client-side
// Subscriptions. It never interprets publication data.

import { backoffMs } from './backoff.js';
import { ClientCode, ErrorCode, isTemporaryError, isTerminalDisconnect } from './codes.js';
import { Emitter } from './emitter.js';
import { Subscription } from './subscription.js';
import { HttpStreamTransport, SseTransport } from './transport-sse.js';
import { WebSocketTransport } from './transport-ws.js';

/**
 * No usable transport: the endpoints name transports whose implementation is missing (Node 20 has
 * no WebSocket or EventSource: pass `websocket: WebSocket` from `ws`, `eventsource`), or an
 * unknown transport. Reported once as an `error` event; the client never retries it.
 */
export class ConfigurationError extends Error {
  constructor(message) {
    super(message);
    this.name = 'ConfigurationError';
    this.code = 'NO_TRANSPORT';
  }
}

/** Thrown by a getToken callback to stop reconnecting: the client goes `disconnected` with code 1. */
export class UnauthorizedError extends Error {
  constructor(message = 'unauthorized') {
    super(message);
    this.name = 'UnauthorizedError';
  }
}

const DEFAULTS = {
  name: 'taskcast-js',
  timeout: 5000,
  minReconnectDelay: 500,
  maxReconnectDelay: 20000,
  maxServerPingDelay: 10000,
};

export class Client extends Emitter {
  /**
   * @param {string | Array<{transport: 'websocket'|'sse'|'http_stream', endpoint: string}>} endpoints
   * @param {object} [options] see index.d.ts ClientOptions
   */
  constructor(endpoints, options = {}) {
    super();
    const all = typeof endpoints === 'string' ? [{ transport: 'websocket', endpoint: endpoints }] : endpoints;
    if (!all.length) throw new Error('taskcast: no endpoints');
    this.options = { ...DEFAULTS, ...options };
    this.token = options.token || '';
    this.getToken = options.getToken;
    this.random = options.random || Math.random;
    this.WebSocket = options.websocket || globalThis.WebSocket;
    this.EventSource = options.eventsource || globalThis.EventSource;
    this.fetch = options.fetch || globalThis.fetch?.bind(globalThis);
    this.emulationEndpoint = options.emulationEndpoint || '/emulation';
    /** Endpoints whose transport has an implementation here; the others are configuration errors. */
    this.endpoints = all.filter((ep) => this._implemented(ep.transport));
    this.unusable = all.filter((ep) => !this.endpoints.includes(ep));
    this.state = 'disconnected';
    this.transport = null;
    this.transportIndex = 0;
    this.transportLocked = false;
    this.triedInRound = 0;
    this.attempts = 0;
    this.nextId = 1;
    this.connectId = 0;
    /** @type {Map<number, {resolve: Function, reject: Function, timer: any}>} */
    this.pending = new Map();
    /** @type {Map<string, Subscription>} */
    this.subs = new Map();
    /** Server-side subscriptions and their stream positions, for ConnectRequest.subs recovery. */
    /** @type {Map<string, {epoch: string, offset: number, recoverable: boolean}>} */
    this.serverSubs = new Map();
    this.reconnectTimer = null;
    this.pingTimer = null;
    this.refreshTimer = null;
    this.pingDelayMs = 0;
    this.sendPong = false;
    this.clientId = '';
    this.generation = 0;
  }

  connect() {
    if (this.state !== 'disconnected') return;
    if (this.unusable.length) {
      const names = this.unusable.map((ep) => ep.transport).join(', ');
      this.emit('error', { type: 'configuration', error: { code: 0, message: `no implementation for transport ${names} (pass options.websocket / options.eventsource / options.fetch)` } });
    }
    if (!this.endpoints.length) {
      this._setState('disconnected', { code: ClientCode.CONFIGURATION, reason: 'no usable transport' });
      return;
    }
    this._setState('connecting', { code: ClientCode.CONNECT_CALLED, reason: 'connect called' });
    this._open();
  }

  disconnect() {
    this._teardown();
    this.attempts = 0;
    if (this.state !== 'disconnected') {
      this._setState('disconnected', { code: ClientCode.DISCONNECT_CALLED, reason: 'disconnect called' });
    }
  }

  /** Resolves once connected; rejects after `timeoutMs` or when the client gives up. */
  ready(timeoutMs = this.options.timeout) {
    if (this.state === 'connected') return Promise.resolve();
    return new Promise((resolve, reject) => {
      const offs = [];
      const done = (fn, arg) => {
        clearTimeout(timer);
        for (const off of offs) off();
        fn(arg);
      };
      const timer = setTimeout(() => done(reject, new Error('taskcast: ready timeout')), timeoutMs);
      offs.push(this.on('connected', () => done(resolve)));
      offs.push(this.on('disconnected', (ctx) => done(reject, Object.assign(new Error(ctx.reason), ctx))));
    });
  }

  /** A client-side subscription (call `.subscribe()` on it); one per channel. */
  newSubscription(channel, options) {
    if (this.subs.has(channel)) throw new Error(`taskcast: already have a subscription to ${channel}`);
    const sub = new Subscription(this, channel, options);
    this.subs.set(channel, sub);
    return sub;
  }

  getSubscription(channel) {
    return this.subs.get(channel) || null;
  }

  removeSubscription(sub) {
    if (!sub) return;
    sub.unsubscribe();
    this.subs.delete(sub.channel);
  }

  get transportName() {
    return this.transport ? this.transport.name : '';
  }

  // --- connection -------------------------------------------------------------------------

  _implemented(transport) {
    if (transport === 'websocket') return !!this.WebSocket;
    if (transport === 'sse') return !!this.EventSource && !!this.fetch;
    return transport === 'http_stream' && !!this.fetch;
  }

  _makeTransport(ep) {
    switch (ep.transport) {
      case 'websocket':
        return new WebSocketTransport(ep.endpoint, this.WebSocket);
      case 'sse':
        return new SseTransport(ep.endpoint, this.emulationEndpoint, this.EventSource, this.fetch);
      case 'http_stream':
        return new HttpStreamTransport(ep.endpoint, this.emulationEndpoint, this.fetch);
      default:
        throw new Error(`taskcast: unknown transport ${ep.transport}`);
    }
  }

  async _open() {
    const generation = ++this.generation;
    if (!this.token && this.getToken) {
      try {
        this.token = (await this.getToken({})) || '';
      } catch (err) {
        if (generation !== this.generation || this.state !== 'connecting') return;
        if (err instanceof UnauthorizedError || err?.name === 'UnauthorizedError') {
          this._teardown();
          this._setState('disconnected', { code: ClientCode.UNAUTHORIZED, reason: 'unauthorized' });
          return;
        }
        this.emit('error', { type: 'connectToken', error: { code: 0, message: String(err) } });
        this._scheduleReconnect();
        return;
      }
      if (generation !== this.generation || this.state !== 'connecting') return;
    }
    const ep = this.endpoints[this.transportIndex];
    let transport;
    try {
      transport = this._makeTransport(ep);
    } catch (err) {
      // A configuration error is not retried (it would fail the same way forever).
      this.emit('error', { type: 'configuration', error: { code: 0, message: String(err.message || err) } });
      this._teardown();
      this._setState('disconnected', { code: ClientCode.CONFIGURATION, reason: 'no usable transport' });
      return;
    }
    this.transport = transport;
    this.connectId = this.nextId++;
    const connect = { name: this.options.name };
    if (this.token) connect.token = this.token;
    const subs = {};
    for (const [ch, pos] of this.serverSubs) {
      if (pos.recoverable) subs[ch] = { recover: true, epoch: pos.epoch, offset: pos.offset };
    }
    if (Object.keys(subs).length) connect.subs = subs;
    const frame = JSON.stringify({ id: this.connectId, connect });
    transport.open(
      {
        onOpen: () => {
          if (this.transport !== transport) return;
          if (!transport.emulation) transport.send(frame);
          this._armPing(this.options.timeout + this.options.maxServerPingDelay);
        },
        onMessage: (line) => {
          if (this.transport === transport) this._onLine(line);
        },
        onClose: (ev) => {
          if (this.transport === transport) this._transportClosed(transport, ev);
        },
      },
      frame,
    );
  }

  _onLine(line) {
    this._armPing(this.pingDelayMs);
    let reply;
    try {
      reply = JSON.parse(line);
    } catch {
      this._closeTransport(ClientCode.BAD_PROTOCOL, 'bad protocol');
      return;
    }
    if (reply.id) {
      if (reply.id === this.connectId) {
        this._onConnectReply(reply);
        return;
      }
      const call = this.pending.get(reply.id);
      if (!call) return;
      this.pending.delete(reply.id);
      clearTimeout(call.timer);
      if (reply.error) call.reject(reply.error);
      else call.resolve(reply);
      return;
    }
    if (reply.push) {
      this._onPush(reply.push);
      return;
    }
    // An empty reply is the server's ping (PROTOCOL.md §1.4).
    if (this.sendPong && this.transport) this.transport.send('{}');
  }

  _onConnectReply(reply) {
    if (reply.error) {
      const error = reply.error;
      this.emit('error', { type: 'connect', error });
      if (error.code === ErrorCode.TOKEN_EXPIRED) {
        this.token = '';
        this._closeTransport(ClientCode.TRANSPORT_CLOSED, 'token expired', true);
      } else if (isTemporaryError(error)) {
        this._closeTransport(ClientCode.TRANSPORT_CLOSED, error.message || 'temporary error');
      } else {
        this._teardown();
        this._setState('disconnected', { code: error.code, reason: error.message || 'connect error' });
      }
      return;
    }
    const res = reply.connect || {};
    this.transportLocked = true;
    this.attempts = 0;
    this.triedInRound = 0;
    this.clientId = res.client || '';
    if (this.transport.emulation) this.transport.bind(res.session || '', res.node || '');
    this.sendPong = res.pong === true;
    this.pingDelayMs = res.ping ? res.ping * 1000 + this.options.maxServerPingDelay : 0;
    this._armPing(this.pingDelayMs);
    if (res.expires && res.ttl) this._scheduleRefresh(res.ttl);
    this._setState('connected', { client: this.clientId, transport: this.transport.name, data: res.data });
    const seen = new Set();
    for (const [channel, sr] of Object.entries(res.subs || {})) {
      seen.add(channel);
      this._serverSubscribed(channel, sr);
    }
    for (const channel of [...this.serverSubs.keys()]) {
      if (!seen.has(channel)) {
        this.serverSubs.delete(channel);
        this.emit('unsubscribed', { channel, code: 0, reason: 'not in connect result' });
      }
    }
    for (const sub of this.subs.values()) sub._send();
  }

  _serverSubscribed(channel, sr) {
    const recoverable = sr.recoverable === true;
    const position = { epoch: sr.epoch || '', offset: sr.offset || 0, recoverable };
    this.serverSubs.set(channel, position);
    this.emit('subscribed', {
      channel,
      recovered: sr.recovered === true,
      wasRecovering: sr.was_recovering === true,
      recoverable,
      streamPosition: { epoch: position.epoch, offset: position.offset },
    });
    for (const pub of sr.publications || []) this._serverPublication(channel, pub);
  }

  _serverPublication(channel, pub) {
    const pos = this.serverSubs.get(channel);
    if (pos && typeof pub.offset === 'number') pos.offset = pub.offset;
    this.emit('publication', { channel, data: pub.data, offset: pub.offset, tags: pub.tags });
  }

  _onPush(push) {
    const channel = push.channel || '';
    if (push.pub) {
      const sub = this.subs.get(channel);
      if (sub && sub.state === 'subscribed') sub._publication(push.pub);
      else if (this.serverSubs.has(channel)) this._serverPublication(channel, push.pub);
    } else if (push.unsubscribe) {
      const sub = this.subs.get(channel);
      if (sub) sub._serverUnsubscribe(push.unsubscribe.code, push.unsubscribe.reason || '');
      else if (this.serverSubs.delete(channel)) this.emit('unsubscribed', { channel, ...push.unsubscribe });
    } else if (push.subscribe) {
      this._serverSubscribed(channel, push.subscribe);
    } else if (push.disconnect) {
      this._closeTransport(push.disconnect.code, push.disconnect.reason || '');
    } else if (push.message) {
      this.emit('message', { data: push.message.data });
    }
  }

  /** Close the current transport ourselves and react as if the server had closed it. */
  _closeTransport(code, reason, immediate = false) {
    const t = this.transport;
    if (!t) return;
    t.close();
    this._transportClosed(t, { code, reason, opened: true }, immediate);
  }

  _transportClosed(transport, ev, immediate = false) {
    this.transport = null;
    clearTimeout(this.pingTimer);
    clearTimeout(this.refreshTimer);
    this._rejectPending();
    for (const sub of this.subs.values()) sub._connectionLost();
    if (this.state === 'disconnected') return;
    if (isTerminalDisconnect(ev.code)) {
      this._teardown();
      this._setState('disconnected', { code: ev.code, reason: ev.reason });
      return;
    }
    const wasConnected = this.state === 'connected';
    if (wasConnected || this.state !== 'connecting') {
      this._setState('connecting', { code: ev.code, reason: ev.reason });
    } else {
      this.emit('connecting', { code: ev.code, reason: ev.reason });
    }
    // Initial handshake failure: try the next transport at once (PROTOCOL.md §4.6).
    if (!ev.opened && !this.transportLocked && this.endpoints.length > 1) {
      this.transportIndex = (this.transportIndex + 1) % this.endpoints.length;
      this.triedInRound += 1;
      if (this.triedInRound < this.endpoints.length) {
        this._open();
        return;
      }
      this.triedInRound = 0;
    }
    if (immediate) {
      this._open();
      return;
    }
    this._scheduleReconnect();
  }

  _scheduleReconnect() {
    clearTimeout(this.reconnectTimer);
    const delay = backoffMs(this.attempts++, this.options.minReconnectDelay, this.options.maxReconnectDelay, this.random);
    this.reconnectTimer = setTimeout(() => {
      if (this.state === 'connecting') this._open();
    }, delay);
  }

  _armPing(delayMs) {
    clearTimeout(this.pingTimer);
    if (!delayMs) return;
    this.pingTimer = setTimeout(() => this._closeTransport(ClientCode.NO_PING, 'no ping'), delayMs);
  }

  _scheduleRefresh(ttlSeconds) {
    clearTimeout(this.refreshTimer);
    this.refreshTimer = setTimeout(() => this._refresh(), ttlSeconds * 1000);
  }

  async _refresh() {
    if (this.state !== 'connected' || !this.getToken) return;
    try {
      const token = await this.getToken({});
      if (this.state !== 'connected') return;
      this.token = token;
      const reply = await this._call({ refresh: { token } });
      const res = reply.refresh || {};
      if (res.expires && res.ttl) this._scheduleRefresh(res.ttl);
    } catch (err) {
      if (err instanceof UnauthorizedError || err?.name === 'UnauthorizedError') {
        this._teardown();
        this._setState('disconnected', { code: ClientCode.UNAUTHORIZED, reason: 'unauthorized' });
        return;
      }
      if (err && typeof err.code === 'number' && !isTemporaryError(err) && !err.transport) {
        this._teardown();
        this._setState('disconnected', { code: err.code, reason: err.message || 'refresh error' });
        return;
      }
      clearTimeout(this.refreshTimer);
      this.refreshTimer = setTimeout(() => this._refresh(), 5000 + this.random() * 5000);
    }
  }

  // --- commands -------------------------------------------------------------------------------

  _isConnected() {
    return this.state === 'connected' && this.transport !== null;
  }

  /** Send one command and resolve with its reply; rejects with the reply error or {transport:true}. */
  _call(command) {
    if (!this._isConnected()) return Promise.reject({ code: 0, message: 'not connected', transport: true });
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject({ code: 1, message: 'timeout', transport: true });
        this._closeTransport(ClientCode.SUBSCRIBE_TIMEOUT, 'command timeout');
      }, this.options.timeout);
      this.pending.set(id, { resolve, reject, timer });
      this.transport.send(JSON.stringify({ id, ...command }));
    });
  }

  _subscriptionWanted(sub) {
    if (this._isConnected()) sub._send();
  }

  _sendUnsubscribe(channel) {
    if (this._isConnected()) this._call({ unsubscribe: { channel } }).catch(() => {});
  }

  _rejectPending() {
    for (const call of this.pending.values()) {
      clearTimeout(call.timer);
      call.reject({ code: 0, message: 'transport closed', transport: true });
    }
    this.pending.clear();
  }

  _teardown() {
    this.generation++;
    clearTimeout(this.reconnectTimer);
    clearTimeout(this.pingTimer);
    clearTimeout(this.refreshTimer);
    const t = this.transport;
    this.transport = null;
    if (t) t.close();
    this._rejectPending();
    for (const sub of this.subs.values()) sub._connectionLost();
  }

  _setState(state, ctx) {
    this.state = state;
    this.emit('state', state);
    this.emit(state, ctx);
  }
}
