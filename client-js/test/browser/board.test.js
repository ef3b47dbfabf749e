// The task board in headless Chromium against real processes: gateway, Status API (serving the
// board at /board/) and the outbox relay. Tasks are created and advanced through the Status
// API's internal endpoints like a coordinator and workers would.
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';

import { DOCUMENT_STEPS, Relay, ROOT, SERVICE_SECRET, devUser, hs256, ms, startStack, waitFor } from '../support/services.js';
import { PHONE, assertClean, boardRows, boardUrl, horizontalOverflow, launchWith, newPage, openBoard } from './browser.js';

let stack;
let browser;
// Screenshots go to a temp dir; `TASKCAST_SCREENSHOT_DIR=docs/img` refreshes the tracked ones on purpose.
const SHOTS = process.env.TASKCAST_SCREENSHOT_DIR || join(tmpdir(), 'taskcast-board-shots');

before(async () => {
  [stack, browser] = await launchWith(() => startStack());
});
after(async () => {
  await browser?.close();
  await stack?.stop();
});

async function dbSnapshot(user) {
  const res = await fetch(`${stack.api.url}/api/tasks?limit=100`, { headers: devUser('t1', user) });
  const body = await res.json();
  return body.items.map((t) => ({ id: t.id, version: t.version, status: t.lifecycleStatus })).sort((a, b) => (a.id < b.id ? -1 : 1));
}

