// The leaderboard gateway's socket client (docs/protocol.md, docs/clients.md) for browsers and
// Node.js 20+: a plain ES module, no build step; its types are client.d.ts and messages.d.ts.
//
//   import { LeaderboardClient } from "/client.js";        // a page: the gateway serves it
//   import { LeaderboardClient } from "leaderboard-fleet-client";   // Node.js (with the ws package)
//   const client = new LeaderboardClient("ws://host/ws", { token });
//   client.addEventListener("snapshot", (e) => render(e.detail));
//   client.subscribe("global", "weekly");
//   client.start();
//
// Events (CustomEvent, payload in `detail`): welcome, snapshot, rank, announce, overtaken
// (after `watch(friends, { top })`: who passed the player, where, their new rank), reply, error,
// status ({status: "connecting" | "live" | "reconnecting" | "stopped", retryIn: seconds | null,
// reason}). An `error` event is a server error without id, or `{code: "malformed_message"}` for a
// server frame the client cannot read (the loop goes on), or `{code: "protocol_version"}` for a
// gateway of a newer protocol than PROTOCOL: the client stops rather than guess (status
// "stopped", reason "protocol_version").
// Where there is no global WebSocket (Node.js 20) it imports the `ws` package, or takes an
// implementation as the `WebSocket` option.
// A refused token (close 1008 "invalid_token" / "token_expired") stops the client, unless a
// `renewToken` callback is given: it is asked once for a fresh token (null: stop), and the
// client reconnects with it.
// The last snapshot of every board stays in `client.snapshots`, so a UI never blanks while the
// client reconnects.
// It asks for snapshot deltas (`deltas: false`: full snapshots only) and applies each to the
// snapshot it holds (`applyDelta`): "snapshot" events carry whole snapshots either way; a delta
// that does not fit the version held is dropped and the full snapshot asked for (`resync`).

// The protocol version this client speaks (welcome.protocol; docs/clients.md, Compatibility).
export const PROTOCOL = 1;

// The fields this client reads from each message type, and their JSON types: a message without
// them is malformed (reported, skipped). A type it does not know is not: a newer gateway may add one.
const TEXT = (v) => typeof v === "string";
const INT = (v) => Number.isInteger(v);
const LIST = (v) => Array.isArray(v);
const OBJECT = (v) => v !== null && typeof v === "object" && !Array.isArray(v);
const FIELDS = {
  snapshot: { board: TEXT, window: TEXT, version: INT, entries: LIST },
  delta: { board: TEXT, window: TEXT, base: INT, entries: LIST },
  error: { code: TEXT },
};
const PUSHED = { rank: { board: TEXT, window: TEXT } }; // a reply of the same type may omit them
const OPTIONAL = { welcome: { protocol: INT, heartbeat: OBJECT } };

// Why a parsed frame is not a message this client reads, or "" when it is one.
function unreadable(msg) {
  if (!OBJECT(msg) || !TEXT(msg.type)) return "a server frame that is not a JSON object with a type";
  for (const needed of [FIELDS[msg.type], msg.id === undefined ? PUSHED[msg.type] : undefined]) {
    for (const name in needed) if (!needed[name](msg[name])) return `${msg.type} without a valid ${name}`;
  }
  const optional = OPTIONAL[msg.type];
  for (const name in optional) if (name in msg && !optional[name](msg[name])) return `${msg.type} with an invalid ${name}`;
  return "";
}

const DRAINING = 1012; // the gateway restarts: another one answers at once
const OVERLOADED = 1013; // the gateway is full: stay away for a while
const POLICY = 1008; // bad token or abuse: retrying with the same token cannot help
const TOKEN_REFUSED = new Set(["invalid_token", "token_expired"]); // the 1008 close reasons a new token can cure
const OPEN = 1; // WebSocket.OPEN, the same in browsers and in ws

// The WebSocket class when none is given: the global one (browsers, Node 22+), else the ws
// package's (imported only then, so a page never asks for it). The name is a variable so that a
// bundler building for browsers does not try to resolve ws, an optional peer dependency.
const WS_PACKAGE = "ws";
async function defaultWebSocket() {
  if (typeof globalThis.WebSocket === "function") return globalThis.WebSocket;
  const { WebSocket } = await import(WS_PACKAGE);
  return WebSocket;
}

