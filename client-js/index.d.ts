/**
 * Taskcast client: the Centrifugo client protocol v2 (JSON) over WebSocket with SSE /
 * HTTP-streaming emulation fallback, and a version-gated task store (seed §8, §9, §13).
 *
 * @example
 * import { TaskFeed } from '@taskcast/client';
 * const feed = new TaskFeed({
 *   api: { baseUrl: '', headers: () => ({ Authorization: `Bearer ${idToken}` }) },
 *   endpoints: [
 *     { transport: 'websocket', endpoint: 'wss://rt.example.com/connection/websocket' },
 *     { transport: 'sse', endpoint: 'https://rt.example.com/connection/sse' },
 *   ],
 *   clientOptions: { emulationEndpoint: 'https://rt.example.com/emulation' },
 * });
 * const stop = feed.subscribe(() => render(feed.getSnapshot()));
 * await feed.start();
 */

// --- codes ----------------------------------------------------------------------------------------

export declare const DisconnectCode: Readonly<Record<string, number>>;
export declare const ErrorCode: Readonly<Record<string, number>>;
export declare const UnsubscribeCode: Readonly<Record<string, number>>;
export declare const ClientCode: Readonly<Record<string, number>>;
/** 3500–3999 and 4500–4999 (and 1009): never reconnect. */
export declare function isTerminalDisconnect(code: number): boolean;
/** code < 100, temporary, or 109: retry. */
export declare function isTemporaryError(error: { code: number; temporary?: boolean }): boolean;

// --- emitter / backoff ----------------------------------------------------------------------------

export type Unbind = () => void;

/** nanoevents-style emitter: `on()` returns an unbind function; a throwing listener never breaks `emit`. */
export declare class Emitter<Events extends { [K in keyof Events]: (...args: any[]) => void } = any> {
  on<K extends keyof Events & string>(event: K, cb: Events[K]): Unbind;
  emit<K extends keyof Events & string>(event: K, ...args: Parameters<Events[K]>): void;
  onListenerError: (err: unknown, event: string) => void;
}

/** Full-jitter exponential backoff in ms: random(0, min(max, min·2^attempt)), at least min. */
export declare function backoffMs(attempt: number, minMs: number, maxMs: number, random?: () => number): number;
/** baseMs ± spread (0..1). */
export declare function jittered(baseMs: number, spread: number, random?: () => number): number;

// --- client ---------------------------------------------------------------------------------------

export type TransportName = 'websocket' | 'sse' | 'http_stream';
export interface TransportEndpoint {
  transport: TransportName;
  endpoint: string;
}
export interface StreamPosition {
  epoch: string;
  offset: number;
}
export interface ReplyError {
  code: number;
  message: string;
  temporary?: boolean;
}

export interface ClientOptions {
  /** Connection JWT; or leave empty and provide getToken. */
  token?: string;
  /** Called for the first token when none is given, after error 109, and before expiry (refresh). Throw UnauthorizedError to stop. */
  getToken?: (ctx: {}) => Promise<string>;
  /** WebSocket constructor (Node 20: `ws`). Defaults to globalThis.WebSocket. */
  websocket?: unknown;
  /** EventSource constructor (Node: `eventsource`). Defaults to globalThis.EventSource. */
  eventsource?: unknown;
  /** fetch (emulation commands, http_stream). Defaults to globalThis.fetch. */
  fetch?: typeof fetch;
  /** POST endpoint of emulation transports; must be absolute in Node. Default '/emulation'. */
  emulationEndpoint?: string;
  name?: string;
  /** Reply timeout in ms (default 5000). */
  timeout?: number;
  minReconnectDelay?: number;
  maxReconnectDelay?: number;
  /** Extra ms allowed beyond the server's ping interval before the transport is dropped (default 10000). */
  maxServerPingDelay?: number;
  random?: () => number;
}

export type ClientState = 'disconnected' | 'connecting' | 'connected';
export interface StateContext {
  code: number;
  reason: string;
}
export interface SubscribedContext {
  channel: string;
  recovered: boolean;
  wasRecovering: boolean;
  recoverable: boolean;
  streamPosition?: StreamPosition;
}
export interface PublicationContext {
  channel: string;
  data: any;
  offset?: number;
  tags?: Record<string, string>;
}

