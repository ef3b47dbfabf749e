'use strict';
// CommonJS entry of @taskcast/client (docs/client-js.md "CommonJS"). The package is ES modules;
// Node >= 20.19 / 22.12 loads them from require() (require(esm)), so this returns the very same
// module an `import` gets. Where Node cannot (older releases, --no-experimental-require-module),
// require() fails with ERR_TASKCAST_ESM_ONLY saying what to write instead — never a bare
// ERR_REQUIRE_ESM.
module.exports = require('./load.cjs')('../src/index.js', '@taskcast/client');
