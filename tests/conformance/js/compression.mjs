// permessage-deflate: the `ws` client offers it by default; record what the gateway accepted
// (`extensions` of the socket once open), then receive publications of several sizes through
// the server API and publish one large enough for `ws` to compress it (its threshold is 1 KiB).
import WebSocket from 'ws';
import { args, emit, until, api, newClient, watch, run, ms, enc } from './lib.mjs';

class RecordingWebSocket extends WebSocket {
  constructor(url, protocols) {
    super(url, protocols);
    this.on('open', () => emit('ws_open', { extensions: this.extensions }));
  }
}

run(async () => {
  const c = newClient({ websocket: RecordingWebSocket, token: args.token });
  const sub = watch(c.newSubscription(args.channel));
  sub.subscribe();
  c.connect();
  await c.ready(ms(5000));
  await sub.ready(ms(5000));
  for (const [i, text] of args.texts.entries()) {
    await api('publish', { channel: args.channel, data: { i, text } });
  }
  await until((e) => e.event === 'publication' && e.channel === args.channel && e.data.i === args.texts.length - 1,
    5000, 'api publications');
  await sub.publish(enc({ i: 'client', text: args.clientText }));
  await until((e) => e.event === 'publication' && e.data.i === 'client', 5000, 'client publication');
  c.disconnect();
});
