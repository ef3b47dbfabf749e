// Real processes for the integration and browser tests: a gateway (`taskcast gateway`), the Status
// API (`taskcast status-api`, SQLite file DB, dev user auth) and the outbox relay
// (`taskcast relay run`). Readiness is awaited by polling health endpoints; nothing
// sleeps to synchronise. Python comes from $TASKCAST_PYTHON, else the repo's .venv, else python3.
import { spawn } from 'node:child_process';
import { createHmac, randomUUID } from 'node:crypto';
import { existsSync, mkdtempSync, openSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

export const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../../..');
export const PYTHON =
  process.env.TASKCAST_PYTHON || (existsSync(join(ROOT, '.venv/bin/python')) ? join(ROOT, '.venv/bin/python') : 'python3');

export const GATEWAY_SECRET = 'client-js-gateway-secret-0123456789abcdef';
export const SERVICE_SECRET = 'client-js-service-secret-0123456789abcdef';
const EXEC_SECRET = 'client-js-exec-secret-0123456789abcdefghij';
const API_KEY = 'client-js-api-key';

export async function freePort() {
  return new Promise((ok, fail) => {
    const srv = createServer();
    srv.unref();
    srv.on('error', fail);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => ok(port));
    });
  });
}

const timeScale = Number(process.env.TASKCAST_TEST_TIME_SCALE) > 0 ? Number(process.env.TASKCAST_TEST_TIME_SCALE) : 1;

/**
 * A wait bound in ms, scaled by TASKCAST_TEST_TIME_SCALE (default 1) like the Python suites'
 * tests/support/waiting.py: every bound in these tests goes through it. Bounds are generous on
 * purpose (a condition that holds returns at once; only a failing wait pays the whole bound).
 */
export function ms(n) {
  return Math.round(n * timeScale);
}

/** Poll `check` until it returns a truthy value (interval of a readiness loop, not a sync sleep). */
export async function waitFor(check, { timeoutMs = 30000, what = 'condition', intervalMs = 50 } = {}) {
  const deadline = Date.now() + ms(timeoutMs);
  let last;
  while (Date.now() < deadline) {
    try {
      const v = await check();
      if (v) return v;
    } catch (err) {
      last = err;
    }
    await new Promise((r) => setTimeout(r, intervalMs));
  }
  throw new Error(`timed out waiting for ${what}${last ? `: ${last}` : ''}`);
}

async function httpOk(url) {
  const res = await fetch(url, { signal: AbortSignal.timeout(ms(2000)) });
  return res.ok;
}

class Proc {
  constructor(name, args, logPath) {
    this.name = name;
    this.args = args;
    this.logPath = logPath;
    this.child = null;
  }

  start() {
    const fd = openSync(this.logPath, 'a');
    this.child = spawn(PYTHON, this.args, { cwd: ROOT, stdio: ['ignore', fd, fd], env: { ...process.env } });
    this.exited = new Promise((r) => this.child.once('exit', (code) => r(code)));
    return this;
  }

  log() {
    try {
      return readFileSync(this.logPath, 'utf8');
    } catch {
      return '';
    }
  }

  async stop() {
    if (!this.child || this.child.exitCode !== null) return;
    this.child.kill('SIGTERM');
    const timer = setTimeout(() => this.child.kill('SIGKILL'), ms(10000));
    await this.exited;
    clearTimeout(timer);
  }
}

/**
 * Wait until `check()` holds for the process `proc` just started; if it never does, stop `proc`
 * and throw with its log (a child left running keeps node's test runner alive: the suite would
 * hang instead of failing).
 */
async function whenReady(proc, check, what) {
  let waiting = true;
  const exited = proc.exited.then((code) => {
    if (waiting) throw new Error(`${what}: the process exited (${code}) before it was ready`);
  });
  try {
    await Promise.race([waitFor(check, { what }), exited]);
    waiting = false;
  } catch (err) {
    waiting = false;
    await proc.stop();
    throw new Error(`${err.message}\n${proc.log()}`);
  }
}

