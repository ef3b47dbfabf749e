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

// The public state and the React binding.
import { taskTimes, type FeedState } from '../index.js';
const snap: FeedState = feed.getSnapshot();
const unsubscribe: () => void = feed.subscribe(() => undefined);
unsubscribe();
feed.on('change', (s) => s.notices.map((n) => n.id));
const times = taskTimes(snap, 'a', 0);
if (times) void times.queueMs;
void snap.list.hasMore;
// @ts-expect-error internals are not in the public state
void snap.list.buffer;
// @ts-expect-error the public state is read-only
snap.connection = 'LIVE';
void feed.loadMore();

// @taskcast/client/store is the pure store only.
import * as store from '../store.js';
const s2: store.StoreState = store.reduce(store.initialState(), { type: 'list/subscribed' });
void s2;
// @ts-expect-error TaskFeed is not exported by the store entry
void store.TaskFeed;

// Opt-in telemetry.
import { Telemetry, type TelemetryReport } from '../index.js';
const withTelemetry = new TaskFeed({ api: { baseUrl: '' }, endpoints: 'ws://x', document: null, telemetry: { intervalMs: 60000 } });
void withTelemetry.telemetry?.flush();
const tele = new Telemetry({ send: async (r: TelemetryReport) => r.counts.connects, maxSamples: 30 });
tele.sample('commitToVisibleMs', 12);
// @ts-expect-error not a sample kind
tele.sample('latency', 12);
