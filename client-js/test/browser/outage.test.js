// The board through outages, in headless Chromium against real processes (gateway, Status API,
// outbox relay): a cold start with the gateway down, the Status API down while the gateway
// restarts, and the detail pane after a STALE period. Every wait is a condition with a bound.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { devUser, ms, Relay, startStack } from '../support/services.js';
import { boardRows, boardUrl, launchWith, openBoard } from './browser.js';

let stack;
let browser;
const STALE_WAIT = ms(40000); // the feed's staleAfterMs (10 s) plus a loaded machine

before(async () => {
  [stack, browser] = await launchWith(() => startStack());
});
after(async () => {
  await browser?.close();
  await stack?.stop();
});

async function dbRows(user) {
  const res = await fetch(`${stack.api.url}/api/tasks?limit=100`, { headers: devUser('t1', user) });
  const body = await res.json();
  return body.items.map((t) => ({ id: t.id, version: t.version, status: t.lifecycleStatus })).sort((a, b) => (a.id < b.id ? -1 : 1));
}

async function restartRelay() {
  await stack.relay.stop();
  stack.relay = new Relay(stack.dir, stack.api.dbUrl, stack.gateway).start();
}

describe('board through outages', () => {
  test('cold start with the gateway down: the snapshot is shown, then the STALE badge and banner; LIVE once it is back', async () => {
    const user = 'cold';
    const done = await stack.coordinator.createTask({ owner: user, title: 'Finished before the outage' });
    await stack.coordinator.walkToSuccess(done, 4200);
    const running = await stack.coordinator.createTask({ owner: user, title: 'Running during the outage' });
    await stack.coordinator.step(running, '01_prepare', 'STEP_STARTED', 'PREPARING');
    await stack.gateway.proc.stop();
    const page = await openBoard(browser, boardUrl(stack, user), { waitFor: `[data-task-id="${running.id}"]` });
    assert.equal(await page.locator('[data-field="list-empty"]').count(), 0, 'never "No tasks yet" while tasks exist');
    await page.waitForSelector(`[data-task-id="${done.id}"][data-status="SUCCEEDED"]`);
    await page.waitForSelector('#connection-badge[data-status="STALE"]', { timeout: STALE_WAIT });
    assert.equal(await page.isVisible('#stale-banner'), true);
    assert.match(await page.textContent('#stale-banner'), /running, status unconfirmed/);
    await page.waitForSelector(`[data-task-id="${running.id}"] [data-field="unconfirmed"]`);
    assert.equal(await page.locator(`[data-task-id="${done.id}"] [data-field="unconfirmed"]`).count(), 0, 'finished tasks are confirmed');
    await stack.gateway.start();
    await page.waitForSelector('#connection-badge[data-status="LIVE"]', { timeout: ms(30000) });
    assert.equal(await page.isVisible('#stale-banner'), false);
    const later = await stack.coordinator.createTask({ owner: user, title: 'Created after the outage' });
    await page.waitForSelector(`[data-task-id="${later.id}"]`, { timeout: ms(30000) });
    assert.equal(page.navigations(), 1, 'no reload');
    assert.deepEqual(page.errors, []);
    await page.close();
  });

  test('the Status API is down while the gateway restarts: the list read is retried and the board recovers without reload', async () => {
    const user = 'flap';
    const a = await stack.coordinator.createTask({ owner: user, title: 'Before the restart' });
    const page = await openBoard(browser, boardUrl(stack, user));
    await page.waitForSelector(`[data-task-id="${a.id}"]`);
    await stack.relay.stop();
    await stack.gateway.proc.stop();
    await stack.api.stop();
    // New epoch: the client must re-read the list, and the API is down - that read fails.
    const failedRead = page.waitForEvent('requestfailed', { predicate: (r) => r.url().includes('/api/tasks?'), timeout: ms(30000) });
    await stack.gateway.start();
    await failedRead;
    assert.notEqual(await page.getAttribute('#connection-badge', 'data-status'), 'LIVE');
    await stack.api.start();
    stack.relay = new Relay(stack.dir, stack.api.dbUrl, stack.gateway).start();
    await page.waitForSelector('#connection-badge[data-status="LIVE"]', { timeout: ms(60000) });
    const b = await stack.coordinator.createTask({ owner: user, title: 'Created after the recovery' });
    await page.waitForSelector(`[data-task-id="${b.id}"]`, { timeout: ms(30000) });
    await stack.coordinator.walkToSuccess(a, 3000);
    await page.waitForSelector(`[data-task-id="${a.id}"][data-status="SUCCEEDED"]`, { timeout: ms(30000) });
    assert.deepEqual(await boardRows(page), await dbRows(user));
    assert.equal(page.navigations(), 1, 'no reload');
    assert.deepEqual(page.errors, []);
    await page.close();
  });

  test('after a STALE period the detail pane shows one version: never a newer header over older steps', async () => {
    const user = 'consist';
    const task = await stack.coordinator.createTask({ owner: user, title: 'Transcoded while offline' });
    await stack.coordinator.step(task, '01_prepare', 'STEP_STARTED', 'PREPARING');
    const page = await openBoard(browser, boardUrl(stack, user, `&task=${encodeURIComponent(task.id)}`));
    await page.waitForSelector(`.detail-head[data-detail-id="${task.id}"][data-version="2"]`, { timeout: ms(30000) });
    // Record every rendering of the pane: header version/status, step states, the row's version.
    await page.evaluate((id) => {
      window.renders = [];
      const record = () => {
        const head = document.querySelector('.detail-head[data-version]');
        if (!head) return;
        window.renders.push({
          head: head.dataset.version,
          status: head.dataset.status,
          steps: [...document.querySelectorAll('.step')].map((s) => s.dataset.state),
          row: document.querySelector(`[data-task-id="${id}"]`)?.dataset.version,
          behind: Boolean(document.querySelector('[data-field="behind"]')),
        });
      };
      new MutationObserver(record).observe(document.querySelector('#layout'), { subtree: true, childList: true, attributes: true });
    }, task.id);
    await stack.relay.stop();
    await stack.gateway.proc.stop();
    await page.waitForSelector('#connection-badge[data-status="STALE"]', { timeout: STALE_WAIT });
    await page.waitForSelector('[data-field="detail-unconfirmed"]');
    await stack.coordinator.walkToSuccess(task, 9000);
    const final = (await dbRows(user)).find((t) => t.id === task.id).version;
    // The feed's low-frequency status:batchGet while not LIVE (30 s ± 30 %) brings the summary forward;
    // the open detail must then be re-read, not left at the old version under a newer header.
    await page.waitForSelector(`[data-task-id="${task.id}"][data-version="${final}"]`, { timeout: ms(70000) });
    await page.waitForSelector(`.detail-head[data-version="${final}"][data-status="SUCCEEDED"]`, { timeout: ms(30000) });
    await page.waitForFunction((n) => document.querySelectorAll('.timeline li').length === n, Number(final), { timeout: ms(30000) });
    assert.deepEqual(await page.$$eval('.step', (els) => els.map((e) => e.dataset.state)), ['SUCCEEDED', 'SUCCEEDED', 'SUCCEEDED']);
    const renders = await page.evaluate(() => window.renders);
    for (const r of renders) {
      if (r.row && BigInt(r.row) > BigInt(r.head)) assert.ok(r.behind, `v${r.head} detail under a v${r.row} summary is marked updating`);
      if (r.status === 'SUCCEEDED') assert.deepEqual(r.steps, ['SUCCEEDED', 'SUCCEEDED', 'SUCCEEDED'], 'no mixed versions');
    }
    await stack.gateway.start();
    await restartRelay();
    await page.waitForSelector('#connection-badge[data-status="LIVE"]', { timeout: ms(30000) });
    assert.equal(await page.locator('[data-field="detail-unconfirmed"]').count(), 0);
    assert.deepEqual(page.errors, []);
    await page.close();
  });
});
