// Opens one board URL in headless Debian chromium (playwright-core from client-js) and waits until
// its connection badge says LIVE and at least one task row shows; prints a JSON line with what it
// saw. Usage: node board_live.mjs URL TIMEOUT_MS
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, '../../client-js/package.json'));
const { chromium } = require('playwright-core');

const [url, timeoutText] = process.argv.slice(2);
const timeout = Number(timeoutText || 30000);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM_PATH || '/usr/bin/chromium',
  args: ['--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking'],
});
const errors = [];
try {
  const page = await browser.newPage();
  page.setDefaultTimeout(timeout);
  page.on('pageerror', (err) => errors.push(String(err)));
  await page.goto(url);
  await page.waitForSelector('#connection-badge[data-status="LIVE"]');
  await page.waitForSelector('[data-task-id]');
  const history = await page.evaluate(() => window.taskcast.badgeHistory);
  const rows = await page.evaluate(() => document.querySelectorAll('[data-task-id]').length);
  console.log(JSON.stringify({ live: true, history, rows, errors }));
} finally {
  await browser.close();
}
