// The client's API (client.js). The messages' types are messages.d.ts, generated from the
// protocol's schema (docs/protocol/); this file is the client's own surface, written by hand and
// checked by `tsc --noEmit` on a typed usage example in the suite (clients/js/examples/usage.ts).
import type {
  Announce,
  ClientMessage,
  Delta,
  ErrorCode,
  Overtaken,
  Protocol,
  Rank,
  Replies,
  ServerMessage,
  Snapshot,
  Welcome,
} from "./messages.js";

export type * from "./messages.js";

/** The protocol version this client speaks; a greater `welcome.protocol` stops it. */
export declare const PROTOCOL: Protocol;

export interface BackoffOptions {
  /** the first cap (s), doubled per attempt */
  base?: number;
  /** the largest cap (s) */
  ceiling?: number;
  /** a connection up this long (s) resets the attempts */
  stableAfter?: number;
  /** the cap after a 1013 (overloaded), at least (s) */
  overloadFloor?: number;
  /** the cap after a 1012 (drain): come back soon, not all at once (s) */
  drainCap?: number;
  random?: () => number;
}

/** Exponential backoff with full jitter. */
export declare class Backoff {
  constructor(options?: BackoffOptions);
  attempt: number;
  readonly cap: number;
  /** The next wait (s), after a close with this code (null: a failed connect or a dead line). */
  nextDelay(closeCode?: number | null): number;
  connectedFor(seconds: number): void;
}

export declare class DeltaMismatch extends Error {}

/** The snapshot a delta makes of the one held; throws DeltaMismatch when it is not its base. */
export declare function applyDelta(held: Snapshot, delta: Delta): Snapshot;

export type ConnectionStatus = "idle" | "connecting" | "live" | "reconnecting" | "stopped";

export interface StatusDetail {
  status: ConnectionStatus;
  /** the wait before the next attempt (s), while reconnecting */
  retryIn: number | null;
  /** why it stopped or reconnects: the close reason (invalid_token, draining; reconnect, …) or protocol_version */
  reason: string | null;
}

/** An error the application is told of: a server error without id, or the client's own. */
export interface ClientError {
  type: "error";
  code: ErrorCode | "malformed_message" | "protocol_version";
  message: string;
  id?: string | number;
}

export interface LeaderboardEventMap {
  welcome: CustomEvent<Welcome>;
  snapshot: CustomEvent<Snapshot>;
  rank: CustomEvent<Rank>;
  announce: CustomEvent<Announce>;
  overtaken: CustomEvent<Overtaken>;
  reply: CustomEvent<ServerMessage>;
  error: CustomEvent<ClientError>;
  status: CustomEvent<StatusDetail>;
}

/** The least of a WebSocket the client uses: the browser's, Node 22's, or the ws package's. */
export interface WebSocketLike {
  readonly readyState: number;
  send(data: string): void;
  close(code?: number, reason?: string): void;
  onopen: ((event: unknown) => void) | null;
  onmessage: ((event: { data: unknown }) => void) | null;
  onclose: ((event: { code: number; reason: string }) => void) | null;
}

export type WebSocketClass = new (url: string) => WebSocketLike;

export interface ClientOptions {
  /** a player's or game server's token (HS256 JWT); none: a spectator */
  token?: string | null;
  backoff?: Backoff;
  /** asked once for a fresh token when the gateway refuses this one; null: stop */
  renewToken?: (() => Promise<string | null>) | null;
  /** ask for snapshot deltas (applied here: snapshot events carry whole snapshots either way) */
  deltas?: boolean;
  /** the WebSocket class; default: the global one, else the ws package's */
  WebSocket?: WebSocketClass | null;
}

/** A client message as `request` takes it: the client adds the `id`. */
export type RequestMessage = ClientMessage extends infer M ? (M extends { type: keyof Replies } ? Omit<M, "id"> : never) : never;

export declare class LeaderboardClient extends EventTarget {
  constructor(url: string, options?: ClientOptions);
  readonly url: string;
  token: string | null;
  readonly status: ConnectionStatus;
  readonly retryIn: number | null;
  readonly welcome: Welcome | null;
  /** the last snapshot of each board, by "board|window" */
  readonly snapshots: Map<string, Snapshot>;
  /** the last own-rank push of each board, by "board|window" */
  readonly ranks: Map<string, Rank>;
  readonly deltasApplied: number;
  readonly resyncs: number;
  start(): void;
  stop(): void;
  subscribe(board?: string, window?: string): void;
  unsubscribe(board?: string, window?: string): void;
  /** Sends a message without waiting for a reply; false when not live. */
  send(message: ClientMessage): boolean;
  /** "overtaken" events when one of `friends` passes the player, or with `top` when they leave a
   * board's top N; replaces the last list, sent again on every reconnect. A player token only. */
  watch(friends: string[], options?: { top?: boolean }): void;
  /** Resolves with the reply carrying its id; rejects with an Error whose `code` is the
   * server's (or "timeout", "not connected", "connection lost"). */
  request<M extends RequestMessage>(message: M, timeoutMs?: number): Promise<Replies[M["type"]]>;
  addEventListener<K extends keyof LeaderboardEventMap>(
    type: K,
    listener: (event: LeaderboardEventMap[K]) => void,
    options?: boolean | AddEventListenerOptions,
  ): void;
  addEventListener(
    type: string,
    listener: EventListenerOrEventListenerObject | null,
    options?: boolean | AddEventListenerOptions,
  ): void;
  removeEventListener<K extends keyof LeaderboardEventMap>(
    type: K,
    listener: (event: LeaderboardEventMap[K]) => void,
    options?: boolean | EventListenerOptions,
  ): void;
  removeEventListener(
    type: string,
    listener: EventListenerOrEventListenerObject | null,
    options?: boolean | EventListenerOptions,
  ): void;
}
