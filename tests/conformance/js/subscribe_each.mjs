// Subscribes to args.subs ([{channel, token?}]) one after another and reports each outcome:
// "subscribed", "unsubscribed" (with code) or the client being disconnected (with code).
import { args, emit, until, newClient, watch, run, ms } from './lib.mjs';

run(async () => {
  const c = newClient({ token: args.token });
  c.connect();
  await c.ready(ms(5000));
  for (const spec of args.subs) {
    const opts = spec.token ? { token: spec.token } : {};
    const sub = watch(c.newSubscription(spec.channel, opts));
    sub.subscribe();
    const outcome = await until((e) => (
      ((e.event === 'subscribed' || e.event === 'unsubscribed') && e.channel === spec.channel)
      || e.event === 'disconnected'), 5000, `outcome of ${spec.channel}`);
    emit('outcome', { channel: spec.channel, kind: outcome.event, code: outcome.code, reason: outcome.reason });
    if (outcome.event === 'disconnected') break;
  }
  c.disconnect();
});
