// Headless Debian chromium driven by playwright-core (recipes.md: executablePath /usr/bin/chromium
// and the probe's flag set; playwright makes its own temporary profile). Every wait is a Playwright waitFor* with a timeout.
import { chromium } from 'playwright-core';

import { ms } from '../support/services.js';

export const CHROMIUM = process.env.CHROMIUM_PATH || '/usr/bin/chromium';

export function launch() {
  return chromium.launch({
    executablePath: CHROMIUM,
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
}

/**
 * Start `services()` (resolving to something with `stop()`) and a browser together: both, or an
 * error once whichever did start is stopped again. A browser left open after a failed start keeps
 * node's test runner alive for ever (its pipe), so the suite would hang instead of failing.
 */
export async function launchWith(services) {
  const [started, launched] = await Promise.allSettled([services(), launch()]);
  if (started.status === 'fulfilled' && launched.status === 'fulfilled') return [started.value, launched.value];
  if (launched.status === 'fulfilled') await launched.value.close();
  if (started.status === 'fulfilled') await started.value.stop();
  throw started.status === 'rejected' ? started.reason : launched.reason;
}

export function boardUrl(stack, user, extra = '') {
  return `${stack.api.url}/board/?gateway=${encodeURIComponent(stack.gateway.url)}&user=${encodeURIComponent(`t1/${user}`)}${extra}`;
}

export const DESKTOP = { width: 1360, height: 860 };
export const PHONE = { width: 390, height: 844 };

/**
 * A page that records uncaught errors (`page.errors`), console errors (`page.consoleErrors`) and
 * HTTP responses >= 400 (`page.badResponses`, e.g. a missing favicon), and counts navigations.
 */
export async function newPage(browser, viewport = DESKTOP) {
  const page = await browser.newPage({ viewport });
  page.setDefaultTimeout(ms(30000));
  page.errors = [];
  page.consoleErrors = [];
  page.badResponses = [];
  page.on('pageerror', (err) => page.errors.push(String(err)));
  page.on('console', (msg) => {
    if (msg.type() === 'error') page.consoleErrors.push(msg.text());
  });
  page.on('response', (res) => {
    if (res.status() >= 400) page.badResponses.push(`${res.status()} ${res.url()}`);
  });
  return page;
}

/** Open the board and wait until the badge says LIVE (or `waitFor`, a selector). */
export async function openBoard(browser, url, { viewport = DESKTOP, waitFor = '#connection-badge[data-status="LIVE"]' } = {}) {
  const page = await newPage(browser, viewport);
  let navigations = 0;
  // Document loads only: selecting a task is a same-document navigation (history.pushState).
  page.on('load', () => {
    navigations += 1;
  });
  page.navigations = () => navigations;
  await page.goto(url);
  if (waitFor) await page.waitForSelector(waitFor, { timeout: ms(30000) });
  return page;
}

/** [{id, version, status}] of the rendered list, sorted by id. */
export function boardRows(page) {
  return page.$$eval('[data-task-id]', (els) =>
    els.map((el) => ({ id: el.dataset.taskId, version: el.dataset.version, status: el.dataset.status })).sort((a, b) => (a.id < b.id ? -1 : 1)),
  );
}

/** Nothing went wrong in the page: no uncaught error, no console error, no HTTP error response. */
export function assertClean(assert, page) {
  assert.deepEqual(page.errors, [], 'uncaught errors');
  assert.deepEqual(page.consoleErrors, [], 'console errors');
  assert.deepEqual(page.badResponses, [], 'HTTP error responses');
}

/** The page does not scroll sideways (nothing wider than the viewport). */
export function horizontalOverflow(page) {
  return page.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth);
}
