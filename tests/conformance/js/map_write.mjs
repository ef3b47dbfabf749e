// Client-side map writes: a watcher follows the map args.channel; a writer subscribes to it too,
// writes with MapSubscription.publish (the namespace's client_key: client_id, so the key is the
// writer's client ID whatever it names), removes it, writes again and unsubscribes (the
// namespace's remove_client_on_unsubscribe removes its key). A write to args.deniedChannel (no
// permission) is refused.
import { args, emit, until, count, newClient, run, dec, enc } from './lib.mjs';

run(async () => {
  const watcher = newClient({ token: args.tokenA });
  const watched = watcher.newMapSubscription(args.channel);
  watched.on('sync', (ctx) => emit('map_sync', { keys: ctx.entries.map((e) => e.key) }));
  watched.on('update', (ctx) => emit('map_update', {
    key: ctx.key, removed: !!ctx.removed, data: ctx.removed ? null : dec(ctx.data), user: ctx.info ? ctx.info.user : null,
  }));
  watched.subscribe();
  watcher.connect();
  await until((e) => e.event === 'map_sync', 5000, 'watcher sync');

  const writer = newClient({ token: args.tokenB });
  writer.on('connected', (ctx) => emit('writer_connected', { client: ctx.client }));
  const sub = writer.newMapSubscription(args.channel);
  sub.on('subscribed', () => emit('writer_subscribed'));
  const denied = writer.newMapSubscription(args.deniedChannel);
  denied.on('subscribed', () => emit('denied_subscribed'));
  sub.subscribe();
  denied.subscribe();
  writer.connect();
  const { client } = await until((e) => e.event === 'writer_connected', 5000, 'writer connected');
  await until((e) => e.event === 'writer_subscribed', 5000, 'writer subscribed');
  await until((e) => e.event === 'denied_subscribed', 5000, 'denied subscribed');

  await sub.publish('any', enc({ x: 1 }));
  await until((e) => e.event === 'map_update' && e.key === client && !e.removed, 5000, 'write');
  await sub.remove('any');
  await until((e) => e.event === 'map_update' && e.key === client && e.removed, 5000, 'removal');
  await sub.publish('any', enc({ x: 2 }));
  await until((e) => e.event === 'map_update' && e.key === client && e.data && e.data.x === 2, 5000, 'second write');
  try {
    await denied.publish('k', enc({ x: 3 }));
    emit('denied_write', { code: 0 });
  } catch (err) {
    emit('denied_write', { code: err.code });
  }
  sub.unsubscribe();
  const removal = (e) => e.event === 'map_update' && e.key === client && e.removed;
  await until(() => count(removal) >= 2, 5000, 'removal on unsubscribe');
  writer.disconnect();
  watcher.disconnect();
});
