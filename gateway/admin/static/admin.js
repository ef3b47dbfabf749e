// The gateway's admin web UI: plain DOM, no build step, no dependency. Every call goes to
// <base>/api with the admin token (Authorization: token <t>), the server API's methods plus
// `connections`. Data from the server is only ever set as text (textContent), never as HTML.
'use strict';

const BASE = document.body.dataset.base;
const TOKEN_KEY = 'taskcast-admin-token';
let token = sessionStorage.getItem(TOKEN_KEY) || '';
let insecure = false;

const $ = (sel) => document.querySelector(sel);

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'onclick') node.addEventListener('click', v);
    else if (k === 'dataset') Object.assign(node.dataset, v);
    else node.setAttribute(k, v);
  }
  for (const child of children) node.append(child instanceof Node ? child : String(child));
  return node;
}

function status(text, kind = 'ok') {
  const s = $('#status');
  s.textContent = text;
  s.className = kind;
}

class ApiError extends Error {
  constructor(code, message) {
    super(`${message} (${code})`);
    this.code = code;
  }
}

async function api(method, params = {}) {
  const headers = { 'content-type': 'application/json' };
  if (token) headers.authorization = `token ${token}`;
  const res = await fetch(`${BASE}/api`, { method: 'POST', headers, body: JSON.stringify({ method, params }) });
  if (res.status === 401) {
    logout();
    throw new ApiError(401, 'not logged in');
  }
  const body = await res.json();
  if (body.error) throw new ApiError(body.error.code, body.error.message);
  return body.result;
}

function fill(tbody, rows) {
  tbody.replaceChildren(...rows);
  if (!rows.length) {
    const cols = tbody.closest('table').querySelectorAll('th').length;
    tbody.append(el('tr', {}, el('td', { colspan: String(cols), class: 'totals' }, 'nothing')));
  }
}

function duration(seconds) {
  const d = Math.floor(seconds / 86400), h = Math.floor((seconds % 86400) / 3600);
  const m = Math.floor((seconds % 3600) / 60), s = seconds % 60;
  return d ? `${d}d ${h}h` : h ? `${h}h ${m}m` : m ? `${m}m ${s}s` : `${s}s`;
}

function channelLink(channel) {
  return el('a', { href: `#/channel/${encodeURIComponent(channel)}` }, channel);
}

// --- pages ---------------------------------------------------------------------------------

async function showNodes() {
  const { nodes } = await api('info');
  nodes.sort((a, b) => (a.name < b.name ? -1 : 1));
  const sum = (k) => nodes.reduce((n, node) => n + (node[k] || 0), 0);
  fill($('#nodes-table tbody'), nodes.map((n) => el('tr', { dataset: { node: n.uid } },
    el('td', {}, n.name), el('td', {}, n.version),
    el('td', { class: 'num' }, n.num_clients), el('td', { class: 'num' }, n.num_users),
    el('td', { class: 'num' }, n.num_channels), el('td', { class: 'num' }, n.num_subs),
    el('td', { class: 'num' }, duration(n.uptime || 0)))));
  $('#nodes-totals').textContent =
    `${nodes.length} node(s) · ${sum('num_clients')} clients · ${sum('num_users')} users · ${sum('num_subs')} subscriptions`;
}

async function showChannels(pattern) {
  $('#channels-pattern').value = pattern;
  const { channels } = await api('channels', pattern ? { pattern } : {});
  const names = Object.keys(channels).sort();
  $('#channels-count').textContent = `${names.length} channel(s)`;
  fill($('#channels-table tbody'), names.map((ch) => el('tr', { dataset: { channel: ch } },
    el('td', {}, channelLink(ch)), el('td', { class: 'num' }, channels[ch].num_clients))));
}

async function showChannel(channel) {
  $('#channel-name').textContent = channel;
  const presenceBody = $('#presence-table tbody');
  try {
    const [{ presence }, stats] = await Promise.all([api('presence', { channel }), api('presence_stats', { channel })]);
    $('#presence-stats').textContent = `${stats.num_clients} client(s), ${stats.num_users} user(s)`;
    fill(presenceBody, Object.values(presence).map((p) => el('tr', { dataset: { client: p.client } },
      el('td', {}, el('code', {}, p.client)), el('td', {}, p.user),
      el('td', {},
        el('button', { type: 'button', onclick: () => act('unsubscribe', { channel, user: p.user, client: p.client }) }, 'Unsubscribe'),
        ' ',
        el('button', { type: 'button', class: 'danger', onclick: () => act('disconnect', { user: p.user, client: p.client }) }, 'Disconnect')))));
  } catch (err) {
    $('#presence-stats').textContent = `presence: ${err.message}`;
    fill(presenceBody, []);
  }
  try {
    const hist = await api('history', { channel, limit: 50, reverse: true });
    $('#history-position').textContent = `epoch ${hist.epoch || '—'}, top offset ${hist.offset ?? 0}; newest first`;
    fill($('#history-table tbody'), (hist.publications || []).map((p) => el('tr', { dataset: { offset: String(p.offset) } },
      el('td', { class: 'num' }, p.offset), el('td', {}, el('code', {}, JSON.stringify(p.data))))));
  } catch (err) {
    $('#history-position').textContent = `history: ${err.message}`;
    fill($('#history-table tbody'), []);
  }
}