// Exponential backoff with FULL jitter: wait a random time in [0, cap]; the cap doubles from
// 0.5 s to 20 s and resets once a connection has been stable. Without the randomness every
// client of a crashed gateway would come back at the same instant.
export class Backoff {
  constructor({ base = 0.5, ceiling = 20, stableAfter = 10, overloadFloor = 5, drainCap = 1, random = Math.random } = {}) {
    Object.assign(this, { base, ceiling, stableAfter, overloadFloor, drainCap, random });
    this.attempt = 0;
  }

  get cap() {
    return Math.min(this.ceiling, this.base * 2 ** this.attempt);
  }

  nextDelay(closeCode = null) {
    if (closeCode === DRAINING) return this.random() * this.drainCap;
    let cap = this.cap;
    if (closeCode === OVERLOADED) cap = Math.max(cap, this.overloadFloor);
    this.attempt += 1;
    return this.random() * cap;
  }

  connectedFor(seconds) {
    if (seconds >= this.stableAfter) this.attempt = 0;
  }
}

// The snapshot a `delta` message makes of `held`, the snapshot of that board held (docs/protocol.md,
// "Snapshot deltas"); throws a DeltaMismatch when `held` is not its base.
export class DeltaMismatch extends Error {}

export function applyDelta(held, delta) {
  for (const name of ["board", "window"]) {
    if (!held || held[name] !== delta[name]) throw new DeltaMismatch(`the delta is for another ${name}`);
  }
  if (!Number.isInteger(held.version) || held.version !== delta.base) {
    throw new DeltaMismatch(`the delta applies to version ${delta.base}`);
  }
  if (!Number.isInteger(held.ts) || !Number.isInteger(delta.dt)) throw new DeltaMismatch("ts and dt must be integers");
  const base = held.entries;
  if (!Array.isArray(base) || !Array.isArray(delta.entries)) throw new DeltaMismatch("entries must be lists");
  const entries = delta.entries.map((item, place) => {
    if (item !== null && typeof item === "object" && !Array.isArray(item) && !("@" in item)) return item;
    let k;
    if (typeof item === "number") k = item;
    else if (Array.isArray(item) && item.length === 2) k = item[0];
    else if (item !== null && typeof item === "object" && !Array.isArray(item)) k = item["@"];
    else throw new DeltaMismatch("an entry must be an index, an [index, score] pair or an object");
    if (!Number.isInteger(k) || k < 0 || k >= base.length || base[k] === null || typeof base[k] !== "object") {
      throw new DeltaMismatch("an entry's index is out of range");
    }
    // its rank is its place in the list, unless the delta says otherwise (ties)
    let entry = "rank" in base[k] ? { ...base[k], rank: place + 1 } : { ...base[k] };
    if (Array.isArray(item)) entry.score = item[1];
    else if (typeof item === "object") {
      const gone = new Set(item["-"] || []);
      entry = Object.fromEntries(Object.entries(entry).filter(([name]) => !gone.has(name)));
      for (const [name, value] of Object.entries(item)) if (name !== "@" && name !== "-") entry[name] = value;
    }
    return entry;
  });
  return { ...held, version: held.version + 1, ts: held.ts + delta.dt, entries };
}

// A request's failure: an Error with a stable `code`.
function failure(code, message) {
  return Object.assign(new Error(message), { code });
}

export class LeaderboardClient extends EventTarget {
  constructor(url, { token = null, backoff = new Backoff(), renewToken = null, deltas = true, WebSocket = null } = {}) {
    super();
    this.url = url;
    this.WebSocket = WebSocket; // null: the global one, else the ws package's (resolved by start())
    this.token = token;
    this.deltas = deltas;
    this.resyncing = new Set(); // "board|window" whose full snapshot was asked for
    this.resyncs = 0; // full snapshots asked for because a delta did not fit
    this.deltasApplied = 0;
    this.renewToken = renewToken; // async () => a new token or null
    this.renewed = false; // one renewal per successful welcome: a renewed token refused again stops
    this.backoff = backoff;
    this.status = "idle";
    this.retryIn = null;
    this.welcome = null;
    this.snapshots = new Map(); // "board|window" -> last snapshot
    this.ranks = new Map(); // "board|window" -> last own rank
    this.subscriptions = new Map(); // "board|window" -> {board, window}
    this.watching = null; // the last watch message, sent again on reconnect
    this.pending = new Map(); // request id -> {resolve, reject}
    this.nextId = 1;
    this.ws = null;
    this.timer = null; // the one reconnect timer: never two reconnect loops
    this.heartbeat = null;
    this.lastSeen = 0;
    this.openedAt = 0;
    this.stopped = true;
  }

