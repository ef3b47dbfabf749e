// A shared poll subscription: track keys with signatures the "backend" issues (HMAC as
// Centrifugo v6.8 defines it), receive their state from the gateway's polls of the
// shared_poll_refresh proxy, a change made at the backend, a shared_poll_publish through the
// server API and a removal; untrack a key.
import { createHash, createHmac } from 'node:crypto';
import { args, emit, until, api, newClient, run, ms, dec } from './lib.mjs';

function sign(keys) {
  const iat = Math.floor(Date.now() / 1000);
  const exp = iat + 3600;
  const keysHash = createHash('sha256').update(keys.join('\0')).digest('hex');
  const payload = `${iat}\0${exp}\0${args.user}\0${args.channel}\0${keysHash}`;
  return `${iat}:${exp}:${createHmac('sha256', args.secret).update(payload).digest('hex')}`;
}

async function backendSet(entity) {
  await fetch(`${args.backendUrl}/_set`, { method: 'POST', body: JSON.stringify(entity) });
}

run(async () => {
  const c = newClient({ token: args.token });
  const sub = c.newSharedPollSubscription(args.channel, {
    getSignature: async (ctx) => ({ keys: ctx.keys, signature: sign(ctx.keys) }),
  });
  sub.on('subscribed', (ctx) => emit('subscribed', { channel: ctx.channel }));
  sub.on('update', (ctx) => emit('update', {
    key: ctx.key, data: dec(ctx.data), version: ctx.version, removed: !!ctx.removed,
  }));
  sub.on('error', (ctx) => emit('sub_error', { type: ctx.type, code: ctx.error?.code, message: ctx.error?.message }));
  sub.subscribe();
  c.connect();
  await sub.ready(ms(5000));
  sub.track(['a', 'b']);
  await until((e) => e.event === 'update' && e.key === 'a', 5000, 'a');
  await until((e) => e.event === 'update' && e.key === 'b', 5000, 'b');
  await backendSet({ key: 'a', version: 2, data: { v: 'a2' } });
  await until((e) => e.event === 'update' && e.key === 'a' && e.data?.v === 'a2', 5000, 'a2 from a poll');
  await api('shared_poll_publish', { channel: args.channel, key: 'b', version: 5, data: { v: 'b5' } });
  await until((e) => e.event === 'update' && e.key === 'b' && e.data?.v === 'b5', 5000, 'b5 published');
  await backendSet({ key: 'a', removed: true });
  await until((e) => e.event === 'update' && e.key === 'a' && e.removed, 5000, 'a removed');
  sub.untrack(['b']);
  emit('tracked', { keys: [...sub.trackedKeys()] });
  c.disconnect();
});
