// Client behaviour that needs a controllable peer: an in-process fake WebSocket (the centrifuge-js
// fakeServer idea) records frames and lets the test answer, ping, go silent or close with a code.
import assert from 'node:assert/strict';
import { describe, test, mock } from 'node:test';

import { Client } from '../src/client.js';
import { backoffMs, jittered } from '../src/backoff.js';
import { isTerminalDisconnect } from '../src/codes.js';
import { Emitter } from '../src/emitter.js';

function fakeSocketClass() {
  const sockets = [];
  class FakeWebSocket {
    constructor(url) {
      this.url = url;
      this.readyState = 0;
      this.sent = [];
      sockets.push(this);
    }
    send(frame) {
      this.sent.push(...frame.split('\n').map((l) => JSON.parse(l)));
    }
    close() {
      this.readyState = 3;
    }
    // test side
    serverOpen() {
      this.readyState = 1;
      this.onopen?.();
    }
    serverSend(...replies) {
      this.onmessage?.({ data: replies.map((r) => JSON.stringify(r)).join('\n') });
    }
    serverClose(code, reason = '') {
      this.readyState = 3;
      this.onclose?.({ code, reason });
    }
  }
  return { FakeWebSocket, sockets };
}

describe('client with a fake server', () => {
  test('answers server pings with pong and reconnects when pings stop', () => {
    mock.timers.enable({ apis: ['setTimeout'] });
    try {
      const { FakeWebSocket, sockets } = fakeSocketClass();
      const c = new Client('ws://x/connection/websocket', { websocket: FakeWebSocket, token: 't', maxServerPingDelay: 1000, random: () => 0 });
      c.connect();
      sockets[0].serverOpen();
      assert.deepEqual(sockets[0].sent[0], { id: 1, connect: { name: 'taskcast-js', token: 't' } });
      sockets[0].serverSend({ id: 1, connect: { client: 'c1', ping: 2, pong: true } });
      assert.equal(c.state, 'connected');
      mock.timers.tick(2500);
      sockets[0].serverSend({});
      assert.deepEqual(sockets[0].sent.at(-1), {}, 'pong');
      assert.equal(c.state, 'connected');
      mock.timers.tick(3100); // ping (2 s) + maxServerPingDelay (1 s) without any frame
      assert.equal(c.state, 'connecting');
      mock.timers.tick(500); // full-jitter backoff floor
      assert.equal(sockets.length, 2, 'reconnected');
      c.disconnect();
    } finally {
      mock.timers.reset();
    }
  });

  test('terminal codes stop reconnecting; reconnect codes retry with backoff', () => {
    mock.timers.enable({ apis: ['setTimeout'] });
    try {
      const { FakeWebSocket, sockets } = fakeSocketClass();
      const c = new Client('ws://x', { websocket: FakeWebSocket, token: 't', random: () => 0 });
      c.connect();
      sockets[0].serverOpen();
      sockets[0].serverSend({ id: 1, connect: { client: 'c1' } });
      sockets[0].serverClose(3001, 'shutdown');
      assert.equal(c.state, 'connecting');
      mock.timers.tick(500);
      assert.equal(sockets.length, 2);
      sockets[1].serverOpen();
      sockets[1].serverSend({ id: sockets[1].sent[0].id, connect: { client: 'c2' } });
      assert.equal(c.state, 'connected');
      sockets[1].serverClose(3503, 'force disconnect');
      assert.equal(c.state, 'disconnected');
      mock.timers.tick(60000);
      assert.equal(sockets.length, 2);
    } finally {
      mock.timers.reset();
    }
  });

  test('server-side subscription positions go into ConnectRequest.subs on reconnect', () => {
    mock.timers.enable({ apis: ['setTimeout'] });
    try {
      const { FakeWebSocket, sockets } = fakeSocketClass();
      const c = new Client('ws://x', { websocket: FakeWebSocket, token: 't', random: () => 0 });
      const pubs = [];
      c.on('publication', (ctx) => pubs.push(ctx.offset));
      c.connect();
      sockets[0].serverOpen();
      sockets[0].serverSend({ id: 1, connect: { client: 'c1', subs: { 'task_user:t/u': { recoverable: true, epoch: 'E', offset: 4 } } } });
      sockets[0].serverSend({ push: { channel: 'task_user:t/u', pub: { data: {}, offset: 5 } } });
      sockets[0].serverClose(1006);
      mock.timers.tick(500);
      sockets[1].serverOpen();
      assert.deepEqual(sockets[1].sent[0].connect.subs, { 'task_user:t/u': { recover: true, epoch: 'E', offset: 5 } });
      assert.deepEqual(pubs, [5]);
      c.disconnect();
    } finally {
      mock.timers.reset();
    }
  });
});

