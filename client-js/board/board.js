// The demo task board: a TaskFeed rendered with plain DOM. Query parameters:
//   gateway=http://host:8000   the gateway (default: this host, port 8000)
//   user=tenant/user           dev-mode identity (Status API user_auth.mode: dev), or
//   token=<JWT>                a user bearer token
//   transports=websocket,sse,http_stream   transport order (fallback on handshake failure)
import { TaskFeed, cardKind, displayElapsedMs, isTerminal, taskList, timelineOf } from '../src/index.js';

const params = new URLSearchParams(location.search);
const gateway = (params.get('gateway') || `${location.protocol}//${location.hostname}:8000`).replace(/\/$/, '');
const user = params.get('user') || 't1/u1';
const bearer = params.get('token');
const order = (params.get('transports') || 'websocket,sse,http_stream').split(',');
const wsBase = gateway.replace(/^http/, 'ws');
const ENDPOINTS = {
  websocket: { transport: 'websocket', endpoint: `${wsBase}${params.get('wsPath') || '/connection/websocket'}` },
  sse: { transport: 'sse', endpoint: `${gateway}/connection/sse` },
  http_stream: { transport: 'http_stream', endpoint: `${gateway}/connection/http_stream` },
};

const OPS = {
  'FILE.PREPARE': 'Prepare file',
  'DOCUMENT.PARSE': 'Parse document',
  'RESULT.PERSIST': 'Save results',
  'REVIEW.MANUAL': 'Manual review',
  'VIDEO.TRANSCODE': 'Transcode video',
};
const BADGE = { LIVE: 'Live', RECOVERING: 'Reconnecting…', STALE: 'Updates paused' };
const TOAST_MS = 8000;

const feed = new TaskFeed({
  api: { baseUrl: '', headers: () => (bearer ? { Authorization: `Bearer ${bearer}` } : { 'X-Taskcast-Dev-User': user }) },
  endpoints: order.map((t) => ENDPOINTS[t]).filter(Boolean),
  clientOptions: { emulationEndpoint: `${gateway}/emulation` },
});
// For tests and the curious: window.taskcast.feed.state is the store.
window.taskcast = { feed, shownNotices: [] };

let selected = null;
let filter = 'all';
const $ = (sel) => document.querySelector(sel);
const esc = (s) => String(s ?? '').replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]);
const label = (code) => (code ? code.charAt(0) + code.slice(1).toLowerCase().replace(/_/g, ' ') : '');
const opName = (code) => OPS[code] || label((code || '').replace(/\./g, ' '));

