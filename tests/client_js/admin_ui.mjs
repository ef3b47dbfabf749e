// The admin web UIs in headless Debian chromium (playwright-core from client-js/node_modules, as
// the board's browser tests): the gateway's (gateway/admin/) and the pipeline's
// (status_api/operator_ui.py). Driven by tests/client_js/test_admin_ui.py, which starts the real
// services, gives their URLs and data in ADMIN_UI (JSON), and checks the effects of the actions
// (the publication, the disconnect, the requeued row) from outside. Every wait is a Playwright
// wait with a timeout; a failure exits non-zero with the assertion's message.
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';

const cfg = JSON.parse(process.env.ADMIN_UI);
const require = createRequire(path.join(cfg.clientJs, 'package.json'));
const { chromium } = require('playwright-core');

const SCALE = Number(process.env.TASKCAST_TEST_TIME_SCALE || '1');
const ms = (n) => n * SCALE;
const shots = cfg.screenshots || '';
if (shots) mkdirSync(shots, { recursive: true });

async function shot(page, name) {
  if (shots) await page.screenshot({ path: path.join(shots, `${name}.png`), fullPage: true });
}

async function newPage(browser) {
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  page.setDefaultTimeout(ms(30000));
  page.errors = [];
  page.on('pageerror', (err) => page.errors.push(String(err)));
  page.on('console', (msg) => {
    // The refused logins' 401 and 403 are the answers this test asks for.
    if (msg.type() === 'error' && !/status of 40[13] /.test(msg.text())) page.errors.push(msg.text());
  });
  return page;
}

const ready = (page, name) => page.waitForSelector(`body[data-ready="${name}"]`);
const text = (page, sel) => page.textContent(sel);

async function gatewayUi(browser) {
  const g = cfg.gateway;
  const page = await newPage(browser);
  await page.goto(g.url + '/');
  await ready(page, 'login');

  // A refused login: 401, the form stays.
  await page.fill('#password', 'not the password');
  await page.click('#login-form button[type=submit]');
  await page.waitForSelector('body[data-refused="401"]');
  assert.equal(await text(page, '#login-error'), 'Wrong password.');
  assert.equal(await page.isVisible('#nav'), false);
  await shot(page, 'gateway-admin-login-refused');

  await page.fill('#password', g.password);
  await page.click('#login-form button[type=submit]');
  await ready(page, 'nodes');
  const nodeRows = await page.$$('#nodes-table tbody tr[data-node]');
  assert.equal(nodeRows.length, 1);
  assert.match(await text(page, '#nodes-totals'), /1 node\(s\) · 1 clients · 1 users · 1 subscriptions/);
  await shot(page, 'gateway-admin-nodes');

  await page.click('#nav a[data-page=channels]');
  await ready(page, 'channels');
  await page.fill('#channels-pattern', 'ro*');
  await page.click('#channels-form button[type=submit]');
  await page.waitForFunction(() => location.hash.includes('pattern=ro'));
  await page.waitForSelector(`#channels-table tr[data-channel="${g.channel}"]`);
  assert.equal(await text(page, `#channels-table tr[data-channel="${g.channel}"] td.num`), '1');
  await shot(page, 'gateway-admin-channels');

  await page.click(`#channels-table tr[data-channel="${g.channel}"] a`);
  await ready(page, 'channel');
  await page.waitForSelector(`#presence-table tr[data-client="${g.client}"]`);
  assert.equal(await text(page, `#presence-table tr[data-client="${g.client}"] td:nth-child(2)`), g.user);
  await page.waitForSelector('#history-table tr[data-offset="1"]');
  assert.equal(await text(page, '#history-table tr[data-offset="1"] code'), JSON.stringify(g.firstPublication));
  await shot(page, 'gateway-admin-channel');

  await page.click('#nav a[data-page=publish]');
  await ready(page, 'publish');
  await page.fill('#publish-channel', g.channel);
  await page.fill('#publish-data', JSON.stringify(g.publish));
  await page.click('#publish-form button[type=submit]');
  // the status line keeps its class between actions: wait for this answer's text, then its class
  const published = `published to ${g.channel} at offset 2`;
  await page.waitForFunction((want) => document.querySelector('#status').textContent === want, published);
  assert.equal(await page.getAttribute('#status', 'class'), 'ok');
  await shot(page, 'gateway-admin-publish');

  // Unsubscribe the client from the channel page (after the publish it must receive).
  await page.goto(`${g.url}/#/channel/${encodeURIComponent(g.channel)}`);
  await ready(page, 'channel');
  await page.click(`#presence-table tr[data-client="${g.client}"] button:not(.danger)`);
  await page.waitForFunction(() => document.querySelector('#status').textContent === 'unsubscribe done');

  await page.goto(`${g.url}/#/connections?user=${encodeURIComponent(g.user)}`);
  await ready(page, 'connections');
  await page.waitForSelector(`#connections-table tr[data-client="${g.client}"]`);
  await shot(page, 'gateway-admin-connections');
  await page.click(`#connections-table tr[data-client="${g.client}"] button.danger`);
  await page.waitForFunction(() => document.querySelector('#status').textContent === 'disconnect done');
  assert.deepEqual(page.errors, []);
  await page.close();
}

