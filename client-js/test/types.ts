// Type test: checked by `npm run typecheck` (tsc --noEmit) against index.d.ts.
import { Client, TaskFeed, displayElapsedMs, initialState, reduce, type StoreAction, type SummaryMessage } from '../index.js';

const client = new Client([{ transport: 'websocket', endpoint: 'ws://x' }], { getToken: async () => 't' });
const off: () => void = client.on('publication', (ctx) => ctx.channel.toUpperCase());
off();
const sub = client.newSubscription('task_detail:t/1', { getToken: async ({ channel }) => channel });
sub.on('subscribed', (ctx) => (ctx.recovered ? 1 : 0));

declare const message: SummaryMessage;
const action: StoreAction = { type: 'summary', message, at: 0 };
const state = reduce(initialState(), action);
const elapsed: number | null = displayElapsedMs(state, 'a', 0);
void elapsed;

const feed = new TaskFeed({ api: { baseUrl: '' }, endpoints: 'ws://x', document: null });
feed.on('tick', (now) => now.toFixed());
// @ts-expect-error unknown action type
reduce(state, { type: 'nope' });
// @ts-expect-error versions are decimal strings
const bad: SummaryMessage['task']['version'] = 12;
void bad;
