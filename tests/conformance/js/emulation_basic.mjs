// Over an emulation transport: connect with a token (server-side channel from its `channels`
// claim), subscribe, publish from the client (the command goes through /emulation, the reply and
// the publication come back on the stream) and through the server API; read history.
import { args, emit, until, api, newClient, watch, run, ms, enc, dec } from './lib.mjs';

run(async () => {
  const c = newClient({ token: args.token });
  const sub = watch(c.newSubscription(args.channel));
  sub.subscribe();
  c.connect();
  await c.ready(ms(5000));
  await sub.ready(ms(5000));
  await until((e) => e.event === 'server_subscribed' && e.channel === args.feed, 5000, 'server-side subscribed');

  await sub.publish(enc({ n: 1, from: 'client' }));
  await until((e) => e.event === 'publication' && e.data.n === 1, 5000, 'client pub');
  await api('publish', { channel: args.channel, data: { n: 2, from: 'api' } });
  await until((e) => e.event === 'publication' && e.data.n === 2, 5000, 'api pub');
  await api('publish', { channel: args.feed, data: { n: 1, from: 'api' } });
  await until((e) => e.event === 'server_publication' && e.channel === args.feed, 5000, 'server-side pub');

  const h = await sub.history({ limit: 10 });
  emit('history', { offset: h.offset, epoch: h.epoch, publications: h.publications.map((p) => dec(p.data).n) });
  const rpcOrError = await c.publish(args.channel, enc({ n: 3, from: 'client-level' })).then(
    () => 'ok', (err) => `error ${err.code}`);
  emit('client_publish', { outcome: rpcOrError });
  await until((e) => e.event === 'publication' && e.data.n === 3, 5000, 'client-level pub');
  emit('state', { state: c.state });
  c.disconnect();
});
