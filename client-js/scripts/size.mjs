// Byte budget of the built library (the size-limit idea): raw and gzip sizes of dist/taskcast.js.
import { readFileSync } from 'node:fs';
import { gzipSync } from 'node:zlib';

const BUDGET = { raw: 36 * 1024, gzip: 11 * 1024 };
const buf = readFileSync(new URL('../dist/taskcast.js', import.meta.url));
const sizes = { raw: buf.length, gzip: gzipSync(buf, { level: 9 }).length };
console.log(`dist/taskcast.js: ${sizes.raw} B raw (budget ${BUDGET.raw}), ${sizes.gzip} B gzip (budget ${BUDGET.gzip})`);
if (sizes.raw > BUDGET.raw || sizes.gzip > BUDGET.gzip) {
  console.error('over the byte budget');
  process.exit(1);
}
