// The Taskcast task board: a TaskFeed rendered with plain DOM (markup in view.js, formatting in
// format.js). Everything the board shows lives in the URL, so a link or a reload opens the same view:
//   user=tenant/user           dev-mode identity (Status API user_auth.mode: dev), or
//   token=<JWT>                a user bearer token
//   task=<taskId>              the selected task (detail pane)
//   state=all|active|succeeded|failed|cancelled   the state filter;  q=<text>  title search
//   gateway=http://host:8000   the gateway (default: the Status API's board.gateway_url, served
//                              in config.js; unset there: this host, port 8000)
//   transports=websocket,sse,http_stream   transport order (fallback on handshake failure)
// Without user or token the board asks who you are instead of connecting.
import { TaskFeed, displayElapsedMs, taskList } from '../src/index.js';
import { FILTERS, filterTasks, formatDuration, relativeTime } from './format.js';
import { detailPane, esc, taskRow } from './view.js';

const params = new URLSearchParams(location.search);
const configured = (window.TASKCAST_BOARD || {}).gateway;
const gateway = (
  params.get('gateway') ||
  (configured === '' ? location.origin : configured) ||
  `${location.protocol}//${location.hostname}:8000`
).replace(/\/$/, '');
const user = (params.get('user') || '').trim();
const bearer = params.get('token');
const order = (params.get('transports') || 'websocket,sse,http_stream').split(',');
const wsBase = gateway.replace(/^http/, 'ws');
const ENDPOINTS = {
  websocket: { transport: 'websocket', endpoint: `${wsBase}${params.get('wsPath') || '/connection/websocket'}` },
  sse: { transport: 'sse', endpoint: `${gateway}/connection/sse` },
  http_stream: { transport: 'http_stream', endpoint: `${gateway}/connection/http_stream` },
};
const DEMO_USERS = ['demo/alice', 'demo/bob', 'demo/carol'];
const BADGE = { IDLE: 'Not connected', LIVE: 'Live', RECOVERING: 'Reconnecting…', STALE: 'Updates paused' };
const TOAST_MS = 8000;
const REL_REFRESH_MS = 10000;

const ui = {
  selected: params.get('task') || null,
  filter: FILTERS[params.get('state')] ? params.get('state') : 'all',
  query: params.get('q') || '',
};
const $ = (sel) => document.querySelector(sel);
// For tests and the curious: window.taskcast.feed is the TaskFeed.
window.taskcast = { feed: null, shownNotices: [], badgeHistory: [] };

// --- URL ------------------------------------------------------------------------------------

function urlFor(changes) {
  const q = new URLSearchParams(location.search);
  for (const [k, v] of Object.entries(changes)) {
    if (v == null || v === '' || (k === 'state' && v === 'all')) q.delete(k);
    else q.set(k, v);
  }
  const s = q.toString();
  return `${location.pathname}${s ? `?${s}` : ''}`;
}

/** Selection is a navigation (back returns to the list); filter and search replace the entry. */
function pushUrl(changes) {
  history.pushState(null, '', urlFor(changes));
}
function replaceUrl(changes) {
  history.replaceState(null, '', urlFor(changes));
}

// --- the no-user state ----------------------------------------------------------------------

function renderChooseUser() {
  document.body.dataset.view = 'choose';
  $('#layout').innerHTML = `<section class="choose" data-field="choose-user">
    <div class="empty-art" aria-hidden="true"></div>
    <h1>Whose tasks?</h1>
    <p>The board shows one user's tasks. Sign in with a user token (<code>?token=…</code>), or, with the Status API in
      development mode (<code>user_auth.mode: dev</code>, as in <code>taskcast up</code>), pick a user:</p>
    <form id="choose-form" class="choose-form">
      <input name="user" placeholder="tenant/user" aria-label="tenant/user" pattern="[^\\/]+\\/[^\\/]+" required>
      <button class="btn primary" type="submit">Open board</button>
    </form>
    <p class="demo-users">Demo users: ${DEMO_USERS.map((u) => `<a href="${esc(urlFor({ user: u }))}">${esc(u)}</a>`).join(' · ')}</p>
  </section>`;
  $('#choose-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const u = new FormData(ev.target).get('user').trim();
    if (u) location.assign(urlFor({ user: u }));
  });
}

