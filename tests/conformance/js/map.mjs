// A map subscription (centrifuge-js >= 5.8 newMapSubscription) through its whole life:
// args.initial keys are written through the server API map_publish before subscribing; the SDK
// pages the state (args.pageSize per page), goes live and emits "sync"; then a key is added, one
// updated and one removed (live "update" events); the client is force-reconnected (3011) and,
// while it is really away, args.away more keys are written; the resubscribe recovers them
// (streamed maps: "update" events, no second "sync") or re-reads the whole state (ephemeral
// maps: a second "sync"). args.tagsFilter subscribes with a tags filter (keys are tagged
// {parity: even|odd}).
import { args, emit, until, count, api, newClient, watch, run, dec } from './lib.mjs';

function tags(i) {
  return { parity: i % 2 === 0 ? 'even' : 'odd' };
}

run(async () => {
  const ch = args.channel;
  for (let i = 1; i <= args.initial; i++) {
    await api('map_publish', { channel: ch, key: `k${String(i).padStart(3, '0')}`, data: { n: i }, tags: tags(i) });
  }
  let releaseReconnect;
  const awayDone = new Promise((resolve) => { releaseReconnect = resolve; });
  let connects = 0;
  const c = newClient({
    token: args.token,
    getData: async () => {
      connects += 1;
      if (connects > 1) await awayDone;
      return null;
    },
  });
  const options = { pageSize: args.pageSize };
  if (args.tagsFilter) options.tagsFilter = args.tagsFilter;
  const sub = watch(c.newMapSubscription(ch, options));
  sub.on('sync', (ctx) => emit('map_sync', {
    entries: ctx.entries.map((e) => ({ key: e.key, data: dec(e.data), offset: e.offset })),
  }));
  sub.on('update', (ctx) => emit('map_update', {
    key: ctx.key, data: ctx.removed ? null : dec(ctx.data), removed: !!ctx.removed, offset: ctx.offset,
  }));
  sub.subscribe();
  c.connect();
  const connected = await until((e) => e.event === 'connected', 5000, 'connected');
  await until((e) => e.event === 'map_sync', 5000, 'sync');

  await api('map_publish', { channel: ch, key: 'k900', data: { n: 900 }, tags: tags(900) });
  await api('map_publish', { channel: ch, key: 'k002', data: { n: 2002 }, tags: tags(2) });
  await api('map_remove', { channel: ch, key: 'k001' });
  await until((e) => e.event === 'map_update' && e.key === 'k002', 5000, 'live update');
  if (!args.tagsFilter) await until((e) => e.event === 'map_update' && e.key === 'k001' && e.removed, 5000, 'live removal');

  c.on('connecting', async (ctx) => {
    if (ctx.code !== 3011) return;
    try {
      for (let i = 1; i <= args.away; i++) {
        const r = await api('map_publish', { channel: ch, key: `a${i}`, data: { away: i }, tags: tags(i) });
        emit('published_away', { key: `a${i}`, offset: r.offset });
      }
    } finally {
      releaseReconnect();
    }
  });
  await api('disconnect', { user: args.user, client: connected.client, disconnect: { code: 3011, reason: 'force reconnect' } });
  await until(() => count((e) => e.event === 'subscribed') >= 2, 10000, 'resubscribed');
  if (args.expectResync) {
    await until(() => count((e) => e.event === 'map_sync') >= 2, 5000, 'second sync');
  } else if (args.away > 0) {
    await until((e) => e.event === 'map_update' && e.key === `a${args.away}`, 5000, 'recovered updates');
  }
  await api('map_publish', { channel: ch, key: 'k902', data: { n: 902 }, tags: tags(902) });
  await until((e) => e.event === 'map_update' && e.key === 'k902', 5000, 'live after resubscribe');
  c.disconnect();
});