export interface ClientEvents {
  state: (state: ClientState) => void;
  connecting: (ctx: StateContext) => void;
  connected: (ctx: { client: string; transport: TransportName; data?: unknown }) => void;
  disconnected: (ctx: StateContext) => void;
  error: (ctx: { type: string; error: ReplyError }) => void;
  /** Server-side subscriptions (the connection token's `channels`). */
  subscribed: (ctx: SubscribedContext) => void;
  unsubscribed: (ctx: { channel: string; code: number; reason: string }) => void;
  publication: (ctx: PublicationContext) => void;
  message: (ctx: { data: unknown }) => void;
}

export declare class UnauthorizedError extends Error {}
/** No usable transport implementation (e.g. Node 20 without `ws`): reported once, never retried. */
export declare class ConfigurationError extends Error {
  readonly code: 'NO_TRANSPORT';
}

export declare class Client extends Emitter<ClientEvents> {
  constructor(endpoints: string | TransportEndpoint[], options?: ClientOptions);
  readonly state: ClientState;
  readonly transportName: TransportName | '';
  /** Endpoints whose transport has an implementation here (tried in order). */
  readonly endpoints: TransportEndpoint[];
  /** Endpoints skipped for a missing implementation (reported as an `error` of type 'configuration'). */
  readonly unusable: TransportEndpoint[];
  connect(): void;
  disconnect(): void;
  ready(timeoutMs?: number): Promise<void>;
  newSubscription(channel: string, options?: SubscriptionOptions): Subscription;
  getSubscription(channel: string): Subscription | null;
  removeSubscription(sub: Subscription | null): void;
}

export interface SubscriptionOptions {
  token?: string;
  /** Subscription JWT source, e.g. POST /api/realtime/subscription-token; also used for sub_refresh. */
  getToken?: (ctx: { channel: string }) => Promise<string>;
  minResubscribeDelay?: number;
  maxResubscribeDelay?: number;
}
export type SubscriptionState = 'unsubscribed' | 'subscribing' | 'subscribed';
export interface SubscriptionEvents {
  state: (state: SubscriptionState) => void;
  subscribing: (ctx: { channel: string; code: number; reason: string }) => void;
  subscribed: (ctx: SubscribedContext) => void;
  unsubscribed: (ctx: { channel: string; code: number; reason: string }) => void;
  publication: (ctx: PublicationContext) => void;
  error: (ctx: { channel: string; error: ReplyError }) => void;
}
export declare class Subscription extends Emitter<SubscriptionEvents> {
  readonly channel: string;
  readonly state: SubscriptionState;
  readonly position: StreamPosition | null;
  subscribe(): void;
  unsubscribe(): void;
}

export declare class WebSocketTransport {
  constructor(endpoint: string, WebSocketImpl: unknown);
}
export declare class SseTransport {
  constructor(endpoint: string, emulationEndpoint: string, EventSourceImpl: unknown, fetchImpl: typeof fetch);
}
export declare class HttpStreamTransport {
  constructor(endpoint: string, emulationEndpoint: string, fetchImpl: typeof fetch);
}

// --- Status API -------------------------------------------------------------------------------

