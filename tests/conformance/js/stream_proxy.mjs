// A stream subscription (channel.proxy.subscribe_stream): the gRPC backend answers the subscribe
// with its stream's first message, then streams publications to this subscriber. With args.bidi
// the SDK's publish goes into the stream and comes back as {"echo": data}. The cookie of the
// WebSocket upgrade is forwarded to the backend as metadata.
import WebSocket from 'ws';
import { args, dec, emit, enc, until, newClient, watch, run } from './lib.mjs';

class CookieWebSocket extends WebSocket {
  constructor(url, protocols) {
    super(url, protocols, { headers: { Cookie: args.cookie } });
  }
}

run(async () => {
  const c = newClient({ websocket: CookieWebSocket });
  const sub = watch(c.newSubscription(args.channel));
  sub.on('subscribed', (ctx) => emit('subscribe_data', { data: dec(ctx.data) }));
  sub.subscribe();
  c.connect();
  await sub.ready(5000);
  await until((e) => e.event === 'publication' && e.data && e.data.n === 1, 10000, 'stream publication');
  if (args.bidi) {
    await sub.publish(enc({ from: 'js' }));
    await until((e) => e.event === 'publication' && e.data && e.data.echo, 10000, 'echo');
  }
  sub.unsubscribe();
  c.disconnect();
});
