// Connects with an expired token (server: 109 -> getToken), then with a token expiring in a few
// seconds; the SDK refreshes it through getToken at ttl. Proves the connection still works after.
// getToken mints args.user's tokens with the lifetimes args.expiries (seconds) when asked, or
// hands out the pre-minted args.tokens in turn.
import { args, emit, until, count, api, newClient, watch, run, mintToken, ms, enc } from './lib.mjs';

run(async () => {
  let calls = 0;
  const c = newClient({
    token: args.token,
    getToken: async () => {
      const token = args.expiries
        ? mintToken(args.user, args.expiries[Math.min(calls, args.expiries.length - 1)])
        : args.tokens[Math.min(calls, args.tokens.length - 1)];
      calls += 1;
      emit('get_token', { call: calls });
      return token;
    },
  });
  const sub = watch(c.newSubscription(args.channel));
  sub.subscribe();
  c.connect();
  await until((e) => e.event === 'connected', 5000, 'connected');
  await sub.ready(ms(5000));
  await until((e) => e.event === 'get_token' && e.call === 2, 10000, 'refresh getToken');
  // Commands are answered in order: this reply comes after the refresh reply.
  await new Promise((resolve) => setTimeout(resolve, 0));
  await sub.publish(enc({ after: 'refresh' }));
  await until((e) => e.event === 'publication' && e.data.after === 'refresh', 5000, 'pub after refresh');
  await api('publish', { channel: args.channel, data: { after: 'refresh-api' } });
  await until((e) => e.event === 'publication' && e.data.after === 'refresh-api', 5000, 'api pub after refresh');
  emit('state', { state: c.state, connects: count((e) => e.event === 'connected') });
  c.disconnect();
});