// --- rendering --------------------------------------------------------------------------------

let feed = null;
let started = false; // openDetail/closeDetail only once start() resolved
const snapshot = () => (typeof feed.getSnapshot === 'function' ? feed.getSnapshot() : feed.state);
const detailOf = (state, id) => state.details?.[id]?.detail || null;
const listLoaded = (state) => state.list?.phase === 'ready' || state.list?.loaded === true;
const hasMore = (state) => Boolean(state.list?.hasMore);

function renderFilters(all) {
  const counts = Object.fromEntries(Object.keys(FILTERS).map((k) => [k, filterTasks(all, k, '').length]));
  $('#filters').innerHTML = Object.entries(FILTERS)
    .map(([k, f]) => `<button data-filter="${k}" class="${k === ui.filter ? 'active' : ''}" aria-pressed="${k === ui.filter}">${f.label}<span class="n">${counts[k]}</span></button>`)
    .join('');
}

function renderList(state) {
  const now = performance.now();
  const wallNow = Date.now();
  const all = taskList(state);
  const shown = filterTasks(all, ui.filter, ui.query);
  const running = all.filter((t) => t.lifecycleStatus === 'RUNNING' || t.lifecycleStatus === 'PENDING').length;
  const loaded = listLoaded(state);
  $('#counts').textContent = loaded || all.length ? `${all.length}${hasMore(state) ? '+' : ''} tasks · ${running} in progress` : '';
  renderFilters(all);
  $('#task-list').innerHTML = shown.map((t) => taskRow(state, t, { selected: ui.selected, now, wallNow })).join('');
  let foot = '';
  if (!loaded && !all.length) {
    foot = state.list?.error || state.connection === 'STALE'
      ? `<div class="empty" data-field="list-unavailable"><p>Tasks could not be loaded yet. Retrying…</p></div>`
      : `<div class="empty loading" data-field="list-loading"><p>Loading tasks…</p></div>`;
  } else if (!all.length) {
    foot = `<div class="empty" data-field="list-empty"><div class="empty-art" aria-hidden="true"></div><p>No tasks yet. New tasks appear here the moment they are created.</p></div>`;
  } else if (!shown.length) {
    foot = `<div class="empty" data-field="no-match"><p>No ${ui.filter === 'all' ? '' : `${esc(FILTERS[ui.filter].label.toLowerCase())} `}tasks${ui.query ? ` matching “${esc(ui.query)}”` : ''}${hasMore(state) ? ' among those loaded' : ''}.</p></div>`;
  }
  if (hasMore(state)) {
    foot += `<button class="btn more" data-action="more" ${state.list?.loadingMore ? 'disabled' : ''}>${state.list?.loadingMore ? 'Loading…' : 'Load older tasks'}</button>`;
  }
  $('#list-foot').innerHTML = foot;
  observeFoot();
}

function renderDetail(state) {
  const pane = $('#detail');
  document.body.dataset.view = ui.selected ? 'detail' : 'list';
  if (!ui.selected) {
    if (!pane.querySelector('.placeholder')) {
      pane.innerHTML = `<div class="placeholder"><div class="empty-art"></div><p>Select a task to see its steps, progress and timeline.</p></div>`;
    }
    return;
  }
  const entry = state.details?.[ui.selected];
  if (!state.tasks[ui.selected] && !detailOf(state, ui.selected)) {
    const gone = (listLoaded(state) && !hasMore(state)) || /NOT_FOUND|HTTP_404/.test(entry?.error?.code || '');
    pane.innerHTML = `<button class="back" data-action="back">← All tasks</button><div class="placeholder" data-field="detail-missing"><p>${
      gone ? 'This task is not among your tasks.' : 'Loading the task…'
    }</p></div>`;
    return;
  }
  pane.innerHTML = detailPane(state, ui.selected, { now: performance.now(), wallNow: Date.now(), detail: detailOf(state, ui.selected), behind: state.details?.[ui.selected]?.behind });
}

