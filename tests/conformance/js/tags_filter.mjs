// Publication tags filter: subscribes with tagsFilter {type eq goal}, publications with various
// tags go out through the server API; only the matching ones must arrive.
import { args, emit, until, count, api, newClient, watch, run } from './lib.mjs';

run(async () => {
  const c = newClient({ token: args.token });
  const sub = watch(c.newSubscription(args.channel, {
    tagsFilter: { op: 'or', nodes: [{ key: 'type', cmp: 'eq', val: 'goal' }, { key: 'minute', cmp: 'gte', val: '90' }] },
  }));
  sub.subscribe();
  c.connect();
  await until((e) => e.event === 'subscribed', 5000, 'subscribed');
  const pubs = [
    [{ n: 1 }, { type: 'foul', minute: '10' }],
    [{ n: 2 }, { type: 'goal', minute: '12' }],
    [{ n: 3 }, {}],
    [{ n: 4 }, { type: 'corner', minute: '91' }],
    [{ n: 5 }, { type: 'goal', minute: '93' }],
  ];
  for (const [data, tags] of pubs) await api('publish', { channel: args.channel, data, tags });
  await until(() => count((e) => e.event === 'publication') >= 3, 5000, 'filtered pubs');
  // A marker that matches, published last: everything before it has been delivered or dropped.
  await api('publish', { channel: args.channel, data: { n: 'end' }, tags: { type: 'goal' } });
  await until((e) => e.event === 'publication' && e.data.n === 'end', 5000, 'end marker');
  c.disconnect();
});