export function gatewayConfig(port, { websocketDisabled = false } = {}) {
  const history = { history_size: 100, history_ttl: '300s', force_recovery: true };
  return {
    http_server: { address: '127.0.0.1', port },
    health: { enabled: true },
    http_api: { key: API_KEY },
    engine: { type: 'memory' },
    client: { token: { hmac_secret_key: GATEWAY_SECRET }, allowed_origins: ['*'] },
    websocket: { disabled: websocketDisabled },
    sse: { enabled: true },
    http_stream: { enabled: true },
    channel: {
      namespaces: [
        { name: 'task_user', ...history },
        { name: 'task_detail', ...history, subscription_limit_per_connection: 20 },
        { name: 'task_project', ...history },
      ],
    },
  };
}

export class Gateway {
  constructor(dir, options = {}) {
    this.dir = dir;
    this.options = options;
  }

  async start() {
    this.port ??= await freePort();
    this.url = `http://127.0.0.1:${this.port}`;
    this.wsUrl = `ws://127.0.0.1:${this.port}/connection/websocket`;
    this.apiKey = API_KEY;
    const cfg = join(this.dir, `gateway-${this.port}.json`);
    writeFileSync(cfg, JSON.stringify(gatewayConfig(this.port, this.options)));
    this.proc = new Proc('gateway', ['-m', 'taskcast', 'gateway', '--config', cfg], join(this.dir, `gateway-${this.port}.log`)).start();
    await whenReady(this.proc, () => httpOk(`${this.url}/health`), 'gateway health');
    return this;
  }

  /** Stop and start again on the same port: the memory engine loses history (new epochs). */
  async restart() {
    await this.proc.stop();
    return this.start();
  }

  async publish(channel, data) {
    const res = await fetch(`${this.url}/api/publish`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', 'X-API-Key': API_KEY },
      body: JSON.stringify({ channel, data }),
    });
    return res.json();
  }

  stop() {
    return this.proc?.stop();
  }
}

/**
 * `taskcast up` (everything in one process, as a newcomer runs it with `make up`) on free ports,
 * without the demo; `args` are passed through (e.g. `--allowed-origin URL`). `coordinator` signs
 * with the service secret `taskcast up` generated into its data dir.
 */
export class TaskcastUp {
  constructor(dir, args = []) {
    this.dir = dir;
    this.args = args;
  }

  async start() {
    const [pg, pa] = [await freePort(), await freePort()];
    this.gatewayUrl = `http://127.0.0.1:${pg}`;
    this.wsUrl = `ws://127.0.0.1:${pg}/connection/websocket`;
    this.apiUrl = `http://127.0.0.1:${pa}`;
    const argv = ['-m', 'taskcast', 'up', '--port-gateway', String(pg), '--port-api', String(pa), '--no-demo'];
    argv.push('--data-dir', join(this.dir, 'var'), ...this.args);
    this.proc = new Proc('taskcast-up', argv, join(this.dir, 'up.log')).start();
    await whenReady(
      this.proc,
      async () => (await httpOk(`${this.gatewayUrl}/health`)) && (await httpOk(`${this.apiUrl}/healthz`)) && this.proc.log().includes('Task board:'),
      'taskcast up',
    );
    const keys = JSON.parse(readFileSync(join(this.dir, 'var', 'secrets.json'), 'utf8'));
    this.coordinator = new Coordinator(this.apiUrl, keys.service_jwt_secret);
    return this;
  }

  stop() {
    return this.proc?.stop();
  }
}

export class StatusApiProcess {
  constructor(dir, options = {}) {
    this.dir = dir;
    this.options = options;
  }

  async start() {
    this.port ??= await freePort(); // kept across stop()/start(): the board is served from this origin
    this.url = `http://127.0.0.1:${this.port}`;
    this.dbUrl = `sqlite+aiosqlite:///${join(this.dir, 'status.db')}`;
    const cfg = join(this.dir, 'status-api.json');
    writeFileSync(
      cfg,
      JSON.stringify({
        database: { url: this.dbUrl },
        http: { host: '127.0.0.1', port: this.port, log_level: 'warning' },
        internal_auth: { mode: 'jwt', jwt_secret: SERVICE_SECRET, rate_per_second: 0 },
        execution_token: { secret: EXEC_SECRET },
        user_auth: this.options.user_auth || { mode: 'dev' },
        realtime: { secret: GATEWAY_SECRET, ...(this.options.realtime || {}) },
        reconciler: { enabled: false },
        ...(this.options.board ? { board: this.options.board } : {}),
      }),
    );
    const init = new Proc('init-db', ['-m', 'taskcast', 'status-api', 'init-db', '--config', cfg], join(this.dir, 'init-db.log')).start();
    const code = await init.exited;
    if (code !== 0) throw new Error(`init-db failed:\n${init.log()}`);
    this.proc = new Proc('status-api', ['-m', 'taskcast', 'status-api', 'serve', '--config', cfg], join(this.dir, 'status-api.log')).start();
    await whenReady(this.proc, () => httpOk(`${this.url}/readyz`), 'status api');
    return this;
  }

