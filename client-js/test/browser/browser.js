// Headless Debian chromium driven by playwright-core (recipes.md: executablePath /usr/bin/chromium
// and the probe's flag set; playwright makes its own temporary profile). Every wait is a Playwright waitFor* with a timeout.
import { chromium } from 'playwright-core';

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

export function boardUrl(stack, user, extra = '') {
  return `${stack.api.url}/board/?gateway=${encodeURIComponent(stack.gateway.url)}&user=${encodeURIComponent(`t1/${user}`)}${extra}`;
}

/** Open the board and wait until the badge says LIVE. */
export async function openBoard(browser, url) {
  const page = await browser.newPage({ viewport: { width: 1360, height: 860 } });
  const errors = [];
  page.on('pageerror', (err) => errors.push(String(err)));
  page.errors = errors;
  let navigations = 0;
  page.on('framenavigated', (frame) => {
    if (frame === page.mainFrame()) navigations += 1;
  });
  page.navigations = () => navigations;
  await page.goto(url);
  await page.waitForSelector('#connection-badge[data-status="LIVE"]', { timeout: 20000 });
  return page;
}

/** [{id, version, status}] of the rendered list, sorted by id. */
export function boardRows(page) {
  return page.$$eval('[data-task-id]', (els) =>
    els.map((el) => ({ id: el.dataset.taskId, version: el.dataset.version, status: el.dataset.status })).sort((a, b) => (a.id < b.id ? -1 : 1)),
  );
}
