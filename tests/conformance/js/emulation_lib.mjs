// Emulation transports for the conformance scripts: args.url is the array of transport
// endpoints ([{transport: 'sse' | 'http_stream', endpoint}]) and args.emulationEndpoint the
// absolute /emulation URL (possibly of ANOTHER node: the gateway routes the POSTs). Events are
// those of lib.mjs ("connected" carries the transport name).
import { EventSource } from 'eventsource';
import { args, newClient } from './lib.mjs';

export function newEmulationClient(options = {}) {
  if (!Array.isArray(args.url) || !/^https?:\/\//.test(args.emulationEndpoint || '')) {
    throw new Error('args.url must be a transport array and args.emulationEndpoint an absolute URL');
  }
  // No `fetch` option: Node 20's global fetch and ReadableStream serve http_stream and /emulation.
  return newClient({ eventsource: EventSource, emulationEndpoint: args.emulationEndpoint, ...options });
}
