// Connect with a token whose `channels` claim adds a server-side subscription; subscribe to a
// plain channel and to a token-protected one (getToken); publish from the client and through
// the server API (publish, broadcast); read history.
import { args, emit, until, api, newClient, watch, run, ms, enc, dec } from './lib.mjs';

run(async () => {
  const c = newClient({ token: args.token });
  const plain = watch(c.newSubscription(args.plain));
  const priv = watch(c.newSubscription(args.private, {
    getToken: async ({ channel }) => { emit('get_sub_token', { channel }); return args.subTokens[channel]; },
  }));
  plain.subscribe();
  priv.subscribe();
  c.connect();
  await c.ready(ms(5000));
  await plain.ready(ms(5000));
  await priv.ready(ms(5000));
  await until((e) => e.event === 'server_subscribed' && e.channel === args.feed, 5000, 'server-side subscribed');

  await plain.publish(enc({ n: 1, from: 'client' }));
  emit('published', { channel: args.plain, via: 'client' });
  await until((e) => e.event === 'publication' && e.channel === args.plain && e.data.n === 1, 5000, 'client pub');
  const r = await api('publish', { channel: args.plain, data: { n: 2, from: 'api' } });
  emit('api_published', { channel: args.plain, result: r });
  await api('publish', { channel: args.feed, data: { n: 1, from: 'api' } });
  const b = await api('broadcast', { channels: [args.plain, args.private], data: { n: 3, from: 'broadcast' } });
  emit('api_broadcast', { result: b });
  await until((e) => e.event === 'publication' && e.channel === args.plain && e.data.n === 3, 5000, 'broadcast plain');
  await until((e) => e.event === 'publication' && e.channel === args.private && e.data.n === 3, 5000, 'broadcast private');
  await until((e) => e.event === 'server_publication' && e.channel === args.feed, 5000, 'server-side pub');

  const h = await plain.history({ limit: 10 });
  emit('history', { channel: args.plain, offset: h.offset, epoch: h.epoch,
    publications: h.publications.map((p) => ({ data: dec(p.data), offset: p.offset })) });
  c.disconnect();
});
