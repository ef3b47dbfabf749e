// Full-jitter exponential backoff ("Exponential Backoff and Jitter", AWS architecture blog; the
// same rule as centrifuge-js utils.ts): delay = random(0, min(max, min * 2^attempt)), never below
// `min` so a storm of clients never reconnects in a tight loop.

/**
 * @param {number} attempt 0 for the first retry
 * @param {number} minMs
 * @param {number} maxMs
 * @param {() => number} [random] injectable for tests, returns [0, 1)
 * @returns {number} milliseconds
 */
export function backoffMs(attempt, minMs, maxMs, random = Math.random) {
  const cap = Math.min(maxMs, minMs * 2 ** Math.min(attempt, 31));
  return Math.floor(Math.max(minMs, random() * cap));
}

/**
 * A delay in [base * (1 - spread), base * (1 + spread)]: used for the low-frequency batchGet check
 * (seed §13.2) so clients do not all poll at the same instant.
 * @param {number} baseMs
 * @param {number} spread 0..1
 * @param {() => number} [random]
 */
export function jittered(baseMs, spread, random = Math.random) {
  return Math.round(baseMs * (1 - spread + 2 * spread * random()));
}
