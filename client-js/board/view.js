// The task board's markup: pure functions from the feed's public state (and `now`) to HTML
// strings. board.js owns the DOM, the URL and the feed; nothing here reads a clock or the page.
import { cardKind, displayElapsedMs, isTerminal, timelineOf } from '../src/index.js';
import {
  between,
  clock,
  exactTime,
  formatBytes,
  formatDuration,
  label,
  milestone,
  opName,
  statusName,
  relativeTime,
  stepState,
} from './format.js';

export const esc = (s) =>
  String(s ?? '').replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]);

/** A relative time that board.js refreshes in place; the exact time is the tooltip. */
export function timeTag(iso, wallNow, prefix = '') {
  if (!iso) return '';
  return `<time datetime="${esc(iso)}" data-rel="${esc(prefix)}" title="${esc(exactTime(iso))}">${esc(prefix)}${esc(relativeTime(iso, wallNow))}</time>`;
}

const HEALTH_TEXT = {
  DEGRADED: ['Degraded', 'An optional step failed: the result may be incomplete'],
  STALE: ['No heartbeat', 'A worker stopped reporting: the status is unconfirmed until it does'],
};

function healthChip(health, field = 'health') {
  const h = HEALTH_TEXT[health];
  return h ? `<span class="health ${health}" data-field="${field}" title="${esc(h[1])}">${h[0]}</span>` : '';
}

/** "running, status unconfirmed": the feed is STALE and this task was not finished when last confirmed. */
function unconfirmedChip(state, task) {
  if (state.connection !== 'STALE' || isTerminal(task.lifecycleStatus)) return '';
  return `<span class="health UNCONFIRMED" data-field="unconfirmed" title="Live updates are paused: this task was ${esc(
    task.lifecycleStatus.toLowerCase(),
  )} when last confirmed">Unconfirmed</span>`;
}

/** "Attempt 2" once a task was retried (taskAttempt > 1, seed §3.3); nothing for a first attempt. */
export function attemptChip(attempt, field = 'attempt') {
  return attempt > 1
    ? `<span class="attempt" data-field="${field}" title="Retried after a failure: this is attempt ${esc(attempt)}">Attempt ${esc(attempt)}</span>`
    : '';
}

/** What a timeline entry says: the event made readable; a task retry names its new attempt. */
export function timelineText(e, opNames = {}) {
  if (e.eventType === 'TASK_ATTEMPT_CREATED') {
    return `Retried${e.taskAttempt ? ` · attempt ${esc(e.taskAttempt)} started` : ' · new attempt started'}`;
  }
  return `${esc(label(e.eventType))}${e.operationCode ? ` · ${esc(opName(e.operationCode, opNames[e.operationCode]))}` : ''}${e.error ? ` — ${esc(e.error.userMessage)}` : ''}`;
}

export function progressOf(task) {
  if (task.lifecycleStatus === 'SUCCEEDED') return 100;
  const p = task.currentOperation?.progress;
  if (p && p.total) return Math.min(100, Math.round((p.current / p.total) * 100));
  return null;
}

export function bar(pct, status) {
  if (pct == null) {
    if (status === 'RUNNING') return `<div class="bar indeterminate"><span></span></div>`;
    return `<div class="bar ${status}"><span style="width:${status === 'FAILED' ? 100 : 0}%"></span></div>`;
  }
  return `<div class="bar ${status}"><span style="width:${pct}%"></span></div>`;
}

export function taskRow(state, t, { selected, now, wallNow }) {
  const op = t.currentOperation
    ? opName(t.currentOperation.operationCode, t.currentOperation.displayName)
    : statusName(t.businessStatus, t.businessStatusDisplay);
  const failure = t.lifecycleStatus === 'FAILED' && t.failureMessage ? `<div class="failure">${esc(t.failureMessage)}</div>` : '';
  const m = milestone(t);
  return `<li class="task ${t.id === selected ? 'selected' : ''}" data-task-id="${esc(t.id)}" data-version="${esc(t.version)}" data-status="${t.lifecycleStatus}" tabindex="0">
    <div class="row"><span class="title" title="${esc(t.title)}">${esc(t.title)}</span>${attemptChip(t.taskAttempt)}${healthChip(t.health)}${unconfirmedChip(state, t)}<span class="pill ${t.lifecycleStatus}" data-field="status">${t.lifecycleStatus.toLowerCase()}</span></div>
    ${bar(progressOf(t), t.lifecycleStatus)}
    <div class="meta"><span class="op">${esc(op)}</span><span class="when" data-field="milestone">${timeTag(m.at, wallNow, `${m.verb} `)}</span><span class="elapsed" data-field="elapsed">${formatDuration(displayElapsedMs(state, t.id, now))}</span></div>
    ${failure}
  </li>`;
}

