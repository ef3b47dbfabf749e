// The examples of docs/client-js.md run as written against real processes (a gateway, the Status
// API with signed user tokens, the relay): every code block marked `<!-- example: NAME -->` is
// extracted, its example hosts are pointed at the real services, the inputs the prose calls
// "yours" (idToken, taskId, API_URL, …) are provided, and a check after the block waits for
// what the example promises (connected, LIVE, a rendered task, a publication) — then stops it.
// Blocks run as ES modules inside this package, so `@taskcast/client` resolves to it by name.
import assert from 'node:assert/strict';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath, pathToFileURL } from 'node:url';

import { transform } from 'esbuild';
import { EventSource } from 'eventsource';
import WebSocket from 'ws';

import { hs256, ms, startStack, waitFor } from './support/services.js';

const PKG = fileURLToPath(new URL('..', import.meta.url));
const DOC = join(PKG, '..', 'docs', 'client-js.md');
const RUN_DIR = join(PKG, '.docs-examples');
const USER_SECRET = 'client-js-docs-user-secret-0123456789abcdef';
const TENANT = 't1';
const USER = 'u-docs';

/** `{name: {lang, code}}` of the blocks marked `<!-- example: name ... -->` right before them. */
export function examples(markdown) {
  const out = {};
  for (const m of markdown.matchAll(/<!-- example: ([\w-]+)[^>]*-->\n```(\w+)\n([\s\S]*?)\n```/g)) {
    out[m[1]] = { lang: m[2], code: m[3] };
  }
  return out;
}

let stack;
let env;

before(async () => {
  stack = await startStack({ statusApi: { user_auth: { mode: 'hs', secret: USER_SECRET } } });
  const task = await stack.coordinator.createTask({ tenant: TENANT, owner: USER, title: 'Docs example task' });
  const gw = new URL(stack.gateway.url);
  env = {
    idToken: hs256({ sub: USER, tenant: TENANT, exp: Math.floor(Date.now() / 1000) + 3600 }, USER_SECRET),
    tenant: TENANT,
    taskId: task.id,
    task,
    title: 'Docs example task',
    API_URL: stack.api.url,
    WS_URL: `ws://${gw.host}/connection/websocket`,
    SSE_URL: `${stack.gateway.url}/connection/sse`,
    EMULATION_URL: `${stack.gateway.url}/emulation`,
    rendered: [],
    render(state) {
      env.rendered.push(state);
    },
    renderElapsed() {},
    until: (check, what) => waitFor(check, { timeoutMs: 30000, what }),
    coordinator: stack.coordinator,
  };
  env.getToken = () => env.idToken;
  mkdirSync(RUN_DIR, { recursive: true });
});

after(async () => {
  await stack?.stop();
  rmSync(RUN_DIR, { recursive: true, force: true });
});

/** The block as a module: its imports at the top, its body in `run(env)` followed by `check`. */
async function load(name, check) {
  const block = examples(readFileSync(DOC, 'utf8'))[name];
  assert.ok(block, `docs/client-js.md has an example marked ${name}`);
  const gw = new URL(stack.gateway.url);
  const code = block.code
    .replaceAll('https://status.example.com', stack.api.url)
    .replaceAll('wss://rt.example.com', `ws://${gw.host}`)
    .replaceAll('https://rt.example.com', stack.gateway.url);
  const lines = code.split('\n');
  const imports = lines.filter((l) => l.startsWith('import '));
  // Inside run(env) a top-level `export function` of the block is a plain local function.
  const body = lines.filter((l) => !l.startsWith('import ')).map((l) => l.replace(/^export (?=(async )?function|const|class)/, ''));
  const names = Object.keys(env).join(', ');
  let source = `${imports.join('\n')}\nexport async function run(env) {\n  const { ${names} } = env;\n${body.join('\n')}\n${check}\n}\n`;
  if (block.lang === 'jsx') {
    source = (await transform(source, { loader: 'jsx', jsx: 'automatic', format: 'esm' })).code;
  }
  const file = join(RUN_DIR, `${name}.mjs`);
  writeFileSync(file, source);
  return import(pathToFileURL(file).href);
}