export type Lifecycle = 'PENDING' | 'RUNNING' | 'SUCCEEDED' | 'FAILED' | 'CANCELLED';
export type Health = 'HEALTHY' | 'DEGRADED' | 'STALE';
export interface DataBody {
  schema: string;
  value: Record<string, unknown>;
}
export interface Progress {
  current: number;
  total?: number;
  unit?: string;
}
export interface PublicError {
  category: string;
  code: string;
  retryable: boolean;
  userMessage: string;
}
/** How the task's registered status definition presents a businessStatus (seed §4.6); null when unknown. */
export interface StatusDisplay {
  name: string;
  severity: string;
  /** colorToken, iconKey, i18n keys — metadata, never HTML. */
  presentation?: Record<string, unknown> | null;
}
/** schema/json/task-summary.schema.json `task`. */
export interface SummaryTask {
  id: string;
  projectId?: string | null;
  product: string;
  taskType: string;
  title: string;
  lifecycleStatus: Lifecycle;
  businessStatus: string;
  businessStatusDisplay?: StatusDisplay | null;
  health: Health;
  /** decimal string; compare as BigInt */
  version: string;
  /** The current task attempt (seed §3.3): 1 until a retry (`POST /internal/v1/tasks/{id}/attempts`). */
  taskAttempt?: number;
  createdAt: string;
  startedAt: string | null;
  finishedAt: string | null;
  elapsedMs: number | null;
  durationMs: number | null;
  asOf: string;
  currentOperation?: { stepId: string; operationCode: string; displayName?: string | null; progress?: Progress | null } | null;
  failedStepId?: string | null;
  failureCode?: string | null;
  failureMessage?: string | null;
  summaryData?: DataBody | null;
}
export interface Notice {
  id: string;
  type: string;
  level: 'INFO' | 'WARNING' | 'ERROR';
  title: string;
  message: string;
  stepId?: string;
  operationCode?: string;
  errorCode?: string;
  retryable?: boolean;
  requiresAction: boolean;
  actions?: string[];
}
export interface SummaryMessage {
  kind: 'task.summary';
  schemaVersion: 1;
  task: SummaryTask;
  notice?: Notice;
}
export interface Step {
  id: string;
  operationCode: string;
  /** The operation's registered displayName. */
  displayName?: string | null;
  attempt: number;
  version: string;
  lifecycleStatus: Lifecycle;
  businessStatus: string;
  businessStatusDisplay?: StatusDisplay | null;
  health: Health;
  startedAt: string | null;
  finishedAt: string | null;
  durationMs: number | null;
  durationSource: string | null;
  queueDurationMs: number | null;
  lastHeartbeatAt: string | null;
  progress: Progress | null;
  data: DataBody | null;
  error: PublicError | null;
}
export interface TriggerEvent {
  eventId: string;
  eventType: string;
  stepId: string | null;
  operationCode: string | null;
  stepAttempt: number | null;
  stepVersion: string | null;
  durationMs: number | null;
  data: DataBody | null;
  error: PublicError | null;
  committedAt: string;
}
/** schema/json/task-detail.schema.json (snapshots have triggerEvent null). */
export interface DetailMessage {
  kind: 'task.detail';
  schemaVersion: 1;
  taskId: string;
  version: string;
  taskVersion: string;
  /** The current task attempt at this version; 1 until a retry. */
  taskAttempt?: number;
  title: string;
  product: string;
  taskType: string;
  lifecycleStatus: Lifecycle;
  businessStatus: string;
  businessStatusDisplay?: StatusDisplay | null;
  health: Health;
  createdAt: string;
  startedAt: string | null;
  finishedAt: string | null;
  asOf: string;
  failedStepId?: string | null;
  failureCode?: string | null;
  failureMessage?: string | null;
  durations: { queueMs: number | null; runMs: number | null; totalMs: number | null; elapsedMs: number | null; durationSource: string | null };
  steps: Step[];
  triggerEvent: TriggerEvent | null;
  [extra: string]: unknown;
}
export interface TimelineEvent extends TriggerEvent {
  taskVersion: string;
  taskAttempt?: number;
  [extra: string]: unknown;
}
export interface EventsPage {
  taskId: string;
  taskVersion: string;
  afterTaskVersion: string;
  events: TimelineEvent[];
  nextAfterTaskVersion: string;
  hasMore: boolean;
  purged: boolean;
  oldestAvailableTaskVersion: string | null;
}
export interface RealtimeSession {
  token: string;
  expiresAt: number;
  sessionId: string;
  channels: string[];
  maxDetailSubscriptions?: number;
}

