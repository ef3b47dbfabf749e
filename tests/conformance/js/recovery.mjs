// Receives args.before publications, gets force-reconnected through the server API (3011),
// and while the client is really disconnected (the reconnect waits on getData until then)
// args.away publications go out through the server API. Reports the resubscribe outcome and
// every publication. With args.serverSide the channel is a server-side subscription from the
// token's `channels` claim (recovered through ConnectRequest.subs) and the events are the
// client-level ones ("server_subscribed", "server_publication").
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
  const SUBSCRIBED = args.serverSide ? 'server_subscribed' : 'subscribed';
  const PUBLICATION = args.serverSide ? 'server_publication' : 'publication';
  if (!args.serverSide) watch(c.newSubscription(args.channel)).subscribe();
  c.connect();
  const connected = await until((e) => e.event === 'connected', 5000, 'connected');
  await until((e) => e.event === SUBSCRIBED && e.channel === args.channel, 5000, 'subscribed');
  for (let i = 1; i <= args.before; i++) {
    await api('publish', { channel: args.channel, data: { n: i } });
  }
  await until(() => count((e) => e.event === PUBLICATION) >= args.before, 5000, 'pubs before');

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
  await until(() => count((e) => e.event === SUBSCRIBED) >= 2, 10000, 'resubscribed');
  if (args.expectRecovered !== false) {
    await until(() => count((e) => e.event === PUBLICATION) >= args.before + args.away, 5000, 'recovered pubs');
  }
  c.disconnect();
});
