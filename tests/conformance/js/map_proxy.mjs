// Client map writes through the map publish / remove proxies: no token (the session cookie of
// the WebSocket upgrade authenticates through the connect proxy); the client follows the map
// args.channel, writes key "a" (the backend writes "b:a" with its own data and tags), removes
// "a" (the backend removes "b:a"), writes "refuse" (the backend answers error 1000: nothing is
// written) and writes "z" (written as "b:z"), so the updates seen are exactly what the backend
// allowed, in order.
import WebSocket from 'ws';
import { args, emit, until, newClient, run, dec, enc } from './lib.mjs';

class CookieWebSocket extends WebSocket {
  constructor(url, protocols) {
    super(url, protocols, { headers: { Cookie: args.cookie } });
  }
}

run(async () => {
  const c = newClient({ websocket: CookieWebSocket });
  const sub = c.newMapSubscription(args.channel);
  sub.on('sync', (ctx) => emit('map_sync', { keys: ctx.entries.map((e) => e.key) }));
  sub.on('update', (ctx) => emit('map_update', {
    key: ctx.key, removed: !!ctx.removed, data: ctx.removed ? null : dec(ctx.data),
    tags: ctx.tags || null, user: ctx.info ? ctx.info.user : null,
  }));
  sub.subscribe();
  c.connect();
  await until((e) => e.event === 'map_sync', 5000, 'sync');

  await sub.publish('a', enc({ x: 1 }));
  await until((e) => e.event === 'map_update' && e.key === 'b:a' && !e.removed, 5000, 'write');
  await sub.remove('a');
  await until((e) => e.event === 'map_update' && e.key === 'b:a' && e.removed, 5000, 'removal');
  try {
    await sub.publish('refuse', enc({ x: 2 }));
    emit('refused', { code: 0 });
  } catch (err) {
    emit('refused', { code: err.code, message: err.message });
  }
  await sub.publish('z', enc({ x: 3 }));
  await until((e) => e.event === 'map_update' && e.key === 'b:z', 5000, 'last write');
  c.disconnect();
});
