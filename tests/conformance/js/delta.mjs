// Fossil delta compression: subscribes with delta: 'fossil', receives args.before progress-style
// states (one field changes each time), gets force-reconnected (3011) while args.away states are
// published, recovers them, then receives args.after live ones. Emits every publication's data
// and the subscription's deltaStats() after each phase.
import { args, emit, until, count, api, newClient, watch, run } from './lib.mjs';

function state(n) {
  const steps = [];
  for (let i = 0; i < 30; i++) steps.push({ name: `step ${i}`, state: i < n ? 'done' : 'pending', note: 'x'.repeat(30) });
  return { task: 'delta-task', version: n, steps };
}

run(async () => {
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
  const sub = watch(c.newSubscription(args.channel, { delta: 'fossil' }));
  sub.subscribe();
  c.connect();
  const connected = await until((e) => e.event === 'connected', 5000, 'connected');
  await until((e) => e.event === 'subscribed', 5000, 'subscribed');
  let n = 0;
  for (let i = 0; i < args.before; i++) {
    n += 1;
    await api('publish', { channel: args.channel, data: state(n) });
  }
  await until(() => count((e) => e.event === 'publication') >= args.before, 5000, 'pubs before');
  emit('stats', { phase: 'before', ...sub.deltaStats() });

  c.on('connecting', async (ctx) => {
    if (ctx.code !== 3011) return;
    try {
      for (let i = 0; i < args.away; i++) {
        n += 1;
        await api('publish', { channel: args.channel, data: state(n) });
      }
    } finally {
      releaseReconnect();
    }
  });
  await api('disconnect', { user: args.user, client: connected.client,
    disconnect: { code: 3011, reason: 'force reconnect' } });
  await until(() => count((e) => e.event === 'subscribed') >= 2, 10000, 'resubscribed');
  await until(() => count((e) => e.event === 'publication') >= args.before + args.away, 5000, 'recovered');
  emit('stats', { phase: 'recovered', ...sub.deltaStats() });
  for (let i = 0; i < args.after; i++) {
    n += 1;
    await api('publish', { channel: args.channel, data: state(n) });
  }
  const total = args.before + args.away + args.after;
  await until(() => count((e) => e.event === 'publication') >= total, 5000, 'pubs after');
  emit('stats', { phase: 'after', ...sub.deltaStats() });
  c.disconnect();
});