export interface StatusApiOptions {
  baseUrl?: string;
  fetch?: typeof fetch;
  headers?: Record<string, string> | (() => Record<string, string> | Promise<Record<string, string>>);
}
export declare class ApiError extends Error {
  status: number;
  code: string;
  retryable: boolean;
}
export declare class StatusApi {
  constructor(options?: StatusApiOptions);
  listTasks(q?: { limit?: number; cursor?: string }): Promise<{ items: SummaryTask[]; nextCursor: string | null }>;
  getTask(taskId: string): Promise<DetailMessage>;
  events(taskId: string, afterTaskVersion: string | number, limit?: number): Promise<EventsPage>;
  batchGet(body: { taskIds?: string[]; knownVersions?: Record<string, string> }): Promise<{ tasks: SummaryTask[]; unchanged: string[]; notFound: string[]; asOf: string }>;
  session(): Promise<RealtimeSession>;
  subscriptionToken(taskId: string, sessionId: string): Promise<{ token: string; channel: string; expiresAt: number }>;
  releaseSubscription(taskId: string, sessionId: string): Promise<{ released: boolean }>;
  /** POST /api/realtime/broadcast-token (seed §6.6): the server names the channel from the user's identity. */
  broadcastToken(scope: 'project' | 'tenant' | 'system', projectId?: string): Promise<{ token: string; channel: string; expiresAt: number }>;
  /** POST /api/telemetry/client (204); rejects with an ApiError. */
  telemetry(report: TelemetryReport): Promise<unknown>;
}

// --- the store (pure) -----------------------------------------------------------------------------

export type ConnectionStatus = 'LIVE' | 'RECOVERING' | 'STALE';
export interface ShownNotice extends Notice {
  taskId: string;
  version: string;
}
export interface DetailEntry {
  phase: 'buffering' | 'ready';
  buffer: DetailMessage[];
  detail: Omit<DetailMessage, 'triggerEvent'> | null;
  timeline: Record<string, TimelineEntry>;
  floor: string;
  fetching: string | null;
  checkedVersion: string | null;
  timelineFailed: boolean;
  syncing: boolean;
  error: FeedError | null;
}
export interface TimelineEntry {
  taskVersion: string;
  eventId: string;
  /** e.g. STEP_COMPLETED, TASK_ATTEMPT_CREATED (a task retry: `taskAttempt` is the new attempt) */
  eventType: string;
  /** The task attempt at this version; null when the source did not say. */
  taskAttempt: number | null;
  stepId: string | null;
  operationCode: string | null;
  durationMs: number | null;
  data: DataBody | null;
  error: PublicError | null;
  committedAt: string;
}
export interface StoreState {
  connection: ConnectionStatus;
  list: {
    phase: 'idle' | 'buffering' | 'ready';
    buffer: { message: SummaryMessage; at: number }[];
    loaded: boolean;
    syncing: boolean;
    nextCursor: string | null;
    loadingMore: boolean;
    error: FeedError | null;
  };
  tasks: Record<string, SummaryTask>;
  clocks: Record<string, { elapsedMs: number | null; receivedAt: number }>;
  baseline: Record<string, string>;
  details: Record<string, DetailEntry>;
  notices: { seen: Record<string, true>; queue: ShownNotice[] };
}
/** Everything the reducer understands; `at` is performance.now() when the message arrived. */
export type StoreAction =
  | { type: 'connection'; status: ConnectionStatus }
  | { type: 'list/subscribed' }
  | { type: 'summary'; message: SummaryMessage; at: number }
  | { type: 'list/snapshot'; tasks: SummaryTask[]; at: number; final?: boolean; nextCursor?: string | null }
  | { type: 'list/loading' }
  | { type: 'list/failed'; error: unknown; retrying?: boolean }
  | { type: 'list/moreLoading'; loading: boolean }
  | { type: 'list/page'; tasks: SummaryTask[]; nextCursor: string | null; at: number }
  | { type: 'detail/loading'; taskId: string }
  | { type: 'detail/failed'; taskId: string; error: unknown; retrying?: boolean }
  | { type: 'detail/eventsRetry'; taskId: string }
  | { type: 'task/remove'; taskId: string }
  | { type: 'detail/open'; taskId: string }
  | { type: 'detail/close'; taskId: string }
  | { type: 'detail'; message: DetailMessage; at?: number }
  | { type: 'detail/resubscribed'; taskId: string }
  | { type: 'detail/snapshot'; detail: DetailMessage; at?: number }
  | { type: 'detail/eventsRequested'; taskId: string; after: string }
  | { type: 'detail/events'; taskId: string; page: EventsPage }
  | { type: 'detail/eventsFailed'; taskId: string }
  | { type: 'notice/dismiss'; id: string };

