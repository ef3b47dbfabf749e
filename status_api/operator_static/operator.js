// The pipeline's operator UI: plain DOM, no build step, no dependency. Every call is a GET or
// POST under /admin/v1 with the operator's credential as a bearer token (kept in this tab's
// sessionStorage only). Data from the server is only ever set as text, never as HTML.
'use strict';

const KEY = 'taskcast-operator-credential';
let credential = sessionStorage.getItem(KEY) || '';

const $ = (sel) => document.querySelector(sel);

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'dataset') Object.assign(node.dataset, v);
    else node.setAttribute(k, v);
  }
  for (const child of children) node.append(child instanceof Node ? child : String(child ?? ''));
  return node;
}

const td = (value, cls) => el('td', cls ? { class: cls } : {}, value ?? '');
const num = (value) => td(value ?? '', 'num');
const when = (iso) => (iso ? iso.replace('T', ' ').replace(/\.\d+Z$/, 'Z') : '');

function status(text, kind = 'ok') {
  $('#status').textContent = text;
  $('#status').className = kind;
}

class RequestError extends Error {
  constructor(status, code, message) {
    super(`${message} (${code || status})`);
    this.status = status;
  }
}

async function call(path, body) {
  const init = { headers: { authorization: `Bearer ${credential}` } };
  if (body !== undefined) {
    init.method = 'POST';
    init.headers['content-type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const res = await fetch(`/admin/v1/${path}`, init);
  const data = await res.json().catch(() => ({}));
  if (!res.ok) {
    const err = data.error || {};
    throw new RequestError(res.status, err.code, err.message || res.statusText);
  }
  return data;
}

function fill(tbody, rows) {
  tbody.replaceChildren(...rows);
  if (!rows.length) {
    const cols = tbody.closest('table').querySelectorAll('thead th').length;
    tbody.append(el('tr', {}, el('td', { colspan: String(cols), class: 'totals' }, 'nothing')));
  }
}

const taskLink = (id) => el('a', { href: `#/task/${encodeURIComponent(id)}` }, id);

// --- pages ---------------------------------------------------------------------------------

async function showTasks(args) {
  const q = args.get('q') || '', state = args.get('state') || '';
  $('#tasks-q').value = q;
  $('#tasks-state').value = state;
  const params = new URLSearchParams({ limit: '100' });
  if (q) params.set('q', q);
  if (state) params.set('state', state);
  const data = await call(`tasks?${params}`);
  $('#state-counts').replaceChildren(
    el('a', { href: '#/tasks' }, `all (${Object.values(data.counts).reduce((a, b) => a + b, 0)})`),
    ...Object.entries(data.counts).sort().map(([s, n]) => el('a', { href: `#/tasks?state=${encodeURIComponent(s)}`, dataset: { state: s } }, `${s} (${n})`)),
  );
  fill($('#tasks-table tbody'), data.tasks.map((t) => el('tr', { dataset: { taskId: t.taskId } },
    el('td', {}, taskLink(t.taskId)), td(t.title), td(t.taskType), td(t.status), td(t.businessStatus),
    td(t.health), num(t.version), td(when(t.updatedAt)))));
}

async function showTask(taskId) {
  $('#task-id').textContent = taskId;
  const data = await call(`tasks/${encodeURIComponent(taskId)}/timeline`);
  const t = data.task;
  $('#task-summary').textContent = `${t.title} · ${t.taskType} · ${t.status} (${t.businessStatus}) · version ${t.version} · tenant ${t.tenantId} · owner ${t.ownerId}`;
  fill($('#events-table tbody'), data.events.map((e) => el('tr', { dataset: { version: String(e.version) } },
    num(e.version), td(e.eventType), td(e.stepId), td(e.producerId), td(`${e.status} (${e.businessStatus})`),
    td(e.errorCode), td(when(e.committedAt)))));
  fill($('#task-outbox-table tbody'), data.outbox.map((o) => el('tr', { dataset: { row: String(o.id), status: o.status } },
    num(o.id), num(o.version), td(o.channel), td(o.projection), td(o.status), num(o.priority), num(o.attempts),
    td(when(o.publishedAt)), td(o.lastError))));
}

async function showBacklog() {
  const data = await call('outbox/backlog');
  const c = data.counts;
  $('#backlog-summary').textContent = `PENDING ${c.PENDING} · PROCESSING ${c.PROCESSING} · PUBLISHED ≈${c.PUBLISHED} · DEAD ${c.DEAD} · oldest pending ${data.oldestPendingAgeSeconds.toFixed(1)} s`;
  fill($('#backlog-table tbody'), data.backlog.map((b) => el('tr', { dataset: { status: b.status, priority: String(b.priority) } },
    td(b.status), num(b.priority), num(b.rows), num(b.oldestAgeSeconds?.toFixed(1)), ...b.byAge.map((n) => num(n)))));
}

async function showDead() {
  const data = await call('outbox/dead');
  $('#dead-all').checked = false;
  fill($('#dead-table tbody'), data.dead.map((d) => el('tr', { dataset: { row: String(d.id) } },
    el('td', {}, el('input', { type: 'checkbox', class: 'pick', value: String(d.id), 'aria-label': `row ${d.id}` })),
    num(d.id), el('td', {}, taskLink(d.taskId)), num(d.version), td(d.channel), td(d.projection), num(d.attempts),
    td(d.lastError), td(when(d.createdAt)))));
}

async function deadAction(action) {
  const ids = [...document.querySelectorAll('#dead-table .pick:checked')].map((box) => Number(box.value));
  if (!ids.length) return status('select rows first', 'error');
  if (action === 'delete' && !window.confirm(`Delete ${ids.length} DEAD row(s)? This cannot be undone.`)) return;
  try {
    const { affected } = await call(`outbox/dead/${action}`, { ids });
    status(`${action}: ${affected} row(s)`);
    await showDead();
  } catch (err) {
    status(`${action} failed: ${err.message}`, 'error');
  }
}

async function showRelays() {
  const data = await call('relays');
  const lag = data.publishLagSeconds;
  $('#relay-lag').textContent = `oldest due PENDING row: ${data.oldestDuePendingAgeSeconds.toFixed(1)} s · commit→publish over the last ${lag.samples} rows: median ${lag.median ?? '—'} s, max ${lag.max ?? '—'} s`;
  fill($('#relays-table tbody'), data.instances.map((r) => el('tr', { dataset: { relay: r.relayId } },
    td(r.relayId), num(r.leasedRows), num(r.oldestLeaseAgeSeconds), num(r.newestLeaseAgeSeconds))));
}

async function showRegistries() {
  const data = await call('registry');
  const rows = (defs) => defs.map((d) => el('tr', {}, td(d.tenantId), td(d.product), td(d.taskType), num(d.definitionVersion)));
  fill($('#status-defs-table tbody'), rows(data.statusDefinitions));
  fill($('#operation-defs-table tbody'), rows(data.operationDefinitions));
}

async function showAudit() {
  const data = await call('audit?limit=100');
  fill($('#audit-table tbody'), data.actions.map((a) => el('tr', { dataset: { action: a.action } },
    td(when(a.at)), td(a.operatorId), td(a.action), td(a.target), num(a.affected))));
}

// --- routing -------------------------------------------------------------------------------

const PAGES = { tasks: showTasks, backlog: showBacklog, dead: showDead, relays: showRelays, registries: showRegistries, audit: showAudit };

function show(page) {
  for (const section of document.querySelectorAll('.page')) section.hidden = section.id !== `page-${page}`;
  for (const link of document.querySelectorAll('#nav a')) link.classList.toggle('active', link.dataset.page === page);
}

async function route() {
  status('');
  const [path, query] = location.hash.slice(1).split('?');
  const parts = (path || '/tasks').split('/').filter(Boolean);
  const page = parts[0] in PAGES || parts[0] === 'task' ? parts[0] : 'tasks';
  show(page);
  try {
    if (page === 'task') await showTask(decodeURIComponent(parts.slice(1).join('/')));
    else await PAGES[page](new URLSearchParams(query || ''));
    document.body.dataset.ready = page;
  } catch (err) {
    if (err.status === 401 || err.status === 403) return logout(err.message);
    status(err.message, 'error');
  }
}

function loggedIn() {
  $('#login').hidden = true;
  $('#nav').hidden = false;
  route();
}

function logout(reason = '') {
  credential = '';
  sessionStorage.removeItem(KEY);
  for (const section of document.querySelectorAll('.page')) section.hidden = true;
  $('#nav').hidden = true;
  $('#login').hidden = false;
  $('#login-error').textContent = reason;
  document.body.dataset.ready = 'login';
}

async function login(event) {
  event.preventDefault();
  credential = $('#credential').value.trim();
  $('#credential').value = '';
  try {
    await call('outbox/backlog');
  } catch (err) {
    document.body.dataset.refused = String(err.status);
    return logout(err.status === 403 ? 'This credential has no admin role.' : 'Refused: not an operator credential.');
  }
  sessionStorage.setItem(KEY, credential);
  loggedIn();
}

function start() {
  $('#login-form').addEventListener('submit', login);
  $('#logout').addEventListener('click', () => logout());
  $('#dead-requeue').addEventListener('click', () => deadAction('requeue'));
  $('#dead-delete').addEventListener('click', () => deadAction('delete'));
  $('#dead-all').addEventListener('change', (e) => {
    for (const box of document.querySelectorAll('#dead-table .pick')) box.checked = e.target.checked;
  });
  $('#tasks-form').addEventListener('submit', (e) => {
    e.preventDefault();
    const params = new URLSearchParams();
    if ($('#tasks-q').value) params.set('q', $('#tasks-q').value);
    if ($('#tasks-state').value) params.set('state', $('#tasks-state').value);
    location.hash = `#/tasks?${params}`;
  });
  window.addEventListener('hashchange', route);
  if (credential) loggedIn();
  else logout();
}

start();
