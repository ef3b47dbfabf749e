// Public entry point of the Taskcast client (zero runtime dependencies).
export { Client, ConfigurationError, UnauthorizedError } from './client.js';
export { Subscription } from './subscription.js';
export { ClientCode, DisconnectCode, ErrorCode, UnsubscribeCode, isTemporaryError, isTerminalDisconnect } from './codes.js';
export { Emitter } from './emitter.js';
export { backoffMs, jittered } from './backoff.js';
export { WebSocketTransport } from './transport-ws.js';
export { HttpStreamTransport, SseTransport } from './transport-sse.js';
export { ApiError, StatusApi } from './api.js';
export { TaskFeed } from './tasks.js';
export { TELEMETRY_COUNTS, TELEMETRY_SAMPLES, Telemetry } from './telemetry.js';
export {
  TERMINAL,
  activeTaskIds,
  cardKind,
  compareVersions,
  displayElapsedMs,
  hasTicking,
  initialState,
  isTerminal,
  knownVersions,
  lruTouch,
  reduce,
  taskList,
  timelineEntry,
  timelineGap,
  timelineOf,
} from './store.js';
export { taskTimes, viewProjector } from './view.js';
