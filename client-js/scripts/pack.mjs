// `npm pack` as part of the build: dist/taskcast-client-<version>.tgz, installable with
// `npm install <path>/client-js/dist/taskcast-client-<version>.tgz` (or `npm install <path>/client-js`).
// Checks what went in: the sources, both .d.ts entries and the bundle; never tests or the board.
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const REQUIRED = ['package.json', 'src/index.js', 'src/store.js', 'index.d.ts', 'store.d.ts', 'dist/taskcast.js'];

/** @returns {{file: string, files: string[]}} the tarball's absolute path and its file list */
export function pack(dest = `${ROOT}dist`) {
  const out = execFileSync('npm', ['pack', '--json', '--pack-destination', dest], { cwd: ROOT, encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] });
  const [info] = JSON.parse(out);
  const files = info.files.map((f) => f.path);
  const missing = REQUIRED.filter((f) => !files.includes(f));
  const stray = files.filter((f) => /^(test|board|scripts|node_modules)\//.test(f) || f.startsWith('dist/board'));
  if (missing.length || stray.length) {
    throw new Error(`npm pack: missing ${missing.join(', ') || '-'}; unexpected ${stray.join(', ') || '-'}`);
  }
  return { file: `${dest}/${info.filename}`, files };
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const { file, files } = pack(process.argv[2]);
  console.log(`${file} (${files.length} files)`);
}