function stepData(step) {
  const v = step.data?.value || {};
  switch (cardKind(step)) {
    case 'document-parse':
      if (v.totalPages) return `<span>Page <b>${esc(v.currentPage)}</b> of <b>${esc(v.totalPages)}</b></span>`;
      if (v.pageCount) return `<span><b>${esc(v.pageCount)}</b> pages</span>${v.language ? `<span>Language <b>${esc(v.language)}</b></span>` : ''}`;
      return '';
    case 'video-transcode':
      return v.totalFrames
        ? `<span>Frame <b>${esc(v.frame)}</b> / <b>${esc(v.totalFrames)}</b></span>${v.fps != null ? `<span><b>${esc(v.fps)}</b> fps</span>` : ''}${v.preset ? `<span>Preset <b>${esc(v.preset)}</b></span>` : ''}`
        : '';
    case 'file-prepare':
      return v.fileName
        ? `<span><b>${esc(v.fileName)}</b></span>${v.sizeBytes != null ? `<span data-field="size">${esc(formatBytes(v.sizeBytes))}</span>` : ''}`
        : '';
    default:
      return '';
  }
}

function stepTimes(step, wallNow) {
  const parts = [];
  if (step.queueDurationMs != null && step.startedAt) parts.push(`<span title="Queued: startedAt − createdAt">waited ${formatDuration(step.queueDurationMs)}</span>`);
  if (step.startedAt) parts.push(`<span>${timeTag(step.startedAt, wallNow, 'started ')}</span>`);
  if (step.finishedAt) parts.push(`<span>${timeTag(step.finishedAt, wallNow, 'finished ')}</span>`);
  return parts.length ? `<div class="times">${parts.join('')}</div>` : '';
}

function renderStep(step, i, taskStatus, wallNow) {
  const kind = cardKind(step);
  const st = stepState(step, taskStatus);
  const pct = step.progress?.total
    ? Math.min(100, Math.round((step.progress.current / step.progress.total) * 100))
    : step.lifecycleStatus === 'SUCCEEDED'
      ? 100
      : null;
  const data = stepData(step);
  const err = step.error
    ? `<div class="error-box" data-field="step-error"><span>${esc(step.error.userMessage)}</span><code>${esc(step.error.code)}</code>${step.error.retryable && !isTerminal(taskStatus) ? '<span>· will retry</span>' : ''}</div>`
    : '';
  const showBar = st.key === 'RUNNING' || (pct != null && st.key !== 'SKIPPED');
  const source = step.durationSource === 'MONOTONIC' ? ' title="Measured by the worker (monotonic clock)"' : '';
  return `<div class="step ${st.key}" data-step-id="${esc(step.id)}" data-card="${kind}" data-state="${st.key}">
    <div class="row"><span class="num">${i + 1}</span><span class="name">${esc(opName(step.operationCode, step.displayName))}</span>
      <span class="op">${esc(step.operationCode)}${step.attempt > 1 ? ` · attempt ${esc(step.attempt)}` : ''}</span>
      ${healthChip(step.lifecycleStatus === 'RUNNING' ? step.health : 'HEALTHY', 'step-health')}
      <span class="pill ${st.key}" data-field="step-status">${esc(st.text)}</span>
      <span class="dur"${source}>${step.durationMs != null ? formatDuration(step.durationMs) : ''}</span></div>
    ${showBar ? bar(pct, step.lifecycleStatus) : ''}
    ${data ? `<div class="data">${data}</div>` : ''}
    ${stepTimes(step, wallNow)}
    ${err}
  </div>`;
}

function stat(key, value, hint, field = '') {
  return `<div class="stat" title="${esc(hint)}"><div class="k">${key}</div><div class="v"${field ? ` data-field="${field}"` : ''}>${value}</div></div>`;
}

/**
 * The detail pane of one task. Everything in it comes from ONE version: the detail snapshot /
 * detail channel (header, steps, durations), never the summary mixed with an older detail; when
 * the summary is ahead, the pane says it is updating until the detail catches up.
 */
