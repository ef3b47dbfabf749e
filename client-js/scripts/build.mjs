// dist/taskcast.js: the library as one minified ESM file; dist/board.js: the demo task board.
import { build } from 'esbuild';

const common = { bundle: true, format: 'esm', target: 'es2020', platform: 'browser', minify: true, legalComments: 'none', logLevel: 'warning' };
await build({ ...common, entryPoints: ['src/index.js'], outfile: 'dist/taskcast.js', sourcemap: true });
await build({ ...common, entryPoints: ['board/board.js'], outfile: 'dist/board.js', sourcemap: true });
