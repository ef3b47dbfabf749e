// `npm pack` as part of the build: dist/taskcast-client-<version>.tgz, installable with
// `npm install <path>/client-js/dist/taskcast-client-<version>.tgz` (or `npm install <path>/client-js`).
// Checks what went in: the sources, both .d.ts entries and the bundle; never tests or the board.
import { execFileSync } from 'node:child_process';
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const REQUIRED = ['package.json', 'src/index.js', 'src/store.js', 'cjs/index.cjs', 'index.d.ts', 'store.d.ts', 'dist/taskcast.js'];

/**
 * The package as the tarball ships it, staged in a temporary directory: the checkout's files, with
 * `./bundle` pointing at the minified dist/taskcast.js (a checkout's `./bundle` is bundle.js, the
 * sources, so it works before a build).
 */
function stage() {
  const dir = mkdtempSync(join(tmpdir(), 'taskcast-stage-'));
  const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8'));
  pkg.exports['./bundle'] = { ...pkg.exports['./bundle'], import: './dist/taskcast.js' };
  pkg.files = pkg.files.filter((f) => f !== 'bundle.js');
  writeFileSync(join(dir, 'package.json'), `${JSON.stringify(pkg, null, 2)}\n`);
  for (const f of pkg.files) cpSync(join(ROOT, f), join(dir, f), { recursive: true });
  return dir;
}

/** @returns {{file: string, files: string[]}} the tarball's absolute path and its file list */
export function pack(dest = `${ROOT}dist`) {
  const dir = stage();
  try {
    const out = execFileSync('npm', ['pack', '--json', '--pack-destination', dest], { cwd: dir, encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] });
    const [info] = JSON.parse(out);
    const files = info.files.map((f) => f.path);
    const missing = REQUIRED.filter((f) => !files.includes(f));
    const stray = files.filter((f) => /^(test|board|scripts|node_modules)\//.test(f) || f.startsWith('dist/board') || f === 'bundle.js');
    if (missing.length || stray.length) {
      throw new Error(`npm pack: missing ${missing.join(', ') || '-'}; unexpected ${stray.join(', ') || '-'}`);
    }
    return { file: `${dest}/${info.filename}`, files };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const { file, files } = pack(process.argv[2]);
  console.log(`${file} (${files.length} files)`);
}