describe('configuration errors', () => {
  test('no WebSocket implementation: one configuration error, disconnected, never retried', () => {
    mock.timers.enable({ apis: ['setTimeout'] });
    try {
      const c = new Client('ws://x/connection/websocket', { token: 't' }); // Node 20: no globalThis.WebSocket
      const errors = [];
      const states = [];
      c.on('error', (ctx) => errors.push(ctx));
      c.on('state', (s) => states.push(s));
      c.connect();
      assert.equal(c.state, 'disconnected');
      assert.equal(errors.length, 1);
      assert.equal(errors[0].type, 'configuration');
      assert.match(errors[0].error.message, /websocket/);
      mock.timers.tick(60000);
      assert.deepEqual(states, ['disconnected'], 'no connecting loop');
    } finally {
      mock.timers.reset();
    }
  });

  test('a missing fallback implementation is skipped; the usable transport connects', () => {
    const { FakeWebSocket, sockets } = fakeSocketClass();
    const c = new Client(
      [
        { transport: 'sse', endpoint: 'http://x/connection/sse' },
        { transport: 'websocket', endpoint: 'ws://x/connection/websocket' },
      ],
      { websocket: FakeWebSocket, eventsource: null, fetch: null, token: 't' },
    );
    const errors = [];
    c.on('error', (ctx) => errors.push(ctx.type));
    c.connect();
    assert.deepEqual(errors, ['configuration']);
    assert.equal(sockets.length, 1);
    c.disconnect();
  });
});

describe('backoff, codes, emitter', () => {
  test('full-jitter backoff stays within [min, min(max, min*2^n)]', () => {
    for (let attempt = 0; attempt < 20; attempt++) {
      for (const r of [0, 0.25, 0.5, 0.999]) {
        const d = backoffMs(attempt, 500, 20000, () => r);
        assert.ok(d >= 500 && d <= Math.min(20000, 500 * 2 ** attempt), `${attempt} ${r} ${d}`);
      }
    }
    assert.equal(jittered(30000, 0.3, () => 0), 21000);
    assert.equal(jittered(30000, 0.3, () => 1), 39000);
  });

  test('terminal disconnect ranges (PROTOCOL.md §2.3)', () => {
    for (const code of [3500, 3501, 3999, 4500, 4999, 1009]) assert.equal(isTerminalDisconnect(code), true, code);
    for (const code of [1000, 1006, 3000, 3001, 3012, 3499, 4000, 4499, 5000]) assert.equal(isTerminalDisconnect(code), false, code);
  });

  test("one listener's exception does not stop the others", () => {
    const e = new Emitter();
    const errors = [];
    e.onListenerError = (err) => errors.push(err.message);
    const seen = [];
    e.on('x', () => {
      throw new Error('boom');
    });
    const off = e.on('x', (v) => seen.push(v));
    e.emit('x', 1);
    off();
    e.emit('x', 2);
    assert.deepEqual(seen, [1]);
    assert.deepEqual(errors, ['boom', 'boom']);
  });
});