async function showConnections(user) {
  $('#connections-user').value = user;
  const tbody = $('#connections-table tbody');
  if (!user) return fill(tbody, []);
  const { connections } = await api('connections', { user });
  fill(tbody, Object.entries(connections).sort().map(([client, c]) => el('tr', { dataset: { client } },
    el('td', {}, el('code', {}, client)), el('td', { title: c.node }, c.node_name || c.node),
    el('td', {}, ...c.channels.flatMap((ch) => [channelLink(ch), ' ',
      el('button', { type: 'button', onclick: () => act('unsubscribe', { channel: ch, user, client }) }, 'Unsubscribe'),
      el('br')])),
    el('td', {}, el('button', { type: 'button', class: 'danger', onclick: () => act('disconnect', { user, client }) }, 'Disconnect')))));
}

async function act(method, params) {
  try {
    await api(method, params);
    await route();
    status(`${method} done`);
  } catch (err) {
    status(`${method} failed: ${err.message}`, 'error');
  }
}

// --- routing -------------------------------------------------------------------------------

function show(page) {
  for (const section of document.querySelectorAll('.page')) section.hidden = section.id !== `page-${page}`;
  for (const link of document.querySelectorAll('#nav a')) link.classList.toggle('active', link.dataset.page === page);
}

async function route() {
  status('');
  const [path, query] = location.hash.slice(1).split('?');
  const args = new URLSearchParams(query || '');
  const parts = (path || '/nodes').split('/').filter(Boolean);
  const page = parts[0] || 'nodes';
  try {
    if (page === 'channel') {
      show('channel');
      await showChannel(decodeURIComponent(parts.slice(1).join('/')));
    } else if (page === 'channels') {
      show('channels');
      await showChannels(args.get('pattern') || '');
    } else if (page === 'connections') {
      show('connections');
      await showConnections(args.get('user') || '');
    } else if (page === 'publish') {
      show('publish');
    } else {
      show('nodes');
      await showNodes();
    }
    document.body.dataset.ready = page;
  } catch (err) {
    status(err.message, 'error');
  }
}

function loggedIn() {
  $('#login').hidden = true;
  $('#nav').hidden = false;
  $('#logout').hidden = insecure;
  route();
}

function logout() {
  token = '';
  sessionStorage.removeItem(TOKEN_KEY);
  if (insecure) return;
  for (const section of document.querySelectorAll('.page')) section.hidden = true;
  $('#nav').hidden = true;
  $('#login').hidden = false;
  document.body.dataset.ready = 'login';
}

async function login(event) {
  event.preventDefault();
  const res = await fetch(`${BASE}/auth`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ password: $('#password').value }),
  });
  $('#password').value = '';
  if (res.ok) {
    token = (await res.json()).token;
    sessionStorage.setItem(TOKEN_KEY, token);
    $('#login-error').textContent = '';
    loggedIn();
  } else {
    $('#login-error').textContent = res.status === 429 ? 'Too many failed logins: wait a minute.' : 'Wrong password.';
    document.body.dataset.refused = String(res.status);
  }
}

async function publish(event) {
  event.preventDefault();
  let data;
  try {
    data = JSON.parse($('#publish-data').value);
  } catch {
    return status('data is not valid JSON', 'error');
  }
  const channel = $('#publish-channel').value;
  try {
    const result = await api('publish', { channel, data });
    status(`published to ${channel}${result && result.offset ? ` at offset ${result.offset}` : ''}`);
  } catch (err) {
    status(`publish failed: ${err.message}`, 'error');
  }
}

async function start() {
  $('#login-form').addEventListener('submit', login);
  $('#publish-form').addEventListener('submit', publish);
  $('#logout').addEventListener('click', logout);
  $('#channels-form').addEventListener('submit', (e) => {
    e.preventDefault();
    location.hash = `#/channels?pattern=${encodeURIComponent($('#channels-pattern').value)}`;
  });
  $('#connections-form').addEventListener('submit', (e) => {
    e.preventDefault();
    location.hash = `#/connections?user=${encodeURIComponent($('#connections-user').value)}`;
  });
  window.addEventListener('hashchange', route);
  const headers = token ? { authorization: `token ${token}` } : {};
  const init = await (await fetch(`${BASE}/init`, { headers })).json();
  insecure = init.insecure;
  if (init.authenticated) loggedIn();
  else logout();
}

start();