async function pipelineUi(browser) {
  const s = cfg.status;
  const page = await newPage(browser);
  await page.goto(s.url + '/admin/ui/');
  await ready(page, 'login');

  await page.fill('#credential', 'not-a-credential');
  await page.click('#login-form button[type=submit]');
  await page.waitForSelector('body[data-refused="401"]');
  assert.equal(await text(page, '#login-error'), 'Refused: not an operator credential.');
  await page.fill('#credential', s.coordinator);
  await page.click('#login-form button[type=submit]');
  await page.waitForSelector('body[data-refused="403"]');
  assert.equal(await text(page, '#login-error'), 'This credential has no admin role.');

  await page.fill('#credential', s.admin);
  await page.click('#login-form button[type=submit]');
  await ready(page, 'tasks');
  await page.waitForSelector(`#tasks-table tr[data-task-id="${s.taskId}"]`);
  await page.waitForSelector('#state-counts a[data-state="RUNNING"]');
  await shot(page, 'pipeline-tasks');

  await page.fill('#tasks-q', 'no such title');
  await page.click('#tasks-form button[type=submit]');
  await page.waitForSelector('#tasks-table td.totals');
  await page.goto(`${s.url}/admin/ui/#/tasks?state=RUNNING`);
  await page.waitForSelector(`#tasks-table tr[data-task-id="${s.taskId}"]`);

  await page.click(`#tasks-table tr[data-task-id="${s.taskId}"] a`);
  await ready(page, 'task');
  await page.waitForSelector('#events-table tr[data-version="2"]');
  await page.waitForSelector(`#task-outbox-table tr[data-row="${s.deadRow}"][data-status="DEAD"]`);
  await shot(page, 'pipeline-task-timeline');

  await page.click('#nav a[data-page=backlog]');
  await ready(page, 'backlog');
  await page.waitForSelector('#backlog-table tr[data-status="PENDING"]');
  assert.match(await text(page, '#backlog-summary'), /DEAD 1/);
  await shot(page, 'pipeline-backlog');

  await page.click('#nav a[data-page=relays]');
  await ready(page, 'relays');
  assert.match(await text(page, '#relay-lag'), /oldest due PENDING row: \d+\.\d s/);
  await shot(page, 'pipeline-relays');

  await page.click('#nav a[data-page=registries]');
  await ready(page, 'registries');
  await page.waitForSelector('#status-defs-table tbody tr td.num');
  await shot(page, 'pipeline-registries');

  await page.click('#nav a[data-page=dead]');
  await ready(page, 'dead');
  await page.waitForSelector(`#dead-table tr[data-row="${s.deadRow}"]`);
  await shot(page, 'pipeline-dead');
  await page.check(`#dead-table tr[data-row="${s.deadRow}"] input.pick`);
  await page.click('#dead-requeue');
  await page.waitForFunction(() => document.querySelector('#status').textContent === 'requeue: 1 row(s)');
  await page.waitForSelector('#dead-table td.totals');

  await page.click('#nav a[data-page=audit]');
  await ready(page, 'audit');
  await page.waitForSelector('#audit-table tr[data-action="dead.requeue"]');
  assert.equal(await text(page, '#audit-table tr[data-action="dead.requeue"] td:nth-child(2)'), s.operator);
  assert.equal(await text(page, '#audit-table tr[data-action="dead.requeue"] td:nth-child(4)'), String(s.deadRow));
  await shot(page, 'pipeline-audit');
  assert.deepEqual(page.errors, []);
  await page.close();
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM_PATH || '/usr/bin/chromium',
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
try {
  if (cfg.only !== 'status') await gatewayUi(browser);
  if (cfg.only !== 'gateway') await pipelineUi(browser);
  console.log('admin-ui: ok');
} finally {
  await browser.close();
}