export declare const TERMINAL: readonly Lifecycle[];
export declare function initialState(): StoreState;
/** Pure: never mutates `state`; returns the same object when nothing changed. */
export declare function reduce(state: StoreState, action: StoreAction): StoreState;
export declare function compareVersions(a: string | null | undefined, b: string | null | undefined): -1 | 0 | 1;
export declare function isTerminal(status: string): boolean;
/** What the task selectors read: the reducer's StoreState or TaskFeed's public FeedState. */
export type TasksState = Pick<StoreState, 'tasks' | 'clocks'>;
/** Newest first (createdAt, then id). */
export declare function taskList(state: TasksState): SummaryTask[];
/** Backend final value at terminal states; elapsedMs + (now − receivedAt) while RUNNING. */
export declare function displayElapsedMs(state: TasksState, taskId: string, now: number): number | null;
export declare function hasTicking(state: TasksState): boolean;
export declare function activeTaskIds(state: TasksState): string[];
export declare function knownVersions(state: TasksState, ids: string[]): Record<string, string>;
/** An open detail's timeline, oldest first. */
export declare function timelineOf(state: StoreState | FeedState, taskId: string): readonly TimelineEntry[];
export declare function timelineEntry(taskVersion: string, e: TriggerEvent & { taskAttempt?: number }, attempt?: number | null): TimelineEntry;
/** Version after which /events must be read, or null. */
export declare function timelineGap(state: StoreState, taskId: string): string | null;
export type CardKind = 'document-parse' | 'video-transcode' | 'file-prepare' | 'result-persist' | 'review' | 'generic';
export declare function cardKind(step: { operationCode: string; data?: DataBody | null }): CardKind;
export declare function lruTouch(order: string[], id: string, cap: number): { order: string[]; evicted: string[] };

// --- the public view (what TaskFeed hands out) ---------------------------------------------------

/** A failed read, as the state shows it. */
export interface FeedError {
  code: string;
  message: string;
}
/** One open detail in the public state. */
export interface FeedDetail {
  /** 'ready' once a detail snapshot was applied. */
  readonly phase: 'loading' | 'ready';
  /** The detail gate (seed §8.2): render the detail header and steps from here, never mixed with state.tasks. */
  readonly detail: Omit<DetailMessage, 'triggerEvent'> | null;
  /** Oldest first. */
  readonly timeline: readonly TimelineEntry[];
  /** Contiguous from the oldest available version to detail.version (holes are being read from /events). */
  readonly timelineComplete: boolean;
  /** The summary gate has a higher version: a detail snapshot is being read (when not LIVE). */
  readonly behind: boolean;
  /** A read of this detail is in flight, waiting for a retry, or the detail is behind. */
  readonly syncing: boolean;
  /** The last failed read (cleared by the next snapshot). */
  readonly error: FeedError | null;
}
/**
 * TaskFeed's public state: immutable, and the same object while nothing changed (so it can be
 * returned by useSyncExternalStore's getSnapshot). Unchanged tasks and details keep their identity.
 */
