/**
 * `@taskcast/client/store`: the pure task store only (no Client, no TaskFeed, no I/O). The
 * declarations live in index.d.ts; this entry re-exports exactly what src/store.js exports.
 */
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
} from './index.js';
export type {
  CardKind,
  ConnectionStatus,
  DetailEntry,
  DetailMessage,
  EventsPage,
  FeedError,
  FeedState,
  Notice,
  ShownNotice,
  StoreAction,
  StoreState,
  SummaryMessage,
  SummaryTask,
  TasksState,
  TimelineEntry,
  TriggerEvent,
} from './index.js';
