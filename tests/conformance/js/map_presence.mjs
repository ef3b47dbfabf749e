// Map presence (Centrifugo v6.9): a watcher follows args.clientsChannel with
// newMapClientsSubscription and args.usersChannel with newMapUsersSubscription; a second client
// (args.tokenB) subscribes to args.channel, whose namespace writes its presence into both maps,
// then unsubscribes: the clients map loses its entry, the users map keeps it (it expires).
import { args, emit, until, newClient, run } from './lib.mjs';

function follow(sub, name) {
  sub.on('subscribed', () => emit('presence_subscribed', { map: name }));
  sub.on('sync', (ctx) => emit('presence_sync', { map: name, keys: ctx.entries.map((e) => e.key) }));
  sub.on('update', (ctx) => emit('presence_update', {
    map: name, key: ctx.key, removed: !!ctx.removed, user: ctx.info ? ctx.info.user : null,
    client: ctx.info ? ctx.info.client : null,
  }));
  sub.on('error', (ctx) => emit('sub_error', { map: name, code: ctx.error?.code }));
  sub.subscribe();
}

run(async () => {
  const watcher = newClient({ token: args.tokenA });
  follow(watcher.newMapClientsSubscription(args.clientsChannel), 'clients');
  follow(watcher.newMapUsersSubscription(args.usersChannel), 'users');
  watcher.connect();
  await until((e) => e.event === 'presence_sync' && e.map === 'clients', 5000, 'clients sync');
  await until((e) => e.event === 'presence_sync' && e.map === 'users', 5000, 'users sync');

  const b = newClient({ token: args.tokenB });
  const sub = b.newSubscription(args.channel);
  sub.on('subscribed', () => emit('b_subscribed'));
  b.on('connected', (ctx) => emit('b_connected', { client: ctx.client }));
  sub.subscribe();
  b.connect();
  const connected = await until((e) => e.event === 'b_connected', 5000, 'b connected');
  await until((e) => e.event === 'presence_update' && e.map === 'clients' && e.key === connected.client, 5000, 'client joined');
  await until((e) => e.event === 'presence_update' && e.map === 'users', 5000, 'user joined');
  sub.unsubscribe();
  await until((e) => e.event === 'presence_update' && e.map === 'clients' && e.removed, 5000, 'client left');
  b.disconnect();
  watcher.disconnect();
});
