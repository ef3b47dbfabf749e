// An SSE-only browser: the gateway refuses WebSocket (`websocket.disabled: true`) and the network
// is slowed down (CDP latency + throughput limits); the board falls back to SSE emulation at the
// initial handshake and still converges.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { ms, startStack } from '../support/services.js';
import { boardUrl, launchWith } from './browser.js';

let stack;
let browser;

before(async () => {
  [stack, browser] = await launchWith(() => startStack({ gateway: { websocketDisabled: true } }));
});
after(async () => {
  await browser?.close();
  await stack?.stop();
});

test('with WebSocket refused and a slow network the board converges over SSE', async () => {
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  const cdp = await page.context().newCDPSession(page);
  await cdp.send('Network.enable');
  await cdp.send('Network.emulateNetworkConditions', { offline: false, latency: 250, downloadThroughput: 64 * 1024, uploadThroughput: 32 * 1024 });
  const early = await stack.coordinator.createTask({ owner: 'sse', title: 'Created before the page' });
  await page.goto(boardUrl(stack, 'sse'));
  await page.waitForSelector('#connection-badge[data-status="LIVE"]', { timeout: ms(30000) });
  assert.equal(await page.evaluate(() => window.taskcast.feed.client.transportName), 'sse');
  await page.waitForSelector(`[data-task-id="${early.id}"]`);
  const task = await stack.coordinator.createTask({ owner: 'sse', title: 'Over SSE' });
  await page.waitForSelector(`[data-task-id="${task.id}"]`, { timeout: ms(30000) });
  await page.click(`[data-task-id="${task.id}"]`);
  await stack.coordinator.walkToSuccess(task, 7300);
  await page.waitForSelector(`[data-task-id="${task.id}"][data-status="SUCCEEDED"][data-version="9"]`, { timeout: ms(30000) });
  assert.equal(await page.textContent(`[data-task-id="${task.id}"] [data-field="elapsed"]`), '7.3 s');
  await page.waitForFunction(() => document.querySelectorAll('.timeline li').length === 9, null, { timeout: ms(30000) });
  await page.close();
});
