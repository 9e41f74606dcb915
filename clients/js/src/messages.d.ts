// The socket protocol's messages (docs/protocol.md), generated from docs/protocol/*.schema.json
// by `python -m leaderboard.protocolschema`: do not edit (tests/test_protocol_schema.py checks it).

/** The protocol version these types describe (welcome.protocol). */
export type Protocol = 1;

/** Someone entered the top N of a subscribed board (built by the function library). */
export interface Announce extends FinalEntry {
  name?: string;
  /** an https:// URL */
  avatar?: string;
  /** ISO 3166-1 alpha-2, in capitals */
  country?: string;
  type: "announce";
  board: string;
  window: string;
  period: string;
}

export interface Around {
  /** echoed in the reply; a string or number of at most 64 characters */
  id?: string | number;
  type: "around";
  board: string;
  window: string;
  period: string;
  /** how the board ranks ties (docs/protocol.md, Rank modes) */
  mode: "ordinal" | "dense" | "competition";
  player: string;
  size: number | null;
  entries: Array<Entry>;
}

export interface AroundRequest {
  /** echoed in the reply; a string or number of at most 64 characters */
  id?: string | number;
  /** global, region:<name>, mode:<name> or board:<id>; default global */
  board?: string;
  /** a window the board keeps, or t-<tournament>; default the board's first */
  window?: string;
  period?: string | null;
  type: "around";
  player?: string | null;
  k?: number;
}

export interface BanRequest {
  /** echoed in the reply; a string or number of at most 64 characters */
  id?: string | number;
  type: "ban";
  player: string;
  reason: string;
}

export interface Banned {
  /** echoed in the reply; a string or number of at most 64 characters */
  id?: string | number;
  type: "banned";
  player: string;
  /** boards the player was removed from */
  boards: number;
}

/** A definition stored or read, every definition, or the id deleted. */
export interface Board {
  /** echoed in the reply; a string or number of at most 64 characters */
  id?: string | number;
  type: "board";
  action: "create" | "update" | "delete" | "show" | "list";
  definition?: Record<string, unknown>;
  boards?: Array<Record<string, unknown>>;
  board?: string | null;
}

export interface BoardInfo {
  board: string;
  windows: Array<string>;
  window: string;
  columns?: Array<Column>;
  metadata?: boolean;
  scopes?: Array<string>;
}

export interface BoardRequest {
  /** echoed in the reply; a string or number of at most 64 characters */
  id?: string | number;
  type: "board";
  action: "create" | "update" | "delete" | "show" | "list";
  board?: string;
  definition?: Record<string, unknown>;
}

export interface Boards {
  /** echoed in the reply; a string or number of at most 64 characters */
  id?: string | number;
  type: "boards";
  boards: Array<BoardInfo>;
}

export interface BoardsRequest {
  /** echoed in the reply; a string or number of at most 64 characters */
  id?: string | number;
  type: "boards";
}

/** The last message before a close frame the gateway sends itself, with that frame's code and reason: a client whose WebSocket stack cannot read the code (mono, Unity) learns it here. */
export interface Closing {
  type: "closing";
  /** the close frame's code (docs/protocol.md, Close codes) */
  code: number;
  /** the close frame's reason */
  reason: string;
}

export interface Column {
  name: string;
  direction: string;
  display: string;
}

export interface CorrectRequest {
  /** echoed in the reply; a string or number of at most 64 characters */
  id?: string | number;
  type: "correct";
  player: string;
  points?: number;
  reason: string;
  window?: string | null;
  period?: string | null;
  scopes?: Array<string> | null;
  values?: Array<number | string> | null;
  metadata?: string | null;
  remove?: boolean;
}

export interface Corrected {
  /** echoed in the reply; a string or number of at most 64 characters */
  id?: string | number;
  type: "corrected";
  player: string;
  points?: number;
  values?: Array<string> | null;
  boards: Array<CorrectedBoard>;
}

export interface CorrectedBoard {
  window: string;
  period: string;
  board: string;
  previous: number | null;
  rank: number | null;
  previous_keys?: Array<string> | null;
}

/** The next snapshot of a board as a change to the one before (docs/protocol.md, Snapshot deltas). */
export interface Delta {
  type: "delta";
  board: string;
  window: string;
  base: number;
  dt: number;
  entries: Array<number | Array<number> | Record<string, unknown>>;
}

export interface Entry extends FinalEntry {
  name?: string;
  /** an https:// URL */
  avatar?: string;
  /** ISO 3166-1 alpha-2, in capitals */
  country?: string;
  top_percent?: number;
}

export interface Error {
  /** echoed in the reply; a string or number of at most 64 characters */
  id?: string | number;
  type: "error";
  /** a stable error code (docs/protocol.md) */
  code: ErrorCode;
  message: string;
}