export interface FeedState {
  readonly connection: ConnectionStatus;
  readonly list: {
    /** 'ready' once any list snapshot was applied: `tasks` is then the last confirmed state. */
    readonly phase: 'idle' | 'loading' | 'ready';
    /** A list (re-)read is in flight or waiting for its retry. */
    readonly syncing: boolean;
    /** GET /api/tasks has more pages: call feed.loadMore(). */
    readonly hasMore: boolean;
    readonly loadingMore: boolean;
    /** The last failed list read (cleared on success); it is retried with backoff. */
    readonly error: FeedError | null;
  };
  /** taskId → the summary gate's task. */
  readonly tasks: Readonly<Record<string, SummaryTask>>;
  /** taskId → base of the locally ticking elapsed time (for displayElapsedMs / taskTimes). */
  readonly clocks: Readonly<Record<string, { elapsedMs: number | null; receivedAt: number }>>;
  /** Open details only (feed.openDetail). */
  readonly details: Readonly<Record<string, FeedDetail>>;
  /** Notices to show (toasts), oldest first; dismiss with feed.dismissNotice(id). */
  readonly notices: readonly ShownNotice[];
}
/** The durations of seed §9.3 for one task. */
export interface TaskTimes {
  /** When the task was queued (created). */
  createdAt: string;
  startedAt: string | null;
  finishedAt: string | null;
  /** startedAt − createdAt; null until the task started. */
  queueMs: number | null;
  /** Start → authoritative terminal state: the backend's durationMs at terminal states, locally ticking while RUNNING; null before the start. */
  durationMs: number | null;
  running: boolean;
}
/** @param now performance.now() (the `tick` event's argument) */
export declare function taskTimes(state: TasksState, taskId: string, now: number): TaskTimes | null;
/** A memoizing StoreState → FeedState projection (what TaskFeed uses; for your own reducer wiring). */
export declare function viewProjector(): (state: StoreState) => FeedState;

// --- Telemetry (opt-in; docs/client-js.md "Telemetry") -------------------------------------------

export type TelemetryCount =
  | 'connects'
  | 'connectFailures'
  | 'reconnects'
  | 'recoveries'
  | 'recoveredFalse'
  | 'unknownOperations'
  | 'unknownSchemas'
  | 'clockSkew';
export type TelemetrySample = 'commitToVisibleMs' | 'snapshotLoadMs' | 'noticeDisplayMs';
export declare const TELEMETRY_COUNTS: readonly TelemetryCount[];
export declare const TELEMETRY_SAMPLES: readonly TelemetrySample[];
/** The wire shape of one report (status_api/telemetry.py checks every field and range). */
export interface TelemetryReport {
  v: 1;
  transport: '' | TransportName;
  counts: Record<TelemetryCount | 'connectAttempts', number>;
  samples: Partial<Record<TelemetrySample, number[]>>;
}
export interface TelemetryOptions {
  /** At most one report per interval, none when nothing happened (default 30000; doubled after a 429/5xx, up to 10 min). */
  intervalMs?: number;
  /** Samples per report, all kinds together: a uniform reservoir per kind (default 180; the server allows 200). */
  maxSamples?: number;
  /** Epoch milliseconds, compared with the server's committedAt (default Date.now). */
  wallClock?: () => number;
  random?: () => number;
}
export declare class Telemetry {
  constructor(options: TelemetryOptions & { send: (report: TelemetryReport) => Promise<unknown> });
  /** False after a 401/403/404 (telemetry off on the server): nothing is sent any more. */
  readonly enabled: boolean;
  readonly empty: boolean;
  setTransport(name: TransportName): void;
  count(name: TelemetryCount, n?: number): void;
  /** Out-of-range values (negative, above the server's ceiling) are ignored. */
  sample(name: TelemetrySample, ms: number): void;
  /** Sample `now - committedAt` as `kind`; a negative delay (client clock behind) counts clockSkew instead. */
  committed(kind: 'commitToVisibleMs' | 'noticeDisplayMs', committedAt: string): void;
  /** The pending report. */
  report(): TelemetryReport;
  start(): void;
  stop(): void;
  /** Send the pending report now (nothing when empty or disabled); never rejects. */
  flush(): Promise<void>;
}

// --- TaskFeed (effects) ---------------------------------------------------------------------------

