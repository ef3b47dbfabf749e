// A tiny typed event emitter in the nanoevents style: `on()` returns an unbind function, and one
// listener's exception never stops the others (it is reported through `onListenerError`).

export class Emitter {
  constructor() {
    /** @type {Map<string, Set<Function>>} */
    this.events = new Map();
    /** @type {(err: unknown, event: string) => void} */
    this.onListenerError = (err) => {
      setTimeout(() => {
        throw err;
      }, 0);
    };
  }

  /**
   * @param {string} event
   * @param {Function} cb
   * @returns {() => void} unbind
   */
  on(event, cb) {
    let set = this.events.get(event);
    if (!set) {
      set = new Set();
      this.events.set(event, set);
    }
    set.add(cb);
    return () => {
      set.delete(cb);
    };
  }

  /**
   * @param {string} event
   * @param {...unknown} args
   */
  emit(event, ...args) {
    const set = this.events.get(event);
    if (!set) return;
    for (const cb of [...set]) {
      try {
        cb(...args);
      } catch (err) {
        this.onListenerError(err, event);
      }
    }
  }
}
