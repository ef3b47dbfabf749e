// Receives args.before publications, gets force-reconnected through the server API (3011),
// and while the client is really disconnected (the reconnect waits on getData until then)
// args.away publications go out through the server API. Reports the resubscribe outcome and
// every publication.
import { args, emit, until, count, api, newClient, watch, run } from './lib.mjs';

run(async () => {
  let releaseReconnect;
  const awayDone = new Promise((resolve) => { releaseReconnect = resolve; });
  let connects = 0;
  const c = newClient({
    token: args.token,
    getData: async () => {
      connects += 1;
      if (connects > 1) await awayDone;  // reconnect only after the publications while away
      return null;
    },
  });
  const sub = watch(c.newSubscription(args.channel));
  sub.subscribe();
  c.connect();
  const connected = await until((e) => e.event === 'connected', 5000, 'connected');
  await sub.ready(5000);
  for (let i = 1; i <= args.before; i++) {
    await api('publish', { channel: args.channel, data: { n: i } });
  }
  await until(() => count((e) => e.event === 'publication') >= args.before, 5000, 'pubs before');

  c.on('connecting', async (ctx) => {
    if (ctx.code !== 3011) return;
    try {
      for (let i = args.before + 1; i <= args.before + args.away; i++) {
        const r = await api('publish', { channel: args.channel, data: { n: i } });
        emit('published_away', { n: i, offset: r.offset, state: c.state });
      }
    } finally {
      releaseReconnect();
    }
  });
  await api('disconnect', { user: args.user, client: connected.client,
    disconnect: { code: 3011, reason: 'force reconnect' } });
  await until((e) => e.event === 'subscribed' && count((x) => x.event === 'subscribed') >= 2, 10000, 'resubscribed');
  if (args.expectRecovered) {
    await until(() => count((e) => e.event === 'publication') >= args.before + args.away, 5000, 'recovered pubs');
  }
  c.disconnect();
});