  start() {
    if (!this.stopped) return;
    this.stopped = false;
    if (this.WebSocket) {
      this.#connect();
      return;
    }
    defaultWebSocket().then(
      (impl) => {
        this.WebSocket = impl;
        this.#connect();
      },
      (err) => this.#stop(`no WebSocket implementation: ${err.message}`),
    );
  }

  stop() {
    this.stopped = true;
    this.#shut();
    this.#setStatus("stopped");
  }

  // Close the socket (if any) and cancel the timers, without a reconnect.
  #shut() {
    clearTimeout(this.timer);
    this.timer = null;
    this.#stopHeartbeat();
    const ws = this.ws;
    this.ws = null;
    if (ws) ws.close(1000);
  }

  // An error the application is told of (an `error` event, as a server error without id).
  #report(code, message) {
    this.dispatchEvent(new CustomEvent("error", { detail: { type: "error", code, message } }));
  }

  subscribe(board = "global", window = undefined) {
    const key = `${board}|${window ?? ""}`;
    this.subscriptions.set(key, { board, window });
    if (this.status === "live") this.#send({ type: "subscribe", board, window });
  }

  unsubscribe(board = "global", window = undefined) {
    this.subscriptions.delete(`${board}|${window ?? ""}`);
    if (this.status === "live") this.#send({ type: "unsubscribe", board, window });
  }

  // Send a message without waiting for a reply (a ping); false when not live.
  send(message) {
    if (this.status !== "live") return false;
    this.#send(message);
    return true;
  }

  // Be told ("overtaken" events) when one of `friends` (player ids) passes this player, or with
  // `top` when they leave a board's top N, on every subscribed board. Replaces the last list;
  // kept across reconnects. A player token only.
  watch(friends, { top = false } = {}) {
    this.watching = { type: "watch", friends: [...friends], top };
    if (this.status === "live") this.#send(this.watching);
  }

  // Send a request; resolves with the reply carrying its id, rejects on an error reply (the
  // Error's `code` is the server's) or with the code "not_connected", "timeout" or "connection_lost".
  request(message, timeoutMs = 5000) {
    if (this.status !== "live") return Promise.reject(failure("not_connected", "not connected"));
    const id = `r${this.nextId++}`;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(failure("timeout", `no reply within ${timeoutMs} ms`));
      }, timeoutMs);
      this.pending.set(id, {
        resolve: (m) => (clearTimeout(timer), resolve(m)),
        reject: (e) => (clearTimeout(timer), reject(e)),
      });
      this.#send({ ...message, id });
    });
  }

  #connect() {
    if (this.stopped || this.ws) return;
    this.#setStatus(this.welcome ? "reconnecting" : "connecting");
    let ws;
    try {
      ws = new this.WebSocket(this.url);
    } catch (err) {
      this.#scheduleReconnect(null);
      return;
    }
    this.ws = ws;
    ws.onopen = () => {
      this.openedAt = performance.now();
      this.lastSeen = performance.now();
      this.resyncing.clear();
      if (this.token || this.deltas) {
        this.#send({ type: "hello", token: this.token, ...(this.deltas ? { deltas: true } : {}) });
      }
    };
    ws.onmessage = (event) => this.#onFrame(event.data);
    ws.onclose = (event) => {
      if (this.ws !== ws) return;
      this.ws = null;
      this.#stopHeartbeat();
      for (const { reject } of this.pending.values()) reject(failure("connection_lost", "connection lost"));
      this.pending.clear();
      if (this.openedAt) this.backoff.connectedFor((performance.now() - this.openedAt) / 1000);
      this.openedAt = 0;
      if (event.code === POLICY) {
        const reason = event.reason || "refused by the gateway";
        if (TOKEN_REFUSED.has(event.reason) && this.renewToken && !this.renewed) this.#renew(reason);
        else this.#stop(reason);
        return;
      }
      this.#scheduleReconnect(event.code || null, event.reason || null);
    };
  }

  #stop(reason) {
    this.stopped = true;
    this.#setStatus("stopped", reason);
  }

  async #renew(reason) {
    this.renewed = true;
    this.#setStatus("reconnecting");
    let token = null;
    try {
      token = await this.renewToken();
    } catch {}
    if (this.stopped) return;
    if (!token) {
      this.#stop(reason);
      return;
    }
    this.token = token;
    this.#scheduleReconnect(null);
  }

  // reason: the close's, told in the status (a drain's, an overload's), as the other clients do
  #scheduleReconnect(closeCode, reason = null) {
    if (this.stopped || this.timer) return;
    const delay = this.backoff.nextDelay(closeCode);
    this.retryIn = delay;
    this.#setStatus("reconnecting", reason);
    this.timer = setTimeout(() => {
      this.timer = null;
      this.retryIn = null;
      this.#connect();
    }, delay * 1000);
  }

  #onFrame(data) {
    this.lastSeen = performance.now();
    let msg;
    try {
      msg = JSON.parse(data);
    } catch {
      msg = undefined;
    }
    const wrong = unreadable(msg);
    if (wrong) {
      // told, never fatal: one bad frame (a proxy's, a newer gateway's) must not end the loop
      this.#report("malformed_message", wrong);
      return;
    }
    const key = `${msg.board}|${msg.window}`;
    if (msg.type === "delta") {
      msg = this.#applied(key, msg);
      if (msg === null) return;
    }
    switch (msg.type) {
      case "welcome":
        if (Number.isInteger(msg.protocol) && msg.protocol > PROTOCOL) {
          // a newer protocol may mean what this client would misread: stop, and say why
          this.#report("protocol_version", `the gateway speaks protocol ${msg.protocol}, this client ${PROTOCOL}`);
          this.#shut();
          this.#stop("protocol_version");
          return;
        }
        this.welcome = msg;
        // The gateway greets every connection as a spectator before it reads the hello: only a
        // welcome that accepted the token proves the renewed one good.
        if (!this.token || msg.role !== "spectator") this.renewed = false;
        if (this.status !== "live") {
          this.#setStatus("live");
          for (const { board, window } of this.subscriptions.values()) {
            this.#send({ type: "subscribe", board, window });
          }
          if (this.watching) this.#send(this.watching);
          this.#startHeartbeat(msg.heartbeat || {});
        }
        break;
      case "snapshot":
        this.snapshots.set(key, msg);
        this.snapshots.set(`${msg.board}|`, msg);
        this.resyncing.delete(key);
        break;
      case "rank":
        if (msg.id === undefined) this.ranks.set(key, msg);
        break;
    }
    if (msg.id !== undefined && this.pending.has(msg.id)) {
      const { resolve, reject } = this.pending.get(msg.id);
      this.pending.delete(msg.id);
      if (msg.type === "error") reject(failure(msg.code, msg.message));
      else resolve(msg);
    }
    const kind = msg.id !== undefined && msg.type !== "welcome" ? "reply" : msg.type;
    this.dispatchEvent(new CustomEvent(kind, { detail: msg }));
  }

  // The snapshot a delta makes of the one held, or null: an older one (its version held already),
  // or one that does not fit (the full snapshot is asked for, once).
  #applied(key, msg) {
    const held = this.snapshots.get(key);
    if (held && Number.isInteger(msg.base) && msg.base < held.version) return null;
    try {
      const snapshot = applyDelta(held, msg);
      this.deltasApplied += 1;
      return snapshot;
    } catch (err) {
      if (!(err instanceof DeltaMismatch)) throw err;
      if (!this.resyncing.has(key)) {
        this.resyncing.add(key);
        this.resyncs += 1;
        this.#send({ type: "resync", board: msg.board, window: msg.window });
      }
      return null;
    }
  }

  // App-level heartbeat: browsers cannot see protocol pings, so the client pings and treats a
  // line silent for `timeout` seconds as dead (a tablet entering a tunnel never says goodbye).
  #startHeartbeat({ interval = 15, timeout = 30 }) {
    this.#stopHeartbeat();
    const every = Math.min(interval, timeout / 2) * 1000;
    this.heartbeat = setInterval(() => {
      if (performance.now() - this.lastSeen > timeout * 1000) {
        const ws = this.ws;
        this.ws = null;
        this.#stopHeartbeat();
        if (ws) {
          ws.onclose = null;
          ws.close();
        }
        this.#scheduleReconnect(null);
        return;
      }
      this.#send({ type: "ping" });
    }, every);
  }

  #stopHeartbeat() {
    clearInterval(this.heartbeat);
    this.heartbeat = null;
  }

  #send(message) {
    if (this.ws && this.ws.readyState === OPEN) this.ws.send(JSON.stringify(message));
  }

  #setStatus(status, reason = null) {
    if (status === this.status && status !== "reconnecting") return;
    this.status = status;
    this.dispatchEvent(new CustomEvent("status", { detail: { status, retryIn: this.retryIn, reason } }));
  }
}
