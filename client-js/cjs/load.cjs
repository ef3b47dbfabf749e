'use strict';
// require() of one ES module entry, or a clear error where this Node cannot (see index.cjs).
const ESM_CODES = new Set(['ERR_REQUIRE_ESM', 'ERR_REQUIRE_ASYNC_MODULE']);

module.exports = function load(path, name) {
  try {
    return require(path);
  } catch (err) {
    if (!err || !ESM_CODES.has(err.code)) throw err;
    const e = new Error(
      `${name} is an ES module package and this Node cannot require() it (Node >= 20.19 or 22.12 can). ` +
        `Use \`import { TaskFeed } from '${name}'\`, or from CommonJS \`const { TaskFeed } = await import('${name}')\`.`,
      { cause: err },
    );
    e.code = 'ERR_TASKCAST_ESM_ONLY';
    throw e;
  }
};
