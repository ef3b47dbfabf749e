// `@taskcast/client/bundle` in a checkout (`npm install /path/to/client-js`): the same API as the
// minified one-file build, from the sources, so it works before any `npm run build`. The packed
// tarball (scripts/pack.mjs) points `./bundle` at dist/taskcast.js instead.
export * from './src/index.js';
