// Codes of the Centrifugo client protocol v2 (PROTOCOL.md §2), unchanged, plus the client-side
// codes the state events carry. Imports nothing.

/** Disconnect codes sent by the server (PROTOCOL.md §2.3). */
export const DisconnectCode = Object.freeze({
  CONNECTION_CLOSED: 3000,
  SHUTDOWN: 3001,
  INTERNAL: 3004,
  EXPIRED: 3005,
  SUBSCRIPTION_EXPIRED: 3006,
  SLOW: 3008,
  WRITE_ERROR: 3009,
  INSUFFICIENT_STATE: 3010,
  FORCE_RECONNECT: 3011,
  NO_PONG: 3012,
  TOO_MANY_REQUESTS: 3013,
  STATE_INVALIDATED: 3014,
  INVALID_TOKEN: 3500,
  BAD_REQUEST: 3501,
  STALE: 3502,
  FORCE_DISCONNECT: 3503,
  CONNECTION_LIMIT: 3504,
  CHANNEL_LIMIT: 3505,
  INAPPROPRIATE_PROTOCOL: 3506,
  PERMISSION_DENIED: 3507,
  NOT_AVAILABLE: 3508,
  TOO_MANY_ERRORS: 3509,
});

/** Error codes of replies (PROTOCOL.md §2.1). */
export const ErrorCode = Object.freeze({
  INTERNAL: 100,
  UNAUTHORIZED: 101,
  UNKNOWN_CHANNEL: 102,
  PERMISSION_DENIED: 103,
  METHOD_NOT_FOUND: 104,
  ALREADY_SUBSCRIBED: 105,
  LIMIT_EXCEEDED: 106,
  BAD_REQUEST: 107,
  NOT_AVAILABLE: 108,
  TOKEN_EXPIRED: 109,
  EXPIRED: 110,
  TOO_MANY_REQUESTS: 111,
  UNRECOVERABLE_POSITION: 112,
});

/** Unsubscribe push codes (PROTOCOL.md §2.2): >= 2500 means resubscribe. */
export const UnsubscribeCode = Object.freeze({
  SERVER: 2000,
  INSUFFICIENT_STATE: 2500,
  EXPIRED: 2501,
  STATE_INVALIDATED: 2502,
});

/** Client-side codes carried by `connecting` / `disconnected` events (never on the wire). */
export const ClientCode = Object.freeze({
  CONNECT_CALLED: 0,
  TRANSPORT_CLOSED: 1,
  NO_PING: 2,
  SUBSCRIBE_TIMEOUT: 3,
  DISCONNECT_CALLED: 0,
  UNAUTHORIZED: 1,
  BAD_PROTOCOL: 2,
  MESSAGE_SIZE_LIMIT: 3,
  /** disconnected: no endpoint has a transport implementation (never retried) */
  CONFIGURATION: 4,
});

/**
 * True when a server disconnect code forbids reconnecting: 3500–3999 and 4500–4999
 * (PROTOCOL.md §2.3). Codes below 3000 are transport-level closes and reconnect, except 1009
 * (message too big), which the SDKs treat as terminal.
 * @param {number} code
 */
export function isTerminalDisconnect(code) {
  if (code === 1009) return true;
  return (code >= 3500 && code < 4000) || (code >= 4500 && code < 5000);
}

/**
 * True when a reply error should be retried (PROTOCOL.md §2.1: code < 100, temporary, or 109).
 * @param {{code:number, temporary?:boolean}} error
 */
export function isTemporaryError(error) {
  return error.code < 100 || error.temporary === true || error.code === ErrorCode.TOKEN_EXPIRED;
}