export interface TaskFeedOptions {
  api: StatusApi | StatusApiOptions;
  endpoints: string | TransportEndpoint[];
  clientOptions?: Omit<ClientOptions, 'token' | 'getToken'>;
  /** Detail subscriptions kept open (LRU beyond it); capped by the session's maxDetailSubscriptions. Default 20. */
  maxDetailSubscriptions?: number;
  /**
   * true (default): each detail subscription carries a token from POST /api/realtime/subscription-token.
   * false: no token; the gateway's subscribe proxy asks the Status API (its `task_detail` namespace has
   * `subscribe_proxy_enabled`). Either way a limit refusal closes the oldest invisible detail and asks once more.
   */
  detailTokens?: boolean;
  /** Mean interval of the jittered status:batchGet check while not LIVE (default 30000 ± 30%). */
  checkIntervalMs?: number;
  /** Mean interval (±30 %) of the same check while LIVE (seed §13.2: repairs a silent loss); 0 = off. Default 60000. */
  liveCheckIntervalMs?: number;
  /** RECOVERING turns STALE after this long (default 10000). */
  staleAfterMs?: number;
  /** Shared elapsed-time ticker period (default 1000). */
  tickMs?: number;
  /** Page size of GET /api/tasks (first page and feed.loadMore()). Default 50. */
  listLimit?: number;
  /** Read the list snapshot without a subscription when none is established this long after start (default 3000). */
  snapshotWaitMs?: number;
  /** Backoff of failed snapshot reads (list, batchGet, detail, timeline): full jitter between these (default 1000, 30000). */
  retryMinMs?: number;
  retryMaxMs?: number;
  now?: () => number;
  random?: () => number;
  /**
   * Opt-in telemetry to the Status API (POST /api/telemetry/client): connection outcomes,
   * reconnects, recovered=false, snapshot load time, unknown operations/schemas, notice display
   * latency and commit→visible delay. true = defaults; default off.
   */
  telemetry?: boolean | TelemetryOptions;
  /** For visibilitychange recalibration; null to disable (Node). */
  document?: { visibilityState: string; addEventListener: Function; removeEventListener: Function } | null;
}
export interface TaskFeedEvents {
  change: (state: FeedState, action: StoreAction) => void;
  /** The shared timer: re-render elapsed times with displayElapsedMs(state, id, now). */
  tick: (now: number) => void;
  error: (err: unknown) => void;
  detailClosed: (ctx: { taskId: string; channel: string; code: number; reason: string }) => void;
}
export declare class TaskFeed extends Emitter<TaskFeedEvents> {
  constructor(options: TaskFeedOptions);
  /** The public state (memoized). */
  readonly state: FeedState;
  /** The reducer's internal state (buffers, baselines): for debugging, not for rendering. */
  readonly store: StoreState;
  readonly client: Client | null;
  readonly api: StatusApi;
  /** The feed's telemetry (options.telemetry), null when off; flushed on stop() and when the page is hidden. */
  readonly telemetry: Telemetry | null;
  /** True between start() and stop(). */
  readonly running: boolean;
  /**
   * Start following the user's tasks. Resolves once started (not once LIVE: the list snapshot also
   * loads while realtime is down); rejects with ConfigurationError (no usable transport) or
   * UnauthorizedError (401 from /api/realtime/session). Idempotent; start() after stop() works.
   */
  start(): Promise<void>;
  /** Stop network activity and timers; keeps the state and emits no change. */
  stop(): void;
  /** For useSyncExternalStore: calls `fn` after every change; returns the unsubscribe function. Pre-bound. */
  readonly subscribe: (fn: () => void) => () => void;
  /** For useSyncExternalStore: the current FeedState (same object until a change). Pre-bound. */
  readonly getSnapshot: () => FeedState;
  dispatch(action: StoreAction): void;
  /** Follow one task's detail (subscription + snapshot); past maxDetailSubscriptions the least recently opened closes. */
  openDetail(taskId: string): void;
  closeDetail(taskId: string): void;
  /** Mark an open detail visible or not; invisible ones are evicted first when room is needed (seed §6.5). */
  setDetailVisible(taskId: string, visible: boolean): void;
  /** Read the next page of GET /api/tasks (no-op when !state.list.hasMore or already loading). */
  loadMore(): Promise<void>;
  dismissNotice(id: string): void;
  /** One status:batchGet of the non-terminal tasks. */
  check(options?: { recalibrate?: boolean }): Promise<void>;
  recalibrate(): Promise<void>;
}
