// Byte budget of the built library (the size-limit idea): raw and gzip sizes of dist/taskcast.js.
import { readFileSync } from 'node:fs';
import { gzipSync } from 'node:zlib';

// 36/11 KiB until issue 15; the snapshot retries, the public view, paging and the transport
// configuration checks added ~7 KB raw (~2 KB after mangling private members). 40/12 KiB until
// issue 16: the opt-in telemetry (src/telemetry.js) adds ~4.5 KB raw, ~1.5 KB gzip.
const BUDGET = { raw: 44 * 1024, gzip: 13.5 * 1024 };
const buf = readFileSync(new URL('../dist/taskcast.js', import.meta.url));
const sizes = { raw: buf.length, gzip: gzipSync(buf, { level: 9 }).length };
console.log(`dist/taskcast.js: ${sizes.raw} B raw (budget ${BUDGET.raw}), ${sizes.gzip} B gzip (budget ${BUDGET.gzip})`);
if (sizes.raw > BUDGET.raw || sizes.gzip > BUDGET.gzip) {
  console.error('over the byte budget');
  process.exit(1);
}
