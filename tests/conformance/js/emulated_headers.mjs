// Headers emulation: the SDK cannot set headers on a browser WebSocket, so it sends them in the
// connect command (the `headers` option); the gateway's proxies forward the names listed in
// their `emulated_headers`. The session cookie comes only this way here: the connect proxy
// authenticates with it, the subscribe and RPC proxies see it too. After setHeaders and a
// reconnect the new value is what the backend sees.
import { args, emit, newClient, watch, run, ms, enc, dec } from './lib.mjs';

run(async () => {
  const c = newClient({ headers: args.headers });
  c.on('connected', (ctx) => emit('connect_data', { data: dec(ctx.data) }));
  const sub = watch(c.newSubscription(args.channel));
  sub.on('subscribed', (ctx) => emit('subscribe_data', { data: dec(ctx.data) }));
  sub.subscribe();
  c.connect();
  await c.ready(ms(5000));
  await sub.ready(ms(5000));
  const r = await c.rpc('echo', enc({ js: true }));
  emit('rpc', { data: dec(r.data) });
  c.setHeaders({ ...args.headers, Cookie: args.cookie2 });
  c.disconnect();
  c.connect();
  await c.ready(ms(5000));
  c.disconnect();
});
