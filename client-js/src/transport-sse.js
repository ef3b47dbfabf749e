// Emulation transports (PROTOCOL.md §4.2–4.4): replies arrive on a long-lived HTTP response,
// SSE (`data: <reply>` events through EventSource) or HTTP-streaming (newline-delimited JSON read
// from fetch's body stream); commands after connect go out as `POST /emulation` with
// {session, node, data}. EventSource and fetch are injected.

class EmulationBase {
  /**
   * @param {string} emulationEndpoint absolute in Node (PROTOCOL.md §4.6)
   * @param {typeof fetch} fetchImpl
   */
  constructor(emulationEndpoint, fetchImpl) {
    this.emulation = true;
    this.emulationEndpoint = emulationEndpoint;
    this.fetch = fetchImpl;
    this.session = '';
    this.node = '';
    this.opened = false;
    this.closed = false;
    /** @type {import('./transport-ws.js').TransportHandlers | null} */
    this.handlers = null;
  }

  /** The connect reply names the session and node that later commands are routed to. */
  bind(session, node) {
    this.session = session;
    this.node = node;
  }

  /** @param {string} frame */
  send(frame) {
    if (this.closed || !this.session) return;
    this.fetch(this.emulationEndpoint, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ session: this.session, node: this.node, data: frame }),
    }).then(
      (res) => {
        if (res.status === 404 || res.status >= 500) this._fail(1, `emulation ${res.status}`);
      },
      () => this._fail(1, 'emulation request failed'),
    );
  }

  _fail(code, reason) {
    if (this.closed) return;
    this.close();
    this.handlers?.onClose({ code, reason, opened: this.opened });
  }
}

export class SseTransport extends EmulationBase {
  /**
   * @param {string} endpoint http(s) URL of /connection/sse
   * @param {string} emulationEndpoint
   * @param {any} EventSourceImpl
   * @param {typeof fetch} fetchImpl
   */
  constructor(endpoint, emulationEndpoint, EventSourceImpl, fetchImpl) {
    super(emulationEndpoint, fetchImpl);
    if (!EventSourceImpl) throw new Error('taskcast: no EventSource implementation (pass options.eventsource)');
    this.name = 'sse';
    this.endpoint = endpoint;
    this.EventSource = EventSourceImpl;
    this.es = null;
  }

  open(handlers, connectFrame) {
    this.handlers = handlers;
    const url = new URL(this.endpoint, globalThis.location?.href);
    url.searchParams.set('cf_connect', connectFrame);
    const es = new this.EventSource(url.toString());
    this.es = es;
    es.onopen = () => {
      if (this.opened) return;
      this.opened = true;
      handlers.onOpen();
    };
    es.onmessage = (ev) => {
      for (const line of String(ev.data).trim().split('\n')) {
        if (line) handlers.onMessage(line);
      }
    };
    // EventSource would retry on its own; the client owns reconnects (and backoff) instead.
    es.onerror = () => this._fail(1, 'transport closed');
  }

  close() {
    this.closed = true;
    if (this.es) {
      this.es.onopen = this.es.onmessage = this.es.onerror = null;
      this.es.close();
    }
  }
}

export class HttpStreamTransport extends EmulationBase {
  constructor(endpoint, emulationEndpoint, fetchImpl) {
    super(emulationEndpoint, fetchImpl);
    this.name = 'http_stream';
    this.endpoint = endpoint;
    this.abort = new AbortController();
  }

  open(handlers, connectFrame) {
    this.handlers = handlers;
    this._run(connectFrame).catch(() => this._fail(1, 'transport closed'));
  }

  async _run(connectFrame) {
    const res = await this.fetch(this.endpoint, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', Accept: 'application/json' },
      body: connectFrame,
      signal: this.abort.signal,
    });
    if (!res.ok || !res.body) {
      this._fail(1, `http_stream ${res.status}`);
      return;
    }
    this.opened = true;
    this.handlers?.onOpen();
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    let buf = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done || this.closed) break;
      buf += decoder.decode(value, { stream: true });
      let nl;
      while ((nl = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, nl).trim();
        buf = buf.slice(nl + 1);
        if (line) this.handlers?.onMessage(line);
      }
    }
    this._fail(1, 'transport closed');
  }

  close() {
    this.closed = true;
    this.abort.abort();
  }
}
