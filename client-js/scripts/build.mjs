// dist/taskcast.js: the library as one minified ESM file; dist/board.js: the demo task board;
// dist/taskcast-client-<version>.tgz: the npm package (scripts/pack.mjs).
import { build } from 'esbuild';

import { pack } from './pack.mjs';

const common = { bundle: true, format: 'esm', target: 'es2020', platform: 'browser', minify: true, legalComments: 'none', logLevel: 'warning' };
// The library bundle also shortens `_private` members (never part of the API; the board bundle
// keeps them: its browser tests reach into the feed).
await build({ ...common, entryPoints: ['src/index.js'], outfile: 'dist/taskcast.js', sourcemap: true, mangleProps: /^_/ });
await build({ ...common, entryPoints: ['board/board.js'], outfile: 'dist/board.js', sourcemap: true });
if (!process.argv.includes('--no-pack')) console.log(`package: ${pack().file}`);