function renderBadge(state) {
  const badge = $('#connection-badge');
  if (badge.dataset.status !== state.connection) {
    badge.dataset.status = state.connection;
    badge.querySelector('.label').textContent = BADGE[state.connection] || state.connection;
    window.taskcast.badgeHistory.push(state.connection);
  }
  const banner = $('#stale-banner');
  const stale = state.connection === 'STALE';
  banner.hidden = !stale;
  if (stale) {
    banner.innerHTML = `<strong>Live updates paused.</strong> Showing the last confirmed state: tasks marked
      <em>Unconfirmed</em> are running, status unconfirmed. The board keeps retrying and catches up by itself.`;
  }
}

const toastTimers = new Map();
const dismiss = (id) => (typeof feed.dismissNotice === 'function' ? feed.dismissNotice(id) : feed.dispatch({ type: 'notice/dismiss', id }));
function renderToasts(state) {
  const box = $('#toasts');
  const queue = Array.isArray(state.notices) ? state.notices : state.notices?.queue || [];
  const ids = new Set(queue.map((n) => n.id));
  for (const el of [...box.children]) if (!ids.has(el.dataset.noticeId)) el.remove();
  for (const n of queue) {
    if (box.querySelector(`[data-notice-id="${CSS.escape(n.id)}"]`)) continue;
    window.taskcast.shownNotices.push(n.id);
    const el = document.createElement('div');
    el.className = `toast ${n.level}`;
    el.dataset.noticeId = n.id;
    el.innerHTML = `<div class="tt"><span>${esc(n.title)}</span><button aria-label="Dismiss">×</button></div>${n.message ? `<div class="msg">${esc(n.message)}</div>` : ''}${
      n.taskId ? `<a class="open" href="${esc(urlFor({ task: n.taskId }))}" data-open-task="${esc(n.taskId)}">View task</a>` : ''
    }`;
    el.querySelector('button').onclick = () => dismiss(n.id);
    box.appendChild(el);
    toastTimers.set(n.id, setTimeout(() => dismiss(n.id), TOAST_MS));
  }
}

function render(state = snapshot()) {
  renderBadge(state);
  renderList(state);
  renderDetail(state);
  renderToasts(state);
}

// --- paging: infinite scroll over the list snapshot -----------------------------------------

let observer = null;
function observeFoot() {
  if (!('IntersectionObserver' in window) || typeof feed.loadMore !== 'function') return;
  observer ||= new IntersectionObserver((entries) => {
    if (entries.some((e) => e.isIntersecting)) loadMore();
  });
  observer.disconnect();
  const more = $('#list-foot [data-action="more"]');
  if (more) observer.observe(more);
}

let loadingMore = false;
async function loadMore() {
  if (loadingMore || typeof feed.loadMore !== 'function' || !hasMore(snapshot())) return;
  loadingMore = true;
  try {
    await feed.loadMore();
  } catch (err) {
    console.warn('taskcast: loading more tasks failed', err);
  } finally {
    loadingMore = false;
  }
}

// --- interaction ----------------------------------------------------------------------------

function select(taskId, { push = true } = {}) {
  if (ui.selected === taskId) return;
  if (ui.selected && started) feed.closeDetail(ui.selected);
  ui.selected = taskId;
  if (taskId && started) feed.openDetail(taskId);
  if (push) pushUrl({ task: taskId });
  render();
  if (taskId && window.matchMedia('(max-width: 760px)').matches) window.scrollTo(0, 0);
}