export function formatDuration(ms) {
  if (ms == null) return '—';
  if (ms < 1000) return `${Math.round(ms)} ms`;
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(1)} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${String(Math.floor(s % 60)).padStart(2, '0')} s`;
  return `${Math.floor(m / 60)} h ${String(m % 60).padStart(2, '0')} min`;
}
const clock = (iso) => (iso ? new Date(iso).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit', second: '2-digit', hour12: false }) : '');

function progressOf(task) {
  if (task.lifecycleStatus === 'SUCCEEDED') return 100;
  const p = task.currentOperation?.progress;
  if (p && p.total) return Math.min(100, Math.round((p.current / p.total) * 100));
  return null;
}

function bar(pct, status) {
  if (pct == null) return status === 'RUNNING' ? `<div class="bar indeterminate"><span></span></div>` : `<div class="bar ${status}"><span style="width:${status === 'FAILED' ? 100 : 0}%"></span></div>`;
  return `<div class="bar ${status}"><span style="width:${pct}%"></span></div>`;
}

function renderList(state) {
  const now = performance.now();
  const all = taskList(state);
  const tasks = all.filter((t) => (filter === 'all' ? true : filter === 'active' ? !isTerminal(t.lifecycleStatus) : isTerminal(t.lifecycleStatus)));
  const running = all.filter((t) => !isTerminal(t.lifecycleStatus)).length;
  $('#counts').textContent = `${all.length} tasks · ${running} in progress`;
  $('#empty').hidden = all.length > 0;
  $('#task-list').innerHTML = tasks
    .map((t) => {
      const op = t.currentOperation ? opName(t.currentOperation.operationCode) : label(t.businessStatus);
      const health = t.health !== 'HEALTHY' ? `<span class="health ${t.health}">${t.health === 'STALE' ? 'Status unconfirmed' : 'Degraded'}</span>` : '';
      const failure = t.lifecycleStatus === 'FAILED' && t.failureMessage ? `<div class="failure">${esc(t.failureMessage)}</div>` : '';
      return `<li class="task ${t.id === selected ? 'selected' : ''}" data-task-id="${esc(t.id)}" data-version="${esc(t.version)}" data-status="${t.lifecycleStatus}">
        <div class="row"><span class="title">${esc(t.title)}</span>${health}<span class="pill ${t.lifecycleStatus}" data-field="status">${t.lifecycleStatus.toLowerCase()}</span></div>
        ${bar(progressOf(t), t.lifecycleStatus)}
        <div class="meta"><span>${esc(op)}</span><span>${esc(clock(t.createdAt))}</span><span class="elapsed" data-field="elapsed">${formatDuration(displayElapsedMs(state, t.id, now))}</span></div>
        ${failure}
      </li>`;
    })
    .join('');
}

function stepData(step) {
  const v = step.data?.value || {};
  switch (cardKind(step)) {
    case 'document-parse':
      if (v.totalPages) return `<span>Page <b>${v.currentPage}</b> of <b>${v.totalPages}</b></span>`;
      if (v.pageCount) return `<span><b>${v.pageCount}</b> pages</span>${v.language ? `<span>Language <b>${esc(v.language)}</b></span>` : ''}`;
      return '';
    case 'video-transcode':
      return v.totalFrames
        ? `<span>Frame <b>${v.frame}</b> / <b>${v.totalFrames}</b></span>${v.fps != null ? `<span><b>${v.fps}</b> fps</span>` : ''}${v.preset ? `<span>Preset <b>${esc(v.preset)}</b></span>` : ''}`
        : '';
    case 'file-prepare':
      return v.fileName ? `<span><b>${esc(v.fileName)}</b></span>${v.sizeBytes ? `<span>${(v.sizeBytes / 1024).toFixed(0)} KB</span>` : ''}` : '';
    default:
      return '';
  }
}

function renderStep(step, i) {
  const kind = cardKind(step);
  const pct = step.progress?.total ? Math.round((step.progress.current / step.progress.total) * 100) : step.lifecycleStatus === 'SUCCEEDED' ? 100 : null;
  const data = stepData(step);
  const err = step.error
    ? `<div class="error-box" data-field="step-error"><span>${esc(step.error.userMessage)}</span><code>${esc(step.error.code)}</code>${step.error.retryable ? '<span>· will retry</span>' : ''}</div>`
    : '';
  const showBar = step.lifecycleStatus === 'RUNNING' || pct != null;
  return `<div class="step ${step.lifecycleStatus}" data-step-id="${esc(step.id)}" data-card="${kind}">
    <div class="row"><span class="num">${i + 1}</span><span class="name">${esc(opName(step.operationCode))}</span>
      <span class="op">${esc(step.operationCode)}${step.attempt > 1 ? ` · attempt ${step.attempt}` : ''}</span>
      <span class="pill ${step.lifecycleStatus}">${esc(label(step.businessStatus))}</span>
      <span class="dur">${step.durationMs != null ? formatDuration(step.durationMs) : ''}</span></div>
    ${showBar ? bar(pct, step.lifecycleStatus) : ''}
    ${data ? `<div class="data">${data}</div>` : ''}
    ${err}
  </div>`;
}

function renderDetail(state) {
  const pane = $('#detail');
  if (!selected || !state.tasks[selected]) {
    if (!pane.querySelector('.placeholder')) pane.innerHTML = `<div class="placeholder"><div class="empty-art"></div><p>Select a task to see its steps, progress and timeline.</p></div>`;
    return;
  }
  const task = state.tasks[selected];
  const entry = state.details[selected];
  const d = entry?.detail;
  const now = performance.now();
  const durations = d?.durations || {};
  const steps = d ? d.steps.map(renderStep).join('') : '<p class="sub">Loading…</p>';
  const actions =
    task.lifecycleStatus === 'FAILED' ? `<div class="actions"><button class="btn primary">Retry task</button><button class="btn">Download report</button></div>` : '';
  const timeline = timelineOf(state, selected)
    .slice()
    .reverse()
    .map(
      (e) => `<li class="${e.eventType}"><span class="t">${esc(clock(e.committedAt))}</span><span>${esc(label(e.eventType))}${e.operationCode ? ` · ${esc(opName(e.operationCode))}` : ''}${e.error ? ` — ${esc(e.error.userMessage)}` : ''}</span><span class="v">v${esc(e.taskVersion)}</span></li>`,
    )
    .join('');
  pane.innerHTML = `<div class="detail-head" data-detail-id="${esc(task.id)}">
      <div style="flex:1"><h2>${esc(task.title)}</h2><div class="sub">${esc(task.product)} · ${esc(label(task.taskType))} · version ${esc(task.version)}</div></div>
      <span class="pill ${task.lifecycleStatus}">${esc(label(task.businessStatus))}</span>
    </div>
    <div class="stats">
      <div class="stat"><div class="k">Elapsed</div><div class="v" data-field="detail-elapsed">${formatDuration(displayElapsedMs(state, task.id, now))}</div></div>
      <div class="stat"><div class="k">Queued</div><div class="v">${formatDuration(durations.queueMs)}</div></div>
      <div class="stat"><div class="k">Run time</div><div class="v">${formatDuration(durations.runMs)}</div></div>
      <div class="stat"><div class="k">Total</div><div class="v">${formatDuration(durations.totalMs)}</div></div>
    </div>
    ${task.failureMessage ? `<div class="error-box" style="margin-bottom:16px"><span>${esc(task.failureMessage)}</span><code>${esc(task.failureCode || '')}</code></div>` : ''}
    ${actions}
    <h3>Steps</h3><div class="steps">${steps}</div>
    <h3>Timeline</h3><ul class="timeline">${timeline}</ul>`;
}

function renderBadge(state) {
  const badge = $('#connection-badge');
  if (badge.dataset.status !== state.connection) {
    badge.dataset.status = state.connection;
    badge.querySelector('.label').textContent = BADGE[state.connection];
    (window.taskcast.badgeHistory ||= []).push(state.connection);
  }
}

const toastTimers = new Map();
function renderToasts(state) {
  const box = $('#toasts');
  const ids = new Set(state.notices.queue.map((n) => n.id));
  for (const el of [...box.children]) if (!ids.has(el.dataset.noticeId)) el.remove();
  for (const n of state.notices.queue) {
    if (box.querySelector(`[data-notice-id="${CSS.escape(n.id)}"]`)) continue;
    window.taskcast.shownNotices.push(n.id);
    const el = document.createElement('div');
    el.className = `toast ${n.level}`;
    el.dataset.noticeId = n.id;
    el.innerHTML = `<div class="tt">${esc(n.title)}<button aria-label="Dismiss">×</button></div><div class="msg">${esc(n.message)}</div>`;
    el.querySelector('button').onclick = () => feed.dispatch({ type: 'notice/dismiss', id: n.id });
    box.appendChild(el);
    toastTimers.set(n.id, setTimeout(() => feed.dispatch({ type: 'notice/dismiss', id: n.id }), TOAST_MS));
  }
}

function render(state) {
  renderBadge(state);
  renderList(state);
  renderDetail(state);
  renderToasts(state);
}

function select(taskId) {
  if (selected && selected !== taskId) feed.closeDetail(selected);
  selected = taskId;
  feed.openDetail(taskId);
  render(feed.state);
}

$('#task-list').addEventListener('click', (ev) => {
  const li = ev.target.closest('[data-task-id]');
  if (li) select(li.dataset.taskId);
});
$('#filters').addEventListener('click', (ev) => {
  const b = ev.target.closest('button[data-filter]');
  if (!b) return;
  filter = b.dataset.filter;
  for (const x of $('#filters').children) x.classList.toggle('active', x === b);
  renderList(feed.state);
});
$('#user').innerHTML = `<span class="avatar">${esc(user.split('/').pop().slice(0, 2).toUpperCase())}</span><span>${esc(bearer ? 'Signed in' : user)}</span>`;

feed.on('change', render);
feed.on('tick', () => {
  const now = performance.now();
  for (const el of document.querySelectorAll('[data-task-id] [data-field="elapsed"]')) {
    const id = el.closest('[data-task-id]').dataset.taskId;
    el.textContent = formatDuration(displayElapsedMs(feed.state, id, now));
  }
  const de = document.querySelector('[data-field="detail-elapsed"]');
  if (de && selected) de.textContent = formatDuration(displayElapsedMs(feed.state, selected, now));
});
feed.on('error', (err) => console.warn('taskcast:', err));
render(feed.state);
feed.start().catch((err) => {
  console.error(err);
  feed.dispatch({ type: 'connection', status: 'STALE' });
});
