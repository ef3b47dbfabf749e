// The client as a package: every `exports` entry's type declarations name exactly what the module
// exports at runtime (no declared-but-undefined TaskFeed on `./store`), and the packed tarball
// installs offline into a fresh project where both entries and the bundle work.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { cpSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8'));
// The `./bundle` entry is dist/taskcast.js: build it (without packing) before checking the entries.
execFileSync(process.execPath, ['scripts/build.mjs', '--no-pack'], { cwd: ROOT, stdio: 'inherit' });

/** Value (not type-only) names a .d.ts file exports: declarations and `export { ... } from` lists. */
function declaredValues(file, seen = new Set()) {
  const text = readFileSync(join(ROOT, file), 'utf8');
  const names = new Set();
  for (const m of text.matchAll(/^export declare (?:const|function|class) (\w+)/gm)) names.add(m[1]);
  for (const m of text.matchAll(/^export \{([^}]*)\} from '\.\/index\.js';/gm)) {
    for (const part of m[1].split(',')) {
      const name = part.trim();
      if (name && !name.startsWith('type ')) names.add(name);
    }
  }
  seen.add(file);
  return names;
}

describe('package entries', () => {
  for (const [entry, target] of Object.entries(pkg.exports)) {
    if (typeof target === 'string') continue;
    test(`${entry}: ${target.types} declares exactly the runtime exports of ${target.import}`, async () => {
      const runtime = Object.keys(await import(join(ROOT, target.import))).sort();
      const declared = [...declaredValues(target.types)].sort();
      assert.deepEqual(declared, runtime);
    });
  }
});

describe('CommonJS (docs/client-js.md "CommonJS")', () => {
  const require = createRequire(import.meta.url);
  for (const [entry, target] of Object.entries(pkg.exports)) {
    if (typeof target === 'string' || !target.require) continue;
    test(`${entry}: require() gives the module import() gives`, async () => {
      const viaImport = await import(join(ROOT, target.import));
      const viaRequire = require(join(ROOT, target.require));
      assert.deepEqual(Object.keys(viaRequire).sort(), Object.keys(viaImport).sort());
      const first = Object.keys(viaImport)[0];
      assert.equal(viaRequire[first], viaImport[first], 'one module instance');
    });
  }

  test('where Node cannot require() ES modules, a clear ERR_TASKCAST_ESM_ONLY', () => {
    const script = `try { require(${JSON.stringify(join(ROOT, 'cjs/index.cjs'))}); console.log('loaded'); } catch (e) { console.log(e.code + ' ' + e.message); }`;
    const out = execFileSync(process.execPath, ['--no-experimental-require-module', '-e', script], { encoding: 'utf8' });
    assert.match(out, /^ERR_TASKCAST_ESM_ONLY @taskcast\/client is an ES module package/);
    assert.match(out, /await import\('@taskcast\/client'\)/);
  });
});

function freshApp(type = 'module') {
  const app = mkdtempSync(join(tmpdir(), 'taskcast-app-'));
  writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'app', version: '1.0.0', type, private: true }));
  return app;
}

describe('a checkout install (npm install /path/to/client-js), before any build', () => {
  test('every entry works: ESM, CommonJS, the store and /bundle without dist/', { timeout: 120000 }, () => {
    // A fresh clone has no dist/ (git-ignored): copy the checkout's package files without it.
    const checkout = mkdtempSync(join(tmpdir(), 'taskcast-checkout-'));
    for (const f of ['package.json', 'src', 'cjs', 'bundle.js', 'index.d.ts', 'store.d.ts', 'README.md']) {
      cpSync(join(ROOT, f), join(checkout, f), { recursive: true });
    }
    const app = freshApp();
    execFileSync('npm', ['install', '--offline', '--no-audit', '--no-fund', '--loglevel=error', checkout], { cwd: app, stdio: 'inherit' });
    writeFileSync(
      join(app, 'check.mjs'),
      `
      import { TaskFeed } from '@taskcast/client';
      import * as bundle from '@taskcast/client/bundle';
      import { reduce } from '@taskcast/client/store';
      import { createRequire } from 'node:module';
      const cjs = createRequire(import.meta.url)('@taskcast/client');
      if (bundle.TaskFeed !== TaskFeed || cjs.TaskFeed !== TaskFeed || typeof reduce !== 'function') throw new Error('entries');
      console.log('ok');
      `,
    );
    assert.equal(execFileSync(process.execPath, ['check.mjs'], { cwd: app, encoding: 'utf8' }).trim(), 'ok');
  });
});

describe('npm pack', () => {
  test('the tarball installs offline and both entries work (sources and the bundle)', { timeout: 120000 }, async () => {
    const { pack } = await import('../scripts/pack.mjs');
    const dest = mkdtempSync(join(tmpdir(), 'taskcast-pack-'));
    const { file, files } = pack(dest);
    assert.ok(files.includes('store.d.ts') && files.includes('dist/taskcast.js'));
    const app = freshApp();
    execFileSync('npm', ['install', '--offline', '--no-audit', '--no-fund', '--loglevel=error', file], { cwd: app, stdio: 'inherit' });
    // A feed from the installed package's bundle (private members mangled) against the fakes.
    const support = new URL('./support/fake.js', import.meta.url).href;
    writeFileSync(
      join(app, 'check.mjs'),
      `
      import { TaskFeed, Client } from '@taskcast/client';
      import * as store from '@taskcast/client/store';
      import * as bundle from '@taskcast/client/bundle';
      import { fakeGateway, fakeStatusApi, feedOptions, until } from ${JSON.stringify(support)};
      if (typeof TaskFeed !== 'function' || typeof Client !== 'function') throw new Error('main entry');
      if ('TaskFeed' in store || typeof store.reduce !== 'function') throw new Error('store entry');
      const api = fakeStatusApi();
      api.set('a', 3, 9);
      const feed = new bundle.TaskFeed(feedOptions(api, fakeGateway()));
      await feed.start();
      await until(() => feed.getSnapshot().connection === 'LIVE' && feed.state.tasks.a, 'LIVE from the bundle');
      feed.stop();
      console.log('ok');
      `,
    );
    assert.equal(execFileSync(process.execPath, ['check.mjs'], { cwd: app, encoding: 'utf8' }).trim(), 'ok');
    // CommonJS from the tarball: require() works where Node can (this one can)
    writeFileSync(join(app, 'check.cjs'), "const { TaskFeed } = require('@taskcast/client'); console.log(typeof TaskFeed);");
    assert.equal(execFileSync(process.execPath, ['check.cjs'], { cwd: app, encoding: 'utf8' }).trim(), 'function');
  });
});