export type ErrorCode = "auth_required" | "backlog_full" | "bad_board" | "bad_json" | "bad_message" | "bad_period" | "bad_request" | "banned" | "binary_frame" | "board_exists" | "board_no_keys" | "board_reorder" | "board_too_many_keys" | "forbidden" | "idempotency_conflict" | "invalid_actor" | "invalid_avatar" | "invalid_board" | "invalid_board_id" | "invalid_board_key" | "invalid_board_scopes" | "invalid_board_window" | "invalid_country" | "invalid_default_board" | "invalid_direction" | "invalid_display" | "invalid_extension" | "invalid_id" | "invalid_key_bounds" | "invalid_key_value" | "invalid_metadata_limit" | "invalid_name" | "invalid_operator" | "invalid_period" | "invalid_player" | "invalid_points" | "invalid_profile" | "invalid_rank_mode" | "invalid_reason" | "invalid_scope" | "invalid_season" | "invalid_tie" | "invalid_time_zone" | "invalid_timestamp" | "invalid_token" | "invalid_top_n" | "invalid_tournament" | "invalid_window" | "key_out_of_range" | "library_mismatch" | "metadata_too_large" | "missing_id" | "not_entered" | "not_replicated" | "not_subscribed" | "period_closed" | "points_out_of_range" | "rate_limited" | "scope_not_kept" | "stale_board" | "timestamp_in_future" | "timestamp_outside_window" | "timestamp_too_old" | "token_expired" | "too_many_boards" | "too_many_friends" | "too_many_scopes" | "too_many_subscriptions" | "tournament_ended" | "tournament_exists" | "unavailable" | "unknown_board" | "unknown_dead_letter" | "unknown_extension" | "unknown_game" | "unknown_tournament" | "unknown_type" | "wrong_key_count";

export interface FinalEntry {
  rank: number;
  player: string;
  score: number;
  /** a defined board's key values as decimal strings (exact over int64) */
  keys?: Array<string>;
  meta?: string;
}

export interface FinalPeriod {
  period: string;
  start_ms: number;
  end_ms: number;
  closed_ms: number;
  entries: Array<FinalEntry>;
  columns?: Array<Column>;
}

export interface Finals {
  /** echoed in the reply; a string or number of at most 64 characters */
  id?: string | number;
  type: "finals";
  board: string;
  window: string;
  periods: Array<FinalPeriod>;
}

export interface FinalsRequest {
  /** echoed in the reply; a string or number of at most 64 characters */
  id?: string | number;
  /** global, region:<name>, mode:<name> or board:<id>; default global */
  board?: string;
  /** a window the board keeps, or t-<tournament>; default the board's first */
  window?: string;
  type: "finals";
  n?: number;
}

export interface Heard extends Announce {
  /** when the gateway heard it (ms) */
  ts: number;
}

export interface Heartbeat {
  /** send a ping at least this often (s) */
  interval: number;
  /** a line silent this long is dead (s) */
  timeout: number;
}

export interface HelloRequest {
  /** echoed in the reply; a string or number of at most 64 characters */
  id?: string | number;
  type: "hello";
  token?: string | null;
  deltas?: boolean | null;
}

export interface JoinRequest {
  /** echoed in the reply; a string or number of at most 64 characters */
  id?: string | number;
  type: "join";
  tournament: string;
  players: Array<string>;
}

export interface Joined {
  /** echoed in the reply; a string or number of at most 64 characters */
  id?: string | number;
  type: "joined";
  tournament: string;
  players: Array<string>;
  added: number;
}

/** Pushed when the connection's player was passed on a subscribed board: by a friend of its `watch` (`reason` friend) or out of the board's top N (`top`); `rank` is theirs after it. */
export interface Overtaken {
  type: "overtaken";
  board: string;
  window: string;
  period: string;
  player: string;
  rank: number | null;
  reason: "friend" | "top";
  by: Passer;
}

/** Who passed the player: their standing after it (a defined board's `keys` as text). */
export interface Passer extends Shown {
  player: string;
  rank: number | null;
  score: number | null;
  /** a defined board's key values as decimal strings (exact over int64) */
  keys?: Array<string>;
}

export interface PingRequest {
  /** echoed in the reply; a string or number of at most 64 characters */
  id?: string | number;
  type: "ping";
}

export interface Pong {
  /** echoed in the reply; a string or number of at most 64 characters */
  id?: string | number;
  type: "pong";
  ts: number;
}

export interface Profile {
  /** echoed in the reply; a string or number of at most 64 characters */
  id?: string | number;
  type: "profile";
  player: string;
  profile: Shown;
}

export interface ProfileRequest {
  /** echoed in the reply; a string or number of at most 64 characters */
  id?: string | number;
  type: "profile";
  player?: string | null;
  profile: Shown;
}