describe('docs/client-js.md examples run as written', () => {
  test('Client: connects, subscribes to a task detail and receives its publication', { timeout: ms(60000) }, async () => {
    const mod = await load(
      'client',
      `
      await env.until(() => client.state === 'connected' && sub.state === 'subscribed', 'connected and subscribed');
      const got = new Promise((resolve) => sub.on('publication', ({ data }) => resolve(data)));
      await env.coordinator.step(env.task, '01_prepare', 'STEP_STARTED', 'PREPARING');
      const data = await got;
      client.disconnect();
      return data;
      `,
    );
    const data = await mod.run(env);
    assert.equal(data.kind, 'task.detail');
    assert.equal(data.taskId, env.taskId);
  });

  test('TaskFeed: LIVE with the list and the opened detail', { timeout: ms(60000) }, async () => {
    const mod = await load(
      'taskfeed',
      `
      await env.until(() => feed.state.connection === 'LIVE' && feed.state.tasks[taskId], 'LIVE with the task');
      await env.until(() => feed.state.details[taskId]?.phase === 'ready', 'the opened detail');
      const state = feed.getSnapshot();
      unsubscribe();
      feed.stop();
      return state;
      `,
    );
    // The example logs the feed's errors: none may be a ConfigurationError (every listed transport
    // has its implementation, e.g. the SSE fallback's EventSource in Node).
    const warned = [];
    const warn = console.warn;
    console.warn = (...args) => warned.push(args);
    let state;
    try {
      state = await mod.run(env);
    } finally {
      console.warn = warn;
    }
    assert.deepEqual(warned.filter(([e]) => e?.name === 'ConfigurationError' || e?.code === 'NO_TRANSPORT').map(([e]) => e.message), []);
    assert.equal(state.tasks[env.taskId].title, env.title);
    assert.equal(state.details[env.taskId].detail.taskId, env.taskId);
  });

  test('React: the hooks render the task list live (React 18, react-test-renderer)', { timeout: ms(60000) }, async () => {
    // A browser has WebSocket; Node 20 does not (the example passes none, as a browser app would).
    const saved = globalThis.WebSocket;
    globalThis.WebSocket = WebSocket;
    try {
      const mod = await load(
        'react',
        `
        const { create, act } = (await import('react-test-renderer')).default;
        let root;
        await act(async () => {
          root = create(<Tasks />);
        });
        const text = () => JSON.stringify(root.toJSON());
        await env.until(() => text().includes(env.title), 'the task rendered');
        const shown = text();
        await act(async () => root.unmount());
        return { shown, running: feed.running };
        `,
      );
      const { shown, running } = await mod.run(env);
      assert.match(shown, /Docs example task/);
      assert.equal(running, false, 'unmount stopped the feed');
    } finally {
      globalThis.WebSocket = saved;
    }
  });

  test('centrifuge-js wiring: list snapshot and a detail through the reducer', { timeout: ms(60000) }, async () => {
    const saved = [globalThis.WebSocket, globalThis.EventSource];
    globalThis.WebSocket = WebSocket;
    globalThis.EventSource = EventSource;
    try {
      const mod = await load(
        'centrifuge',
        `
        await env.until(() => state.tasks[taskId], 'the list snapshot');
        openDetail(taskId);
        await env.until(() => state.details[taskId]?.detail, 'the detail snapshot');
        centrifuge.disconnect();
        return state;
        `,
      );
      const state = await mod.run(env);
      assert.equal(state.details[env.taskId].detail.taskId, env.taskId);
      assert.ok(env.rendered.length > 0, 'render(state) was called');
    } finally {
      [globalThis.WebSocket, globalThis.EventSource] = saved;
    }
  });

  test('StatusApi.broadcastToken: tenant and system channels named by the server', async () => {
    const { StatusApi } = await import('../src/index.js');
    const api = new StatusApi({ baseUrl: stack.api.url, headers: () => ({ Authorization: `Bearer ${env.idToken}` }) });
    assert.equal((await api.broadcastToken('tenant')).channel, `task_tenant:${TENANT}`);
    assert.equal((await api.broadcastToken('system')).channel, 'task_system:public');
    await assert.rejects(api.broadcastToken('project', 'p-not-mine'), (err) => err.status === 403 && err.code === 'NOT_A_PROJECT_MEMBER');
  });

  test('the Vite reverse-proxy config points at the Status API and the gateway', async () => {
    const block = examples(readFileSync(DOC, 'utf8')).vite;
    const file = join(RUN_DIR, 'vite.config.mjs');
    writeFileSync(file, block.code);
    const { default: config } = await import(pathToFileURL(file).href);
    const proxy = config.server.proxy;
    assert.equal(proxy['/api'], 'http://127.0.0.1:8100');
    assert.deepEqual(proxy['/connection'], { target: 'ws://127.0.0.1:8000', ws: true });
  });
});
