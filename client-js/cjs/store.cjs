'use strict';
// CommonJS entry of @taskcast/client/store; see index.cjs.
module.exports = require('./load.cjs')('../src/store.js', '@taskcast/client/store');
