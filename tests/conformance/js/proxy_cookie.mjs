// No token: the session cookie of the WebSocket upgrade authenticates through the connect proxy;
// subscribe through the subscribe proxy, publish through the publish proxy (the backend rewrites
// the data), call RPC through the RPC proxy.
import WebSocket from 'ws';
import { args, emit, until, newClient, watch, run } from './lib.mjs';

class CookieWebSocket extends WebSocket {
  constructor(url, protocols) {
    super(url, protocols, { headers: { Cookie: args.cookie } });
  }
}

run(async () => {
  const c = newClient({ websocket: CookieWebSocket });
  c.on('connected', (ctx) => emit('connect_data', { data: ctx.data }));
  const sub = watch(c.newSubscription(args.channel));
  sub.on('subscribed', (ctx) => emit('subscribe_data', { data: ctx.data }));
  sub.subscribe();
  c.connect();
  await c.ready(5000);
  await sub.ready(5000);
  await sub.publish({ text: 'from js' });
  await until((e) => e.event === 'publication' && e.channel === args.channel, 5000, 'publication');
  const r = await c.rpc('echo', { js: true });
  emit('rpc', { data: r.data });
  c.disconnect();
});
