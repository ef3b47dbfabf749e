// WebSocket transport (PROTOCOL.md §4.1): text frames holding newline-joined JSON replies.
// An adapter only: it knows nothing about commands, ids or subscriptions (STYLE.md "transports
// are adapters"). The WebSocket constructor is injected so the code runs under Node 20 with `ws`.

/**
 * @typedef {object} TransportHandlers
 * @property {() => void} onOpen
 * @property {(line: string) => void} onMessage one encoded reply per call
 * @property {(ev: {code: number, reason: string, opened: boolean}) => void} onClose
 */

export class WebSocketTransport {
  /**
   * @param {string} endpoint ws:// or wss:// URL
   * @param {any} WebSocketImpl
   */
  constructor(endpoint, WebSocketImpl) {
    if (!WebSocketImpl) throw new Error('taskcast: no WebSocket implementation (pass options.websocket)');
    this.name = 'websocket';
    this.emulation = false;
    this.endpoint = endpoint;
    this.WebSocket = WebSocketImpl;
    this.ws = null;
    this.opened = false;
    this.closed = false;
  }

  /**
   * @param {TransportHandlers} handlers
   * @param {string} _connectFrame unused: WebSocket sends connect after open
   */
  open(handlers, _connectFrame) {
    const ws = new this.WebSocket(this.endpoint);
    this.ws = ws;
    ws.onopen = () => {
      this.opened = true;
      handlers.onOpen();
    };
    ws.onmessage = (ev) => {
      const text = typeof ev.data === 'string' ? ev.data : String(ev.data);
      for (const line of text.trim().split('\n')) {
        if (line) handlers.onMessage(line);
      }
    };
    ws.onerror = () => {};
    ws.onclose = (ev) => {
      if (this.closed) return;
      this.closed = true;
      handlers.onClose({ code: ev.code || 1006, reason: ev.reason || '', opened: this.opened });
    };
  }

  /** @param {string} frame newline-joined commands */
  send(frame) {
    if (this.ws && this.ws.readyState === 1) this.ws.send(frame);
  }

  /** Close without reporting back (the client already knows why). */
  close() {
    this.closed = true;
    if (!this.ws) return;
    const ws = this.ws;
    ws.onopen = ws.onmessage = ws.onclose = null;
    try {
      ws.close();
    } catch {
      // a socket that never connected may throw on close in some implementations
    }
  }
}