  stop() {
    return this.proc?.stop();
  }
}

/** The real outbox relay (`taskcast relay run`) between the Status API's database and the gateway. */
export class Relay {
  constructor(dir, dbUrl, gateway) {
    const cfg = join(dir, `relay-${randomUUID().slice(0, 8)}.json`);
    writeFileSync(
      cfg,
      JSON.stringify({
        database_url: dbUrl,
        gateway_api_url: `${gateway.url}/api`,
        gateway_api_key: gateway.apiKey,
        relay_id: 'client-js-tests',
        poll_interval_seconds: 0.05,
        backoff_base_seconds: 0.05,
        backoff_max_seconds: 0.5,
        shutdown_timeout_seconds: 2,
      }),
    );
    this.proc = new Proc('relay', ['-m', 'taskcast', 'relay', 'run', '--config', cfg], join(dir, 'relay.log'));
  }

  start() {
    this.proc.start();
    return this;
  }

  stop() {
    return this.proc.stop();
  }
}

/** Gateway + Status API + relay in a fresh temp dir. */
export async function startStack(options = {}) {
  const dir = mkdtempSync(join(tmpdir(), 'taskcast-client-js-'));
  // The gateway's port is known before either starts: the Status API serves it to the board
  // (board.gateway_url), so a board URL needs no gateway parameter.
  const gw = new Gateway(dir, options.gateway);
  gw.port = await freePort();
  const statusApi = { board: { gateway_url: `http://127.0.0.1:${gw.port}` }, ...(options.statusApi || {}) };
  const [gwStarted, apiStarted] = await Promise.allSettled([gw.start(), new StatusApiProcess(dir, statusApi).start()]);
  if (gwStarted.status === 'rejected' || apiStarted.status === 'rejected') {
    await Promise.all([gwStarted, apiStarted].map((r) => (r.status === 'fulfilled' ? r.value.stop() : null)));
    throw gwStarted.status === 'rejected' ? gwStarted.reason : apiStarted.reason;
  }
  const [gateway, api] = [gwStarted.value, apiStarted.value];
  const relay = new Relay(dir, api.dbUrl, gateway).start();
  return {
    dir,
    gateway,
    api,
    relay,
    coordinator: new Coordinator(api.url),
    async stop() {
      await Promise.all([this.relay.stop(), this.gateway.stop(), this.api.stop()]);
    },
  };
}

// --- JWT + the coordinator/worker side of the Status API ---------------------------------------

const b64url = (buf) => Buffer.from(buf).toString('base64url');

export function hs256(payload, secret) {
  const head = b64url(JSON.stringify({ alg: 'HS256', typ: 'JWT' }));
  const body = b64url(JSON.stringify(payload));
  const sig = createHmac('sha256', secret).update(`${head}.${body}`).digest('base64url');
  return `${head}.${body}.${sig}`;
}

export const devUser = (tenant, user) => ({ 'X-Taskcast-Dev-User': `${tenant}/${user}` });

export const DOCUMENT_STEPS = [
  { stepId: '01_prepare', operationCode: 'FILE.PREPARE', producerId: 'file-worker' },
  { stepId: '02_parse', operationCode: 'DOCUMENT.PARSE', producerId: 'document-parser' },
  { stepId: '03_store', operationCode: 'RESULT.PERSIST', producerId: 'result-service' },
];

export class Coordinator {
  constructor(baseUrl, secret = SERVICE_SECRET) {
    this.baseUrl = baseUrl;
    this.token = hs256({ sub: 'task-coordinator', roles: ['coordinator'], exp: Math.floor(Date.now() / 1000) + 3600 }, secret);
  }