/** The player's own standing: pushed on change, and the reply to `rank`. */
export interface Rank {
  /** echoed in the reply; a string or number of at most 64 characters */
  id?: string | number;
  type: "rank";
  board: string;
  window: string;
  period: string;
  /** how the board ranks ties (docs/protocol.md, Rank modes) */
  mode: "ordinal" | "dense" | "competition";
  player: string;
  rank: number | null;
  score: number | null;
  size: number;
  top_percent: number | null;
  approx: boolean;
  /** a defined board's key values as decimal strings (exact over int64) */
  keys?: Array<string>;
}

export interface RankRequest {
  /** echoed in the reply; a string or number of at most 64 characters */
  id?: string | number;
  /** global, region:<name>, mode:<name> or board:<id>; default global */
  board?: string;
  /** a window the board keeps, or t-<tournament>; default the board's first */
  window?: string;
  period?: string | null;
  type: "rank";
  player?: string | null;
}

export interface Ranks {
  /** echoed in the reply; a string or number of at most 64 characters */
  id?: string | number;
  type: "ranks";
  board: string;
  window: string;
  period: string;
  /** how the board ranks ties (docs/protocol.md, Rank modes) */
  mode: "ordinal" | "dense" | "competition";
  size: number;
  players: Array<Standing>;
}

export interface RanksRequest {
  /** echoed in the reply; a string or number of at most 64 characters */
  id?: string | number;
  /** global, region:<name>, mode:<name> or board:<id>; default global */
  board?: string;
  /** a window the board keeps, or t-<tournament>; default the board's first */
  window?: string;
  period?: string | null;
  type: "ranks";
  players: Array<string>;
}

export interface Recent {
  /** echoed in the reply; a string or number of at most 64 characters */
  id?: string | number;
  type: "recent";
  board: string;
  window: string;
  entries: Array<Heard>;
}

export interface RecentRequest {
  /** echoed in the reply; a string or number of at most 64 characters */
  id?: string | number;
  /** global, region:<name>, mode:<name> or board:<id>; default global */
  board?: string;
  /** a window the board keeps, or t-<tournament>; default the board's first */
  window?: string;
  type: "recent";
}

export interface ResyncRequest {
  /** echoed in the reply; a string or number of at most 64 characters */
  id?: string | number;
  /** global, region:<name>, mode:<name> or board:<id>; default global */
  board?: string;
  /** a window the board keeps, or t-<tournament>; default the board's first */
  window?: string;
  type: "resync";
}

/** A player's display fields, present when the profile has them. */
export interface Shown {
  name?: string;
  /** an https:// URL */
  avatar?: string;
  /** ISO 3166-1 alpha-2, in capitals */
  country?: string;
}

/** A board's top N: on connect, on subscribe, then whenever it changed. */
export interface Snapshot {
  type: "snapshot";
  board: string;
  window: string;
  period: string;
  /** the board's snapshot count: the one before's + 1; it never repeats nor goes down (docs/protocol.md) */
  version: number;
  /** when the scorer built it (ms since the epoch) */
  ts: number;
  /** how the board ranks ties (docs/protocol.md, Rank modes) */
  mode: "ordinal" | "dense" | "competition";
  entries: Array<Entry>;
  columns?: Array<Column>;
}

export interface Standing extends Passer {
  top_percent: number | null;
  approx: boolean;
}

export interface Stats {
  /** echoed in the reply; a string or number of at most 64 characters */
  id?: string | number;
  type: "stats";
  board: string;
  window: string;
  period: string;
  size: number;
  /** distinct players of the window period (HyperLogLog, ~0.8%) */
  players: number;
}

export interface StatsRequest {
  /** echoed in the reply; a string or number of at most 64 characters */
  id?: string | number;
  /** global, region:<name>, mode:<name> or board:<id>; default global */
  board?: string;
  /** a window the board keeps, or t-<tournament>; default the board's first */
  window?: string;
  period?: string | null;
  type: "stats";
}

export interface Status {
  /** echoed in the reply; a string or number of at most 64 characters */
  id?: string | number;
  type: "status";
  submission: string;
  status: "applied" | "pending" | "refused" | "unknown";
  /** a stable error code (docs/protocol.md) */
  code?: ErrorCode;
  message?: string;
}

export interface StatusRequest {
  /** echoed in the reply; a string or number of at most 64 characters */
  id?: string | number;
  type: "status";
  submission: string;
}

export interface SubmitRequest {
  /** echoed in the reply; a string or number of at most 64 characters */
  id?: string | number;
  type: "submit";
  /** a submission (docs/data-model.md): id, player, points, … */
  submission: Record<string, unknown>;
}

