// A map subscription with delta: 'fossil' (centrifuge-js >= 5.8 per-key delta). Every write goes
// through the server API map_publish with delta: true; values are ~300 bytes of which one field
// changes, so a delta is much smaller. Keys k001..k004 are written before subscribing (state
// pages); live: k001, k002, k001 updated, k003 removed, k900 added; the client is
// force-reconnected (3011) and while away k001 is updated twice (the recovered batch, within
// one page so it comes with the live reply: its first change whole, the second a delta); live
// again: k002 updated. Emits the sync entries, every update with its decoded value, the values written
// ("written", the last value of each key) and the SDK's deltaStats.
import { args, emit, until, count, api, newClient, watch, run, dec } from './lib.mjs';

const written = {};

function value(key, n) {
  return { key, n, text: `${key} `.repeat(60), list: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10] };
}

async function put(key, n) {
  const data = value(key, n);
  written[key] = data;
  return api('map_publish', { channel: args.channel, key, data, delta: true });
}

async function remove(key) {
  delete written[key];
  return api('map_remove', { channel: args.channel, key });
}

run(async () => {
  const ch = args.channel;
  for (let i = 1; i <= 4; i++) await put(`k00${i}`, i);
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
  const sub = watch(c.newMapSubscription(ch, { pageSize: 2, delta: 'fossil' }));
  sub.on('sync', (ctx) => emit('map_sync', {
    entries: ctx.entries.map((e) => ({ key: e.key, data: dec(e.data) })),
  }));
  sub.on('update', (ctx) => emit('map_update', {
    key: ctx.key, data: ctx.removed ? null : dec(ctx.data), removed: !!ctx.removed,
  }));
  sub.subscribe();
  c.connect();
  const connected = await until((e) => e.event === 'connected', 5000, 'connected');
  await until((e) => e.event === 'map_sync', 5000, 'sync');

  await put('k001', 101);
  await put('k002', 102);
  await put('k001', 201);
  await remove('k003');
  await put('k900', 900);
  await until((e) => e.event === 'map_update' && e.key === 'k900', 5000, 'live updates');

  c.on('connecting', async (ctx) => {
    if (ctx.code !== 3011) return;
    try {
      await put('k001', 301);
      await put('k001', 401);
    } finally {
      releaseReconnect();
    }
  });
  await api('disconnect', { user: args.user, client: connected.client, disconnect: { code: 3011, reason: 'force reconnect' } });
  await until(() => count((e) => e.event === 'subscribed') >= 2, 10000, 'resubscribed');
  await until((e) => e.event === 'map_update' && e.key === 'k001' && e.data && e.data.n === 401, 5000, 'recovered');
  await put('k002', 502);
  await until((e) => e.event === 'map_update' && e.key === 'k002' && e.data && e.data.n === 502, 5000, 'live after resubscribe');
  emit('written', { values: written });
  emit('delta_stats', sub.deltaStats());
  c.disconnect();
});
