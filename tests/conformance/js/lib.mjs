// Shared helpers for the conformance scripts. Every script takes one JSON argument, prints one
// JSON object per line for each event ({"event": name, ...}) and exits by itself: "done" on
// success, a "fatal" line and exit code 1 on failure, a hard deadline otherwise.
//
// args.protocol 'protobuf' loads the SDK's Protobuf build (`centrifuge/build/protobuf`): there
// payloads are bytes, so scripts publish enc(value) and every emitted data/info is dec()oded back
// to the JSON value. args.timeScale (TASKCAST_TEST_TIME_SCALE) multiplies every bound: ms(n).
import { createHmac } from 'node:crypto';
import WebSocket from 'ws';
import { EventSource } from 'eventsource';

export const args = JSON.parse(process.argv[2] || '{}');
export const protobuf = args.protocol === 'protobuf';
const { Centrifuge } = protobuf ? await import('centrifuge/build/protobuf') : await import('centrifuge');
const timeScale = Number(args.timeScale) > 0 ? Number(args.timeScale) : 1;

// A bound of n milliseconds, scaled by the suite's one time factor.
export function ms(n) {
  return n * timeScale;
}

// What the SDK publishes for the JSON value v: v itself over JSON, its JSON bytes over Protobuf.
export function enc(v) {
  return protobuf ? new TextEncoder().encode(JSON.stringify(v)) : v;
}

// The JSON value of received data: Protobuf builds hand out the publisher's JSON bytes.
export function dec(v) {
  if (!(v instanceof Uint8Array)) return v;
  if (v.length === 0) return null;
  const text = new TextDecoder().decode(v);
  try { return JSON.parse(text); } catch { return { undecodable: text }; }
}

function decInfo(info) {
  if (!info) return info;
  return { ...info, connInfo: dec(info.connInfo), chanInfo: dec(info.chanInfo) };
}
const waiters = [];
export const seen = [];

export function emit(event, fields = {}) {
  const record = { event, ...fields };
  seen.push(record);
  process.stdout.write(JSON.stringify(record) + '\n');
  for (const w of [...waiters]) {
    if (w.pred(record)) {
      waiters.splice(waiters.indexOf(w), 1);
      clearTimeout(w.timer);
      w.resolve(record);
    }
  }
}

// Resolves with the first event (already seen or future) matching pred; rejects after ms.
export function until(pred, bound = 5000, what = 'event') {
  const found = seen.find(pred);
  if (found) return Promise.resolve(found);
  return new Promise((resolve, reject) => {
    const w = { pred, resolve };
    w.timer = setTimeout(() => {
      waiters.splice(waiters.indexOf(w), 1);
      reject(new Error(`timeout waiting for ${what}`));
    }, ms(bound));
    waiters.push(w);
  });
}

export function count(pred) {
  return seen.filter(pred).length;
}

export async function api(method, body) {
  const resp = await fetch(`${args.apiUrl}/${method}`, {
    method: 'POST',
    headers: { 'X-API-Key': args.apiKey, 'Content-Type': 'application/json' },
    body: JSON.stringify(body),
  });
  const json = await resp.json();
  if (json.error) throw new Error(`api ${method}: ${JSON.stringify(json.error)}`);
  return method === 'batch' ? json : json.result;
}

// An HS256 connection token for args.secret minted now, expiring in expIn seconds: scripts that
// test expiry mint when the SDK asks, so a loaded machine can't expire a short token early.
export function mintToken(sub, expIn) {
  const b64 = (obj) => Buffer.from(JSON.stringify(obj)).toString('base64url');
  const body = `${b64({ alg: 'HS256', typ: 'JWT' })}.${b64({ sub, exp: Math.floor(Date.now() / 1000) + expIn })}`;
  return `${body}.${createHmac('sha256', args.secret).update(body).digest('base64url')}`;
}

// A Centrifuge client whose client-level events are all emitted. args.url is the WebSocket URL,
// or an array of emulation transports ([{transport: 'sse' | 'http_stream', endpoint}]) with
// args.emulationEndpoint the absolute /emulation URL (possibly of ANOTHER node: the gateway routes
// the POSTs; Node needs an absolute URL).
export function newClient(options = {}) {
  const emulation = Array.isArray(args.url);
  if (emulation && !/^https?:\/\//.test(args.emulationEndpoint || '')) {
    throw new Error('an emulation transport list needs an absolute args.emulationEndpoint');
  }
  // No `fetch` option: Node 20's global fetch and ReadableStream serve http_stream and /emulation.
  const transportOptions = emulation
    ? { eventsource: EventSource, emulationEndpoint: args.emulationEndpoint }
    : { websocket: WebSocket };
  const c = new Centrifuge(args.url, { ...transportOptions, protocol: protobuf ? 'protobuf' : 'json', timeout: ms(5000), ...options });
  c.on('connecting', (ctx) => emit('connecting', { code: ctx.code, reason: ctx.reason }));
  c.on('connected', (ctx) => emit('connected', { client: ctx.client, transport: ctx.transport }));
  c.on('disconnected', (ctx) => emit('disconnected', { code: ctx.code, reason: ctx.reason }));
  c.on('error', (ctx) => emit('client_error', { type: ctx.type, code: ctx.error?.code, message: ctx.error?.message }));
  c.on('subscribed', (ctx) => emit('server_subscribed', {
    channel: ctx.channel, recoverable: ctx.recoverable, positioned: ctx.positioned,
    recovered: ctx.recovered, wasRecovering: ctx.wasRecovering, streamPosition: ctx.streamPosition,
  }));
  c.on('publication', (ctx) => emit('server_publication', {
    channel: ctx.channel, data: dec(ctx.data), offset: ctx.offset, info: decInfo(ctx.info),
  }));
  return c;
}

// Emits the subscription's events with its channel.
export function watch(sub) {
  sub.on('subscribing', (ctx) => emit('subscribing', { channel: sub.channel, code: ctx.code, reason: ctx.reason }));
  sub.on('subscribed', (ctx) => emit('subscribed', {
    channel: ctx.channel, recoverable: ctx.recoverable, positioned: ctx.positioned,
    recovered: ctx.recovered, wasRecovering: ctx.wasRecovering, streamPosition: ctx.streamPosition,
  }));
  sub.on('unsubscribed', (ctx) => emit('unsubscribed', { channel: sub.channel, code: ctx.code, reason: ctx.reason }));
  sub.on('error', (ctx) => emit('sub_error', {
    channel: sub.channel, type: ctx.type, code: ctx.error?.code, message: ctx.error?.message,
  }));
  sub.on('publication', (ctx) => emit('publication', {
    channel: ctx.channel, data: dec(ctx.data), offset: ctx.offset, info: decInfo(ctx.info), tags: ctx.tags,
  }));
  sub.on('join', (ctx) => emit('join', { channel: sub.channel, info: decInfo(ctx.info) }));
  sub.on('leave', (ctx) => emit('leave', { channel: sub.channel, info: decInfo(ctx.info) }));
  return sub;
}

// Runs main with a hard deadline; always exits.
export function run(main, deadlineMs = 20000) {
  const timer = setTimeout(() => {
    emit('fatal', { error: `deadline of ${ms(deadlineMs)} ms exceeded` });
    process.exit(1);
  }, ms(deadlineMs));
  main().then(
    () => { clearTimeout(timer); emit('done'); process.exit(0); },
    (err) => { clearTimeout(timer); emit('fatal', { error: String(err && err.stack || err) }); process.exit(1); },
  );
}