export interface Submitted {
  /** echoed in the reply; a string or number of at most 64 characters */
  id?: string | number;
  type: "submitted";
  submission: string;
  stream_id: string;
}

export interface SubscribeRequest {
  /** echoed in the reply; a string or number of at most 64 characters */
  id?: string | number;
  /** global, region:<name>, mode:<name> or board:<id>; default global */
  board?: string;
  /** a window the board keeps, or t-<tournament>; default the board's first */
  window?: string;
  type: "subscribe";
  period?: null;
}

export interface Subscribed {
  /** echoed in the reply; a string or number of at most 64 characters */
  id?: string | number;
  type: "subscribed";
  board: string;
  window: string;
}

export interface Top {
  /** echoed in the reply; a string or number of at most 64 characters */
  id?: string | number;
  type: "top";
  board: string;
  window: string;
  period: string;
  /** how the board ranks ties (docs/protocol.md, Rank modes) */
  mode: "ordinal" | "dense" | "competition";
  entries: Array<Entry>;
}

export interface TopRequest {
  /** echoed in the reply; a string or number of at most 64 characters */
  id?: string | number;
  /** global, region:<name>, mode:<name> or board:<id>; default global */
  board?: string;
  /** a window the board keeps, or t-<tournament>; default the board's first */
  window?: string;
  period?: string | null;
  type: "top";
  n?: number;
}

export interface UnbanRequest {
  /** echoed in the reply; a string or number of at most 64 characters */
  id?: string | number;
  type: "unban";
  player: string;
  reason?: string;
}

export interface Unbanned {
  /** echoed in the reply; a string or number of at most 64 characters */
  id?: string | number;
  type: "unbanned";
  player: string;
  was_banned: boolean;
}

export interface UnsubscribeRequest {
  /** echoed in the reply; a string or number of at most 64 characters */
  id?: string | number;
  /** global, region:<name>, mode:<name> or board:<id>; default global */
  board?: string;
  /** a window the board keeps, or t-<tournament>; default the board's first */
  window?: string;
  type: "unsubscribe";
}

export interface Unsubscribed {
  /** echoed in the reply; a string or number of at most 64 characters */
  id?: string | number;
  type: "unsubscribed";
  board: string;
  window: string;
}

/** Be told (`overtaken`) when one of `friends` passes the player, or with `top` when they leave a board's top N; replaces the last list (empty: none). A player token only. */
export interface WatchRequest {
  /** echoed in the reply; a string or number of at most 64 characters */
  id?: string | number;
  type: "watch";
  /** player ids, at most 100 */
  friends?: Array<string>;
  top?: boolean;
}

/** The reply to `watch`: the friends list and top-N choice now in force. */
export interface Watching {
  /** echoed in the reply; a string or number of at most 64 characters */
  id?: string | number;
  type: "watching";
  friends: Array<string>;
  top: boolean;
}

/** Right after the handshake, and the reply to `hello`. */
export interface Welcome {
  /** echoed in the reply; a string or number of at most 64 characters */
  id?: string | number;
  type: "welcome";
  /** the protocol's version (docs/clients.md, Compatibility) */
  protocol: number;
  gateway: string;
  game: string;
  player: string | null;
  role: "spectator" | "player" | "server";
  heartbeat: Heartbeat;
  windows: Array<string>;
  window: string;
  top: number;
  deltas: boolean;
}

/** Every message a gateway sends, told apart by `type`. */
export type ServerMessage = Welcome | Snapshot | Delta | Rank | Announce | Error | Pong | Closing | Subscribed | Unsubscribed | Top | Around | Ranks | Stats | Recent | Boards | Finals | Joined | Submitted | Status | Banned | Unbanned | Corrected | Profile | Board | Watching | Overtaken;

/** Every message a client sends, told apart by `type`. */
export type ClientMessage = HelloRequest | PingRequest | BoardsRequest | SubscribeRequest | UnsubscribeRequest | ResyncRequest | TopRequest | RankRequest | AroundRequest | RanksRequest | StatsRequest | RecentRequest | FinalsRequest | JoinRequest | SubmitRequest | StatusRequest | BanRequest | UnbanRequest | CorrectRequest | ProfileRequest | BoardRequest | WatchRequest;

/** Each request's reply (it carries the request's `id`), by the request's `type`. */
export interface Replies {
  hello: Welcome;
  ping: Pong;
  boards: Boards;
  subscribe: Subscribed;
  unsubscribe: Unsubscribed;
  top: Top;
  rank: Rank;
  around: Around;
  ranks: Ranks;
  stats: Stats;
  recent: Recent;
  finals: Finals;
  join: Joined;
  submit: Submitted;
  status: Status;
  ban: Banned;
  unban: Unbanned;
  correct: Corrected;
  profile: Profile;
  board: Board;
  watch: Watching;
}