function wire() {
  $('#task-list').addEventListener('click', (ev) => {
    const li = ev.target.closest('[data-task-id]');
    if (li) select(li.dataset.taskId);
  });
  $('#task-list').addEventListener('keydown', (ev) => {
    const li = ev.target.closest('[data-task-id]');
    if (li && (ev.key === 'Enter' || ev.key === ' ')) {
      ev.preventDefault();
      select(li.dataset.taskId);
    }
  });
  $('#filters').addEventListener('click', (ev) => {
    const b = ev.target.closest('button[data-filter]');
    if (!b) return;
    ui.filter = b.dataset.filter;
    replaceUrl({ state: ui.filter });
    renderList(snapshot());
  });
  const search = $('#search');
  search.value = ui.query;
  search.addEventListener('input', () => {
    ui.query = search.value;
    replaceUrl({ q: ui.query.trim() });
    renderList(snapshot());
  });
  document.addEventListener('click', (ev) => {
    const t = ev.target.closest('[data-action], [data-open-task]');
    if (!t) return;
    if (t.dataset.openTask) {
      ev.preventDefault();
      select(t.dataset.openTask);
    } else if (t.dataset.action === 'back') {
      select(null);
    } else if (t.dataset.action === 'more') {
      loadMore();
    }
  });
  window.addEventListener('popstate', () => {
    const q = new URLSearchParams(location.search);
    select(q.get('task') || null, { push: false });
  });
  // Relative times ("2 min ago") age in place; exact times stay in the tooltips.
  setInterval(() => {
    const wallNow = Date.now();
    for (const el of document.querySelectorAll('time[data-rel]')) el.textContent = el.dataset.rel + relativeTime(el.getAttribute('datetime'), wallNow);
  }, REL_REFRESH_MS);
}

function onTick() {
  const state = snapshot();
  const now = performance.now();
  for (const el of document.querySelectorAll('[data-task-id] [data-field="elapsed"]')) {
    el.textContent = formatDuration(displayElapsedMs(state, el.closest('[data-task-id]').dataset.taskId, now));
  }
  const de = document.querySelector('.detail-head:not([data-status="SUCCEEDED"]):not([data-status="FAILED"]):not([data-status="CANCELLED"])');
  const field = document.querySelector('[data-field="detail-elapsed"]');
  if (de && field && ui.selected) field.textContent = formatDuration(displayElapsedMs(state, ui.selected, now));
}

function main() {
  if (!user && !bearer) {
    renderChooseUser();
    return;
  }
  $('#user').innerHTML = `<span class="avatar">${esc((bearer ? 'me' : user.split('/').pop()).slice(0, 2).toUpperCase())}</span><span class="user-name">${esc(bearer ? 'Signed in' : user)}</span>`;
  feed = new TaskFeed({
    api: { baseUrl: '', headers: () => (bearer ? { Authorization: `Bearer ${bearer}` } : { 'X-Taskcast-Dev-User': user }) },
    endpoints: order.map((t) => ENDPOINTS[t]).filter(Boolean),
    clientOptions: { emulationEndpoint: `${gateway}/emulation` },
    // What this browser saw (commit→visible, reconnects, …) goes to the Status API's /metrics.
    telemetry: true,
  });
  window.taskcast.feed = feed;
  wire();
  if (typeof feed.subscribe === 'function') feed.subscribe(() => render());
  else feed.on('change', () => render());
  feed.on('tick', onTick);
  feed.on('error', (err) => console.warn('taskcast:', err?.message || err));
  render();
  feed
    .start()
    .then(() => {
      started = true;
      if (ui.selected) feed.openDetail(ui.selected);
    })
    .catch((err) => {
      console.warn('taskcast: could not start', err?.message || err);
      if (err?.name === 'UnauthorizedError' || err?.unauthorized) {
        $('#layout').innerHTML = `<section class="choose" data-field="signin-failed"><h1>Could not sign in</h1><p>${esc(
          err.message || 'The Status API refused this user.',
        )}</p><p><a href="${esc(urlFor({ user: null, token: null, task: null }))}">Choose another user</a></p></section>`;
      } else {
        const banner = $('#stale-banner');
        banner.hidden = false;
        banner.innerHTML = `<strong>The board could not start.</strong> ${esc(err?.message || String(err))}`;
      }
    });
}

main();