  async post(path, body, token, extraHeaders = {}) {
    const res = await fetch(this.baseUrl + path, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${token}`, ...extraHeaders },
      body: JSON.stringify(body),
    });
    const data = await res.json();
    if (!res.ok) throw new Error(`${path} ${res.status}: ${JSON.stringify(data)}`);
    return data;
  }

  async createTask({ tenant = 't1', owner = 'u1', title = 'Contract parsing', steps = DOCUMENT_STEPS, project } = {}) {
    const body = {
      tenantId: tenant,
      ownerId: owner,
      product: 'DOCUMENT',
      taskType: 'DOCUMENT_PROCESS',
      title,
      statusDefinitionVersion: 1,
      operationDefinitionVersion: 1,
      steps,
    };
    if (project) body.projectId = project;
    const out = await this.post('/internal/v1/tasks', body, this.token);
    return { id: out.taskId, steps: Object.fromEntries(out.steps.map((s) => [s.stepId, { ctx: s, seq: 0 }])), seq: 0 };
  }

  /** A step event reported with that step's executionToken. */
  async step(task, stepId, eventType, businessStatus, extra = {}) {
    const st = task.steps[stepId];
    st.seq += 1;
    const eventId = `evt-${randomUUID()}`;
    const body = {
      eventId,
      taskId: task.id,
      taskType: 'DOCUMENT_PROCESS',
      taskAttempt: st.ctx.taskAttempt,
      stepId,
      operationCode: st.ctx.operationCode,
      stepAttempt: st.ctx.stepAttempt,
      producerId: st.ctx.producerId,
      sourceSeq: st.seq,
      eventType,
      occurredAt: new Date().toISOString(),
      ...extra,
    };
    if (businessStatus) body.businessStatus = businessStatus;
    return this.post('/internal/v1/task-events', body, st.ctx.executionToken, { 'Idempotency-Key': eventId });
  }

  /** TASK_COMPLETED / TASK_FAILED / TASK_CANCELLED from the coordinator. */
  async finish(task, eventType, businessStatus, extra = {}) {
    task.seq += 1;
    const eventId = `evt-${randomUUID()}`;
    const body = {
      eventId,
      taskId: task.id,
      taskAttempt: 1,
      producerId: 'task-coordinator',
      sourceSeq: task.seq,
      eventType,
      businessStatus,
      occurredAt: new Date().toISOString(),
      ...extra,
    };
    return this.post('/internal/v1/task-events', body, this.token, { 'Idempotency-Key': eventId });
  }

  /** Task retry (POST /internal/v1/tasks/{id}/attempts): every step gets the new attempt's context. */
  async retryTask(task) {
    const out = await this.post(`/internal/v1/tasks/${task.id}/attempts`, {}, this.token);
    task.steps = Object.fromEntries(out.steps.map((s) => [s.stepId, { ctx: s, seq: 0 }]));
    return out;
  }

  /** Walk a document task to SUCCEEDED with the given coordinator-measured duration. */
  async walkToSuccess(task, durationMs = 42600) {
    await this.step(task, '01_prepare', 'STEP_STARTED', 'PREPARING');
    await this.step(task, '01_prepare', 'STEP_COMPLETED', 'PREPARED', {
      durationMs: 3100,
      data: { schema: 'file.prepare.completed.v1', value: { fileName: 'contract.pdf', sizeBytes: 482113 } },
    });
    await this.step(task, '02_parse', 'STEP_STARTED', 'PARSING');
    await this.step(task, '02_parse', 'STEP_PROGRESS', 'PARSING', {
      progress: { current: 18, total: 36, unit: 'page' },
      data: { schema: 'document.parse.progress.v1', value: { currentPage: 18, totalPages: 36 } },
    });
    await this.step(task, '02_parse', 'STEP_COMPLETED', 'PARSE_COMPLETED', {
      durationMs: 18000,
      data: { schema: 'document.parse.completed.v2', value: { pageCount: 36, language: 'en', resultRef: 'result://doc/1' } },
    });
    await this.step(task, '03_store', 'STEP_STARTED', 'PERSISTING');
    await this.step(task, '03_store', 'STEP_COMPLETED', 'PERSISTED', { durationMs: 900 });
    return this.finish(task, 'TASK_COMPLETED', 'COMPLETED', { durationMs });
  }
}

export { randomUUID };