export function detailPane(state, taskId, { now, wallNow, detail, behind: behindFlag }) {
  const summary = state.tasks[taskId];
  if (!detail) {
    return `<button class="back" data-action="back">← All tasks</button>
      <div class="detail-head" data-detail-id="${esc(taskId)}" data-loading="true"><div class="grow"><h2>${esc(summary?.title || 'Task')}</h2><div class="sub">Loading…</div></div></div>`;
  }
  const d = detail;
  const behind = behindFlag ?? (summary ? BigInt(summary.version) > BigInt(d.version) : false);
  const durations = d.durations || {};
  const terminal = isTerminal(d.lifecycleStatus);
  const wall = terminal ? between(d.startedAt, d.finishedAt) : null;
  const running = formatDuration(displayElapsedMs(state, taskId, now));
  const stale = state.connection === 'STALE' && !terminal;
  const opNames = Object.fromEntries((d.steps || []).map((s) => [s.operationCode, s.displayName]));
  const timeline = timelineOf(state, taskId)
    .slice()
    .reverse()
    .map(
      (e) =>
        `<li class="${e.eventType}"><span class="t" title="${esc(exactTime(e.committedAt))}">${esc(clock(e.committedAt))}</span><span class="what">${timelineText(e, opNames)}</span><span class="v">v${esc(e.taskVersion)}</span></li>`,
    )
    .join('');
  const times = [
    `<span>Created ${timeTag(d.createdAt, wallNow)}</span>`,
    d.startedAt ? `<span>Started ${timeTag(d.startedAt, wallNow)}</span>` : '<span>Not started yet</span>',
    d.finishedAt ? `<span data-field="finished-at">${esc(label(d.lifecycleStatus))} ${timeTag(d.finishedAt, wallNow)}</span>` : '',
  ].join('');
  const note = stale
    ? `<div class="notice-box" data-field="detail-unconfirmed">Running, status unconfirmed: live updates are paused. This is the last confirmed state (version ${esc(d.version)}).</div>`
    : d.health === 'DEGRADED'
      ? `<div class="notice-box DEGRADED" data-field="detail-health"><b>Degraded.</b> ${esc(HEALTH_TEXT.DEGRADED[1])}.</div>`
      : d.health === 'STALE'
        ? `<div class="notice-box STALE" data-field="detail-health"><b>No heartbeat.</b> ${esc(HEALTH_TEXT.STALE[1])}.</div>`
        : '';
  return `<button class="back" data-action="back">← All tasks</button>
    <div class="detail-head" data-detail-id="${esc(taskId)}" data-version="${esc(d.version)}" data-status="${esc(d.lifecycleStatus)}" data-health="${esc(d.health)}">
      <div class="grow"><h2>${esc(d.title)}</h2>
        <div class="sub">${esc(d.product)} · ${esc(label(d.taskType))} · version ${esc(d.version)}${behind ? ' · <span class="updating" data-field="behind">updating…</span>' : ''}</div></div>
      <div class="head-tags">${attemptChip(d.taskAttempt, 'detail-attempt')}${healthChip(d.health, 'detail-health-chip')}<span class="pill ${esc(d.lifecycleStatus)}" data-field="detail-status">${esc(statusName(d.businessStatus, d.businessStatusDisplay))}</span></div>
    </div>
    <div class="times head-times">${times}</div>
    ${note}
    <div class="stats">
      ${stat('Queued', formatDuration(durations.queueMs), 'Waiting before the first step started (startedAt − createdAt)')}
      ${stat(terminal ? 'Duration' : 'Running', running, terminal ? 'Run time measured by the coordinator with a monotonic clock, reported with the final state' : 'Since the task started; ticks locally between updates', 'detail-elapsed')}
      ${stat('Wall clock', formatDuration(wall), 'From the start to the final state by the server clock (startedAt → finishedAt)', 'wall-clock')}
      ${stat('Total', formatDuration(durations.totalMs), 'From creation to the final state, queue included (createdAt → finishedAt)', 'total')}
    </div>
    ${d.failureMessage ? `<div class="error-box big" data-field="failure"><span>${esc(d.failureMessage)}</span><code>${esc(d.failureCode || '')}</code></div>` : ''}
    <h3>Steps</h3><div class="steps">${d.steps.map((s, i) => renderStep(s, i, d.lifecycleStatus, wallNow)).join('')}</div>
    <h3>Timeline</h3><ul class="timeline">${timeline}</ul>`;
}
