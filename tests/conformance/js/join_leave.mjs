// Join/leave and presence: client A (args.token) subscribes with joinLeave, client B
// (args.otherToken) joins and then leaves the channel; A reports what it saw and the presence
// and presence stats while B is in.
import { args, emit, until, newClient, watch, run, ms } from './lib.mjs';

run(async () => {
  const a = newClient({ token: args.token });
  const subA = watch(a.newSubscription(args.channel, { joinLeave: true }));
  subA.subscribe();
  a.connect();
  await subA.ready(ms(5000));

  const b = newClient({ token: args.otherToken });
  const subB = b.newSubscription(args.channel);
  subB.subscribe();
  b.connect();
  await subB.ready(ms(5000));
  await until((e) => e.event === 'join' && e.info.user === args.otherUser, 5000, 'join of B');

  const presence = await subA.presence();
  emit('presence', { users: Object.values(presence.clients).map((c) => c.user).sort() });
  const stats = await subA.presenceStats();
  emit('presence_stats', { numClients: stats.numClients, numUsers: stats.numUsers });

  subB.unsubscribe();
  await until((e) => e.event === 'leave' && e.info.user === args.otherUser, 5000, 'leave of B');
  b.disconnect();
  a.disconnect();
});
