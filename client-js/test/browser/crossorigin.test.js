// A web app on its own origin against a real `taskcast up --allowed-origin`, in headless Chromium:
// what a newcomer does with docs/quickstart.md ("Your own web app") and docs/client-js.md
// ("Deployments", cross-origin row). The page is served from http://localhost:<port> like a dev
// server and configures TaskFeed exactly as the docs say (baseUrl of the Status API, the gateway's
// WebSocket URL, the dev-mode user header): it goes LIVE, lists the user's task and follows it
// live. A page on an origin that was not given is refused by the gateway (WebSocket 403) and by
// the Status API (CORS): its requests never reach the app.
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';

import { ROOT, TaskcastUp, freePort, ms } from '../support/services.js';
import { assertClean, launchWith, newPage } from './browser.js';

const BUNDLE = join(ROOT, 'client-js', 'dist', 'taskcast.js');

let up;
let browser;
let app;
let other;

/** A static "dev server" on http://localhost:<port>: the page and the client-js bundle. */
async function devServer(page) {
  const port = await freePort();
  const server = createServer((req, res) => {
    if (req.url === '/taskcast.js') {
      res.writeHead(200, { 'content-type': 'text/javascript' });
      res.end(readFileSync(BUNDLE));
    } else if (req.url === '/') {
      res.writeHead(200, { 'content-type': 'text/html' });
      res.end(page());
    } else if (req.url === '/favicon.ico') {
      res.writeHead(204).end();
    } else {
      res.writeHead(404).end();
    }
  });
  await new Promise((ok) => server.listen(port, '127.0.0.1', ok));
  return { server, origin: `http://localhost:${port}` };
}

function appPage() {
  // docs/client-js.md, cross-origin, dev mode: `api: { baseUrl, headers: { 'X-Taskcast-Dev-User': … } }`.
  return `<!doctype html><meta charset="utf-8"><title>app</title><ul id="tasks"></ul>
<script type="module">
import { TaskFeed, taskList } from '/taskcast.js';
const feed = new TaskFeed({
  api: { baseUrl: ${JSON.stringify(up.apiUrl)}, headers: { 'X-Taskcast-Dev-User': 'demo/alice' } },
  endpoints: ${JSON.stringify(up.wsUrl)},
});
window.feed = feed;
feed.subscribe(() => {
  const state = feed.getSnapshot();
  document.getElementById('tasks').innerHTML = taskList(state)
    .map((t) => '<li data-task-id="' + t.id + '" data-status="' + t.lifecycleStatus + '">' + t.title + '</li>')
    .join('');
  document.body.dataset.connection = state.connection;
});
feed.start();
</script>`;
}

before(async () => {
  const dir = mkdtempSync(join(tmpdir(), 'taskcast-crossorigin-'));
  app = await devServer(() => appPage());
  other = await devServer(() => '<!doctype html><title>other</title>');
  [up, browser] = await launchWith(() => new TaskcastUp(dir, ['--allowed-origin', app.origin]).start());
});
after(async () => {
  await browser?.close();
  await up?.stop();
  app?.server.close();
  other?.server.close();
});

describe('an app on its own origin (taskcast up --allowed-origin)', () => {
  test('the documented cross-origin configuration goes LIVE and follows a task live', async () => {
    const task = await up.coordinator.createTask({ tenant: 'demo', owner: 'alice', title: 'Cross-origin report' });
    const page = await newPage(browser);
    await page.goto(`${app.origin}/`);
    const row = `[data-task-id="${task.id}"]`;
    await page.waitForSelector(`body[data-connection="LIVE"] ${row}[data-status="PENDING"]`, { timeout: ms(30000) });
    await up.coordinator.step(task, '01_prepare', 'STEP_STARTED', 'PREPARING');
    await page.waitForSelector(`${row}[data-status="RUNNING"]`, { timeout: ms(30000) });
    const later = await up.coordinator.createTask({ tenant: 'demo', owner: 'alice', title: 'Created while watching' });
    await page.waitForSelector(`[data-task-id="${later.id}"]`, { timeout: ms(30000) });
    assert.equal(await page.evaluate(() => window.feed.getSnapshot().connection), 'LIVE');
    assertClean(assert, page);
    await page.close();
  });

  test('an origin that was not given is refused by the gateway and the Status API', async () => {
    const page = await newPage(browser);
    await page.goto(`${other.origin}/`);
    const outcome = await page.evaluate(
      async ([api, ws]) => {
        let fetchError = null;
        try {
          await fetch(`${api}/api/tasks`, { headers: { 'X-Taskcast-Dev-User': 'demo/alice' } });
        } catch (err) {
          fetchError = err.name;
        }
        const socket = await new Promise((done) => {
          const s = new WebSocket(ws);
          s.onopen = () => done('open');
          s.onclose = (e) => done(`closed ${e.code}`);
        });
        return { fetchError, socket };
      },
      [up.apiUrl, up.wsUrl],
    );
    assert.deepEqual(outcome, { fetchError: 'TypeError', socket: 'closed 1006' });
    await page.close();
  });
});
