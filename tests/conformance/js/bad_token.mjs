// A token with a wrong signature: the server closes with 3500 and the SDK must not reconnect.
import { args, emit, until, count, newClient, run, ms } from './lib.mjs';

run(async () => {
  const c = newClient({ token: args.token, minReconnectDelay: 50, maxReconnectDelay: 200 });
  c.connect();
  await until((e) => e.event === 'disconnected', 5000, 'disconnected');
  // Absence check: a reconnect loop would show connecting events within this bounded window.
  await until(() => count((e) => e.event === 'connecting') > 1, ms(args.quietMs)).catch(() => null);
  emit('summary', { connecting: count((e) => e.event === 'connecting'), state: c.state });
});