describe('task board', () => {
  test('a task created through the API appears without reload and walks to SUCCEEDED with the right duration', async () => {
    const page = await openBoard(browser, boardUrl(stack, 'walk'));
    const task = await stack.coordinator.createTask({ owner: 'walk', title: 'Quarterly contract review' });
    const row = `[data-task-id="${task.id}"]`;
    await page.waitForSelector(`${row}[data-status="PENDING"]`, { timeout: ms(30000) });
    await page.click(row);
    await page.waitForSelector(`[data-detail-id="${task.id}"]`);
    await stack.coordinator.walkToSuccess(task, 42600);
    await page.waitForSelector(`${row}[data-status="SUCCEEDED"][data-version="9"]`, { timeout: ms(30000) });
    assert.equal(await page.textContent(`${row} [data-field="elapsed"]`), '42.6 s');
    await page.waitForSelector('[data-step-id="02_parse"] .data >> text=36 pages');
    assert.equal(await page.textContent('[data-field="detail-elapsed"]'), '42.6 s');
    await page.waitForFunction((n) => document.querySelectorAll('.timeline li').length === n, 9);
    // Durations per design §9.3 and the finish time (not the creation time) on the row.
    assert.equal(await page.textContent('[data-step-id="01_prepare"] [data-field="size"]'), '471 KB');
    assert.match(await page.textContent(`${row} [data-field="milestone"]`), /^Finished (just now|\d+ s ago)$/);
    const finishedAt = await page.evaluate((id) => window.taskcast.feed.getSnapshot().tasks[id].finishedAt, task.id);
    assert.ok(finishedAt, 'summary carries finishedAt');
    assert.equal(await page.getAttribute(`${row} [data-field="milestone"] time`, 'datetime'), finishedAt);
    assert.match(await page.getAttribute(`${row} [data-field="milestone"] time`, 'title'), /^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} \(UTC/);
    assert.match(await page.textContent('[data-field="finished-at"]'), /^Succeeded /);
    assert.notEqual(await page.textContent('[data-field="total"]'), '—');
    assert.equal(page.navigations(), 1, 'no reload');
    assertClean(assert, page);
    await page.close();
  });

  test('a failed step shows its notice once, even when the push is delivered again', async () => {
    const user = 'fail';
    const page = await openBoard(browser, boardUrl(stack, user));
    await page.evaluate(() => {
      window.noticePushes = [];
      window.taskcast.feed.client.on('publication', (ctx) => {
        if (ctx.data.notice) window.noticePushes.push(ctx);
      });
    });
    const task = await stack.coordinator.createTask({ owner: user, title: 'Scanned invoices (batch 7)' });
    await stack.coordinator.step(task, '01_prepare', 'STEP_STARTED', 'PREPARING');
    await stack.coordinator.step(task, '01_prepare', 'STEP_COMPLETED', 'PREPARED', { durationMs: 1200 });
    await stack.coordinator.step(task, '02_parse', 'STEP_STARTED', 'PARSING');
    await stack.coordinator.step(task, '02_parse', 'STEP_FAILED', 'PARSE_FAILED', {
      error: { category: 'BUSINESS_INPUT', code: 'UNREADABLE_FILE', retryable: false, userMessage: 'The file could not be opened' },
    });
    const toast = await page.waitForSelector('.toast[data-notice-id]', { timeout: ms(30000) });
    const noticeId = await toast.getAttribute('data-notice-id');
    assert.match(noticeId, new RegExp(`^${task.id}:\\d+$`));
    // At-least-once delivery: publish the very same summary again, and re-read the snapshot.
    const pushed = await page.evaluate(() => window.noticePushes[0]);
    await stack.gateway.publish(pushed.channel, pushed.data);
    await page.waitForFunction(() => window.noticePushes.length === 2);
    await page.evaluate(() => window.taskcast.feed.check({ recalibrate: true }));
    await page.evaluate(() => window.taskcast.feed._loadList());
    const shown = await page.evaluate((id) => window.taskcast.shownNotices.filter((x) => x === id).length, noticeId);
    assert.equal(shown, 1);
    assert.equal(await page.locator(`.toast[data-notice-id="${noticeId}"]`).count(), 1);
    await page.click(`[data-task-id="${task.id}"]`);
    await page.waitForSelector('[data-step-id="02_parse"] [data-field="step-error"] >> text=The file could not be opened');
    assert.equal(await page.textContent('[data-step-id="03_store"] [data-field="step-status"]'), 'Waiting');
    await stack.coordinator.finish(task, 'TASK_FAILED', 'REJECTED', {
      failedStepId: '02_parse',
      error: { category: 'BUSINESS_INPUT', code: 'UNREADABLE_FILE', retryable: false, userMessage: 'The file could not be opened' },
    });
    // After the failure the later step did not run: it is not "queued" any more.
    await page.waitForSelector('[data-step-id="03_store"][data-state="SKIPPED"] [data-field="step-status"] >> text=Not run', { timeout: ms(30000) });
    assert.equal(await page.locator('.detail-pane button:has-text("Retry"), .detail-pane button:has-text("Download")').count(), 0, 'no dead buttons');
    assertClean(assert, page);
    await page.close();
  });

  test('a retried task shows its attempt in the list, the detail header and the timeline (down to 360 px)', async () => {
    const user = 'retry';
    const co = stack.coordinator;
    const task = await co.createTask({ owner: user, title: 'Retried after an OCR timeout' });
    await co.step(task, '01_prepare', 'STEP_STARTED', 'PREPARING');
    await co.step(task, '01_prepare', 'STEP_COMPLETED', 'PREPARED', { durationMs: 900 });
    await co.step(task, '02_parse', 'STEP_STARTED', 'PARSING');
    const error = { category: 'DEPENDENCY', code: 'OCR_TIMEOUT', retryable: true, userMessage: 'OCR timed out' };
    await co.step(task, '02_parse', 'STEP_FAILED', 'PARSE_FAILED', { error });
    const page = await openBoard(browser, boardUrl(stack, user, `&task=${encodeURIComponent(task.id)}`));
    const row = `[data-task-id="${task.id}"]`;
    await page.waitForSelector('[data-step-id="02_parse"][data-state="FAILED"]', { timeout: ms(30000) });
    assert.equal(await page.locator(`${row} [data-field="attempt"], [data-field="detail-attempt"]`).count(), 0, 'no chip on a first attempt');
    // The retry arrives as a push (summary and detail, its timeline entry from the triggerEvent).
    await co.retryTask(task);
    await page.waitForSelector(`${row} [data-field="attempt"] >> text=Attempt 2`, { timeout: ms(30000) });
    await page.waitForSelector('[data-field="detail-attempt"] >> text=Attempt 2');
    await page.waitForSelector('.timeline li.TASK_ATTEMPT_CREATED .what >> text=Retried · attempt 2 started');
    assert.equal(await page.evaluate((id) => window.taskcast.feed.getSnapshot().tasks[id].taskAttempt, task.id), 2);
    await page.setViewportSize({ width: 360, height: 800 });
    assert.ok((await horizontalOverflow(page)) <= 0, `detail overflows at 360 px by ${await horizontalOverflow(page)} px`);
    await page.click('.detail-pane [data-action="back"]');
    await page.waitForSelector('.list-pane', { state: 'visible' });
    assert.ok((await horizontalOverflow(page)) <= 0, `list overflows at 360 px by ${await horizontalOverflow(page)} px`);
    assertClean(assert, page);
    await page.close();
  });

  test('the gateway restarts while the page is open: RECOVERING, then LIVE, and the board equals the DB', async () => {
    const user = 'restart';
    const page = await openBoard(browser, boardUrl(stack, user));
    const a = await stack.coordinator.createTask({ owner: user, title: 'Before the restart' });
    const b = await stack.coordinator.createTask({ owner: user, title: 'Advanced while the gateway is down' });
    await page.waitForSelector(`[data-task-id="${b.id}"]`);
    // Stop the relay too, so what changes while the gateway is down can only arrive by re-reading.
    await stack.relay.stop();
    await stack.gateway.proc.stop();
    const down = Date.now();
    await page.waitForSelector('#connection-badge[data-status="RECOVERING"]', { timeout: ms(30000) });
    await stack.coordinator.walkToSuccess(a, 5000);
    await stack.coordinator.step(b, '01_prepare', 'STEP_STARTED', 'PREPARING');
    const c = await stack.coordinator.createTask({ owner: user, title: 'Created while the gateway is down' });
    await stack.gateway.start();
    await page.waitForSelector('#connection-badge[data-status="LIVE"]', { timeout: ms(30000) });
    const outage = Date.now() - down;
    const history = await page.evaluate(() => window.taskcast.badgeHistory);
    // An outage longer than the feed's staleAfterMs (10 s; a loaded machine gets there) turns
    // RECOVERING into STALE ("Updates paused") before LIVE; a shorter one goes straight back.
    const tail = JSON.stringify(history.slice(history.lastIndexOf('RECOVERING')));
    const allowed = [JSON.stringify(['RECOVERING', 'LIVE'])];
    if (outage >= 10000) allowed.push(JSON.stringify(['RECOVERING', 'STALE', 'LIVE']));
    assert.ok(allowed.includes(tail), `badge ${tail} after an outage of ${outage} ms`);
    await page.waitForSelector(`[data-task-id="${c.id}"]`, { timeout: ms(30000) });
    assert.deepEqual(await boardRows(page), await dbSnapshot(user));
    stack.relay = new Relay(stack.dir, stack.api.dbUrl, stack.gateway).start();
    await page.close();
  });

  test('health: a STALE step and a DEGRADED task are marked in the list, the detail header and on the step', async () => {
    const user = 'health';
    const co = stack.coordinator;
    const admin = hs256({ sub: 'ops-oncall', roles: ['admin'], exp: Math.floor(Date.now() / 1000) + 600 }, SERVICE_SECRET);
    const silent = await co.createTask({ owner: user, title: 'Worker went quiet' });
    await co.step(silent, '01_prepare', 'STEP_STARTED', 'PREPARING');
    // What the reconciler does when heartbeats stop (seed §7): the running step becomes STALE.
    const correction = { reason: 'heartbeat timeout (test)', stepId: '01_prepare', businessStatus: 'PREPARING', health: 'STALE' };
    await co.post(`/admin/v1/tasks/${silent.id}/corrections`, correction, admin);
    const degraded = await co.createTask({ owner: user, title: 'Indexed without search' });
    await co.step(degraded, '01_prepare', 'STEP_STARTED', 'PREPARING');
    await co.step(degraded, '01_prepare', 'STEP_COMPLETED', 'PREPARED', { durationMs: 800 });
    await co.step(degraded, '02_parse', 'STEP_STARTED', 'PARSING');
    await co.step(degraded, '02_parse', 'STEP_COMPLETED', 'PARSE_COMPLETED', { durationMs: 1500 });
    await co.step(degraded, '03_store', 'STEP_STARTED', 'PERSISTING');
    await co.step(degraded, '03_store', 'STEP_FAILED', 'PERSIST_FAILED', {
      error: { category: 'DEPENDENCY', code: 'SEARCH_INDEX_UNAVAILABLE', retryable: false, userMessage: 'Not added to search yet' },
    });
    await co.finish(degraded, 'TASK_COMPLETED', 'COMPLETED', { durationMs: 4000 });
    const page = await openBoard(browser, boardUrl(stack, user, `&task=${encodeURIComponent(silent.id)}`));
    await page.waitForSelector(`[data-task-id="${silent.id}"] .health.STALE`);
    await page.waitForSelector('.detail-head[data-health="STALE"] [data-field="detail-health-chip"]');
    await page.waitForSelector('[data-step-id="01_prepare"] [data-field="step-health"].STALE');
    assert.match(await page.textContent('[data-field="detail-health"]'), /status is unconfirmed/);
    await page.waitForSelector(`[data-task-id="${degraded.id}"][data-status="SUCCEEDED"] .health.DEGRADED`);
    await page.click(`[data-task-id="${degraded.id}"]`);
    await page.waitForSelector('.detail-head[data-health="DEGRADED"] [data-field="detail-health-chip"] >> text=Degraded');
    assert.match(await page.textContent('[data-field="detail-health"]'), /optional step failed/);
    assertClean(assert, page);
    await page.close();
  });

  test('deep links: the selected task, filter and search survive a reload; back returns to the list', async () => {
    const user = 'deeplink';
    const co = stack.coordinator;
    const keep = await co.createTask({ owner: user, title: 'Invoice March.pdf' });
    await co.createTask({ owner: user, title: 'Invoice April.pdf' });
    await co.createTask({ owner: user, title: 'Board minutes' });
    const page = await openBoard(browser, boardUrl(stack, user));
    await page.waitForFunction(() => document.querySelectorAll('[data-task-id]').length === 3);
    await page.fill('#search', 'invoice');
    await page.waitForFunction(() => document.querySelectorAll('[data-task-id]').length === 2);
    await page.click('[data-filter="active"]');
    await page.click(`[data-task-id="${keep.id}"]`);
    await page.waitForSelector(`.detail-head[data-detail-id="${keep.id}"][data-version]`);
    const url = new URL(page.url());
    assert.equal(url.searchParams.get('task'), keep.id);
    assert.equal(url.searchParams.get('q'), 'invoice');
    assert.equal(url.searchParams.get('state'), 'active');
    await page.reload();
    await page.waitForSelector('#connection-badge[data-status="LIVE"]', { timeout: ms(30000) });
    await page.waitForSelector(`.detail-head[data-detail-id="${keep.id}"][data-version]`, { timeout: ms(30000) });
    assert.equal(await page.inputValue('#search'), 'invoice');
    assert.equal(await page.getAttribute('[data-filter="active"]', 'aria-pressed'), 'true');
    assert.equal(await page.locator('[data-task-id]').count(), 2);
    assert.equal(await page.getAttribute(`[data-task-id="${keep.id}"]`, 'class'), 'task selected');
    await page.goBack();
    await page.waitForSelector('.detail-pane .placeholder');
    assert.equal(new URL(page.url()).searchParams.get('task'), null);
    assertClean(assert, page);
    await page.close();
  });

  test('a deep link to a task that is not yours says so instead of loading forever', async () => {
    const page = await openBoard(browser, boardUrl(stack, 'nobody', '&task=not-a-task-of-mine'));
    await page.waitForSelector('[data-field="detail-missing"] >> text=not among your tasks', { timeout: ms(30000) });
    assert.deepEqual(page.errors, []);
    await page.close();
  });

  test('paging: older tasks load when the list is scrolled to its end', async () => {
    const user = 'many';
    const ids = [];
    for (let i = 0; i < 57; i += 1) ids.push((await stack.coordinator.createTask({ owner: user, title: `Batch item ${String(i).padStart(2, '0')}` })).id);
    const page = await openBoard(browser, boardUrl(stack, user));
    await page.waitForFunction(() => document.querySelectorAll('[data-task-id]').length >= 50);
    await page.locator('[data-action="more"]').scrollIntoViewIfNeeded();
    await page.waitForFunction((n) => document.querySelectorAll('[data-task-id]').length === n, 57, { timeout: ms(30000) });
    assert.equal(await page.locator('[data-action="more"]').count(), 0, 'nothing more to load');
    assert.match(await page.textContent('#counts'), /^57 tasks/);
    // The search covers the loaded older tasks too.
    await page.fill('#search', 'item 00');
    await page.waitForSelector(`[data-task-id="${ids[0]}"]`);
    assertClean(assert, page);
    await page.close();
  });

  test('without a user the board asks who you are instead of showing an empty live board', async () => {
    const page = await newPage(browser);
    // No gateway parameter: the Status API's board.gateway_url (config.js) names the gateway.
    await page.goto(`${stack.api.url}/board/`);
    await page.waitForSelector('[data-field="choose-user"]');
    await page.screenshot({ path: join(tmpdir(), 'taskcast-board-choose-user.png') });
    assert.equal(await page.getAttribute('#connection-badge', 'data-status'), 'IDLE');
    assert.equal(await page.textContent('#connection-badge .label'), 'Not connected');
    await page.fill('#choose-form input', 't1/chooser');
    await page.click('#choose-form button');
    await page.waitForSelector('#connection-badge[data-status="LIVE"]', { timeout: ms(30000) });
    assert.equal(new URL(page.url()).searchParams.get('user'), 't1/chooser');
    await page.waitForSelector('[data-field="list-empty"]');
    // The Status API's own root is a landing page pointing here, with the same favicon.
    await page.goto(`${stack.api.url}/`);
    await page.waitForSelector('a[href="/board/"]');
    await page.screenshot({ path: join(tmpdir(), 'taskcast-landing.png') });
    assertClean(assert, page);
    await page.close();
  });

  test('screenshot of a board with running, failed and finished tasks (desktop and 390 px, no overflow)', async () => {
    const user = 'demo';
    const co = stack.coordinator;
    const done = await co.createTask({ owner: user, title: 'Master services agreement.pdf' });
    await co.walkToSuccess(done, 42600);
    const failed = await co.createTask({ owner: user, title: 'Scanned invoices (batch 7)' });
    await co.step(failed, '01_prepare', 'STEP_STARTED', 'PREPARING');
    await co.step(failed, '01_prepare', 'STEP_COMPLETED', 'PREPARED', { durationMs: 1800 });
    await co.step(failed, '02_parse', 'STEP_STARTED', 'PARSING');
    const error = { category: 'BUSINESS_INPUT', code: 'UNREADABLE_FILE', retryable: false, userMessage: 'The file could not be opened' };
    await co.step(failed, '02_parse', 'STEP_FAILED', 'PARSE_FAILED', { error });
    await co.finish(failed, 'TASK_FAILED', 'REJECTED', { failedStepId: '02_parse', error });
    const video = await co.createTask({
      owner: user,
      title: 'Product launch video (4K) — final cut with subtitles and chapter markers',
      steps: [DOCUMENT_STEPS[0], { stepId: '02_transcode', operationCode: 'VIDEO.TRANSCODE', producerId: 'video-worker' }],
    });
    await co.step(video, '01_prepare', 'STEP_STARTED', 'PREPARING');
    await co.step(video, '01_prepare', 'STEP_COMPLETED', 'PREPARED', { durationMs: 2400 });
    await co.step(video, '02_transcode', 'STEP_STARTED', 'PARSING');
    await co.step(video, '02_transcode', 'STEP_PROGRESS', 'PARSING', {
      progress: { current: 2210, total: 5400, unit: 'frame' },
      data: { schema: 'video.transcode.progress.v1', value: { frame: 2210, totalFrames: 5400, fps: 59.94, preset: 'h264-high' } },
    });
    const doc = await co.createTask({ owner: user, title: 'Supplier agreement — Northwind' });
    await co.step(doc, '01_prepare', 'STEP_STARTED', 'PREPARING');
    await co.step(doc, '01_prepare', 'STEP_COMPLETED', 'PREPARED', {
      durationMs: 3100,
      data: { schema: 'file.prepare.completed.v1', value: { fileName: 'northwind-supplier.pdf', sizeBytes: 40112890 } },
    });
    await co.step(doc, '02_parse', 'STEP_STARTED', 'PARSING');
    await co.step(doc, '02_parse', 'STEP_PROGRESS', 'PARSING', {
      progress: { current: 18, total: 36, unit: 'page' },
      data: { schema: 'document.parse.progress.v1', value: { currentPage: 18, totalPages: 36 } },
    });
    await co.createTask({ owner: user, title: 'Board minutes — November' });

    const page = await openBoard(browser, boardUrl(stack, user, `&task=${encodeURIComponent(doc.id)}`));
    await page.waitForFunction(() => document.querySelectorAll('[data-task-id]').length === 5);
    await page.waitForSelector(`[data-task-id="${failed.id}"][data-status="FAILED"]`);
    await page.waitForSelector('[data-step-id="02_parse"] .data >> text=Page');
    assert.equal(await page.textContent('[data-step-id="01_prepare"] [data-field="size"]'), '38.3 MB');
    await page.waitForSelector(`[data-task-id="${video.id}"] .bar span[style*="41%"]`);
    await page.waitForFunction(() => document.querySelectorAll('.timeline li').length === 5);
    await page.evaluate(() => document.querySelectorAll('.toast').forEach((t) => t.remove()));
    mkdirSync(SHOTS, { recursive: true });
    await page.screenshot({ path: join(SHOTS, 'board.png') });
    assertClean(assert, page);
    await page.close();

    // The same board on a 390 px phone: list first, a tap opens the detail, nothing scrolls sideways.
    const phone = await openBoard(browser, boardUrl(stack, user), { viewport: PHONE });
    await phone.waitForFunction(() => document.querySelectorAll('[data-task-id]').length === 5);
    assert.ok((await horizontalOverflow(phone)) <= 0, `list overflows by ${await horizontalOverflow(phone)} px`);
    await phone.evaluate(() => document.querySelectorAll('.toast').forEach((t) => t.remove()));
    await phone.screenshot({ path: join(SHOTS, 'board-mobile.png') });
    await phone.click(`[data-task-id="${failed.id}"]`);
    await phone.waitForSelector(`.detail-head[data-detail-id="${failed.id}"][data-version]`);
    await phone.waitForSelector('[data-step-id="03_store"][data-state="SKIPPED"]');
    assert.equal(await phone.isVisible('.list-pane'), false, 'the detail replaces the list on a phone');
    assert.ok((await horizontalOverflow(phone)) <= 0, `detail overflows by ${await horizontalOverflow(phone)} px`);
    await phone.evaluate(() => document.querySelectorAll('.toast').forEach((t) => t.remove()));
    await phone.screenshot({ path: join(SHOTS, 'board-mobile-detail.png') });
    await phone.click('.detail-pane [data-action="back"]');
    await phone.waitForSelector('.list-pane', { state: 'visible' });
    for (const width of [360, 390]) {
      await phone.setViewportSize({ width, height: 800 });
      assert.ok((await horizontalOverflow(phone)) <= 0, `overflow at ${width} px`);
    }
    assertClean(assert, phone);
    await phone.close();
  });
  test('the board reports what it saw: commit→visible of a pushed version reaches the Status API metrics', async () => {
    const user = 'telemetry';
    const page = await openBoard(browser, boardUrl(stack, user));
    const reports = []; // every report this page sends from here on (the periodic one included)
    page.on('request', (r) => {
      if (r.url().endsWith('/api/telemetry/client') && r.method() === 'POST') reports.push(JSON.parse(r.postData()));
    });
    const metric = async () => {
      const text = await (await fetch(`${stack.api.url}/metrics`)).text();
      const counts = [...text.matchAll(/^taskcast_state_commit_to_visible_seconds_count\{transport="(\w+)"\} (\S+)$/gm)];
      return counts.reduce((sum, m) => sum + Number(m[2]), 0);
    };
    const before = await metric();
    const task = await stack.coordinator.createTask({ owner: user, title: 'Measured' });
    await page.waitForSelector(`[data-task-id="${task.id}"]`, { timeout: ms(30000) });
    await stack.coordinator.step(task, '01_prepare', 'STEP_STARTED', 'PREPARING');
    await page.waitForSelector(`[data-task-id="${task.id}"][data-version="2"]`, { timeout: ms(30000) });
    await page.evaluate(() => window.taskcast.feed.telemetry.flush());
    const sampled = () => reports.flatMap((r) => r.samples.commitToVisibleMs || []);
    await waitFor(() => sampled().length >= 2, { what: 'a report with both pushed versions' });
    assert.ok(reports.every((r) => r.v === 1 && r.transport === 'websocket'));
    assert.ok(sampled().every((ms) => ms >= 0 && ms < 60000));
    await waitFor(async () => (await metric()) >= before + sampled().length, { what: 'the metric' });
    assertClean(assert, page);
    await page.close();
  });
});
