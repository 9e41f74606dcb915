#!lua name=leaderboard
--[[
Live leaderboard function library: atomic score submissions and read paths.

Key schema (every key of one game carries the hash tag {game}, so a Cluster keeps them in one
slot; the names are built by leaderboard/keys.py and reach every function through KEYS):

  lb:{g}:board:<window>:<period>:<scope>   ZSET    player -> packed score (points and time)
  lb:{g}:hist:<window>:<period>:<scope>    HASH    standing bucket -> members of the board in it
                                                   (scoring.standing: points, or a lex first key)
  lb:{g}:points:<window>:<period>:<scope>  ZSET    each distinct points value on the board (member
                                                   and score: the value); dense-mode windows only;
                                                   on a lex board each distinct key part (score 0)
  lb:{g}:members:<window>:<period>:<scope> HASH    player -> member of a lex board (board:<id>, or a game scope)
  lb:{g}:meta:<window>:<period>:<scope>    HASH    player -> entry metadata (a definition that keeps some)
  lb:{g}:players:<window>:<period>         HLL     distinct players of one window period
  lb:{g}:seen:<hour>                       SET     submission ids applied, bucketed by the
                                                   submission's own timestamp hour
  lb:{g}:outcomes:<hour>                   HASH    submission id -> its per-board rows (JSON), for the
                                                   slips that asked to keep them; the seen bucket's
                                                   hour and lifetime
  lb:{g}:versions                          HASH    "<window>:<period>:<scope>" -> top-N version
  lb:{g}:activity                          STREAM  one entry per lb_submit call that applied any
                                                   submission: n, then a column per field, the
                                                   applied submissions' values joined by newlines
                                                   (leaderboard/activity.py); one entry per
                                                   moderation action (its action field); MAXLEN ~
                                                   about activity_maxlen submissions
  lb:{g}:profiles                          HASH    player -> profile JSON {"name", "avatar", "country"}
  lb:{g}:banned                            HASH    player -> ban record JSON {"by", "reason", "at"}: the
                                                   tombstone lb_submit checks before any write
  lb:{g}:scopes                            SET     every region and mode value ("region:eu",
                                                   "board:<id>:region:eu") slips named: at most
                                                   max_scopes (LB_MAX_SCOPES)
  lb:{g}:submissions                       STREAM  the queue: entries not yet applied and acked (and
                                                   acked ones newer than a pending one, until lb_ack
                                                   trims them); an entry is the slip (id, player,
                                                   points, ts, name joined by tabs) and the optional
                                                   fields set, or (earlier releases) fields by name
  lb:{g}:queued                            SET     submission ids in the queue: lb_enqueue adds, the
                                                   scorer removes when it acknowledges them
  lb:{g}:bodies:<hour>                     HASH    submission id -> "<fingerprint> <stream id>" of the
                                                   request body it was first filed with (the HTTP
                                                   API's) and the entry that filing appended,
                                                   bucketed by the hour lb_enqueue took it; kept as
                                                   long as seen
  lb:{g}:deadletters                       STREAM  slips the scorer refused: their fields and dead.id,
                                                   dead.code, dead.message, dead.at, dead.by (scorer)
  lb:{g}:refused:<hour>                    HASH    submission id -> "<code> <message>" of the
                                                   slips refused in that hour (scorer; EXPIREAT)
  lb:{g}:publisher                         STRING  the publish lease: the holder's owner token (PX)
  lb:{g}:published                         HASH    "<window>:<scope>" -> "<period>:<version>:<snapshot
                                                   version>" last published
  lb:{g}:latest:<window>:<scope>           STRING  the board's last published snapshot JSON (EX)
  lb:{g}:closed                            STREAM  close events: a period's final top N (MAXLEN ~)
  lb:{g}:closedmark:<window>:<period>      STRING  set with the period's close event (EXPIREAT);
                                                   lb_submit refuses the period's later slips
                                                   (a defined board's: ...:<period>:board:<id>)
  lb:{g}:finals:<window>                   LIST    the newest close events of a window (LTRIM);
                                                   all tournaments share finals:tournaments; a
                                                   defined board's: finals:<window>:board:<id>
  lb:{g}:tournaments                       HASH    tournament id -> {"start_ms","end_ms"} JSON
  lb:{g}:entrants:<tournament>             SET     players entered in a tournament (EXPIREAT)
  lb:{g}:boards                            HASH    board id -> definition JSON (leaderboard/boards.py)
  lb:{g}:boardsver                         STRING  counter bumped by every change of the boards hash
  lb:{g}:boardlog                          ZSET    board id -> the counter's value at its last
                                                   change (put, delete); member '' the floor: a
                                                   process holding less re-reads every definition
  lb:{g}:boardepoch                        STRING  the change log's epoch: Redis's clock (us) at
                                                   the change that started it (put, delete)
  lb:{g}:deletedboards                     HASH    board id -> the definition JSON it had when deleted
                                                   (lb_board_delete); lb_board_put creates that id
                                                   again only with the same keys and bounds; kept
                                                   until its boards hold no entries (lb_board_purge)
  lb:{g}:journal                           STREAM  one entry per change of lb_ban, lb_unban,
                                                   lb_correct (fn correction: its arguments, which
                                                   the durable log folds or its rebuild replays),
                                                   lb_profile, lb_tournament, lb_join, lb_close,
                                                   lb_board_put, lb_board_delete, lb_board_purge
                                                   (and first badge awards, from the badge
                                                   worker): {fn, at (Redis TIME, us), args (JSON
                                                   array)}; the durable log's recorder deletes what
                                                   it recorded (MAXLEN ~ JOURNAL_MAXLEN)

Keys of the same game no function touches (named here so this schema is the whole of keys.py):

  lb:{g}:badges:<player>                   the badge worker's record of a player's badges
  lb:{g}:audit                             the moderators' audit log (leaderboard/audit.py)
  lb:{g}:heartbeats                        the gateways' heartbeats (leaderboard/fleetview.py)
  lb:{g}:rewards                           the ledger of examples/rewards.py

A tournament is a window of its own, t-<id>, with one period labelled <id>: its boards, versions,
channels and latest snapshots are those of any window.

Channels (sharded pub/sub: SPUBLISH, received with SSUBSCRIBE; on a Cluster a channel lives on
the shard owning its slot, the game's, and on a single server it works the same):

  lb:{g}:snap:<window>:<scope>             snapshot JSON of the board's current period
  lb:{g}:announce                          {"type":"announce",...} when a player enters a top N
  lb:{g}:replay                            the same, from a rebuild replaying history (nobody
                                           listens: the caller names the channel in ARGV)

Functions (each documented where it is defined, in the file of its concept: lua/parts.txt lists
them; Python wrappers in leaderboard/library/, a module per file):

  lb_submit       apply a batch of submissions          banned, closedmark (read), boards (with
                                                        their hist and points), players, seen,
                                                        outcomes, scopes, versions, activity,
                                                        profiles;
                                                        SPUBLISH announce
  lb_enqueue      append to the queue under its cap     submissions, queued, bodies
  lb_ack          acknowledge, trim what is applied     the stream given (any group), queued
  lb_status       a submission's outcome (no-writes)    queued, seen, outcomes, refused
  lb_lease        take, renew or release the lease      publisher
  lb_publish      publish snapshots under the lease     publisher (read), published, latest;
                                                        SPUBLISH snap
  lb_forget       drop gone consumers of a group        the stream given (any group)
  lb_top          top N with profiles and metadata,     a board, profiles, its metadata
                  either encoding (no-writes)
  lb_around       entries around a player, either       a board, profiles, its points (or key
                  encoding (no-writes)                  parts), its members, its metadata
  lb_ranks        ranks of listed players, either       a board, its points (or key parts),
                  encoding (no-writes)                  hist, its members
  lb_close        a period's close event, once, either  closedmark, closed, finals, versions,
                  encoding (a defined board's alone)    journal; boards and their metadata (read)
  lb_tournament   create a tournament                   tournaments, journal
  lb_join         enter players in a tournament         tournaments (read), entrants, journal
  lb_ban          remove a player, leave a tombstone,   banned, versions, activity, journal, the
                  either encoding                       boards given and their histograms, points
                                                        sets, members and metadata
  lb_unban        lift a ban                            banned, activity, journal
  lb_correct      set or remove a player's entry, with  banned (read), versions, activity, journal,
                  reason, either encoding               the boards given and their histograms,
                                                        points sets, members and metadata
  lb_profile      set a player's profile fields,        profiles, versions, journal, the boards
                  either encoding                       given and their members (read)
  lb_rank_rebuild rebuild a board's companions          a board, its points and hist
  lb_board_put    create or update a board definition   boards, boardsver, journal, deletedboards,
                  under the game's cap                  boardlog, boardepoch
  lb_board_delete delete a board definition             boards, boardsver, journal, deletedboards,
                                                        boardlog, boardepoch
  lb_board_purge  forget a deleted definition whose     deletedboards, boardlog, journal; its
                  boards hold no entries                boards' keys (read)

Score packing (docs/data-model.md): score = points * 2^k + (2^k - 1 - t), t the time since the
window's start in its tie unit (k per window, from the caller), points the keys in mixed radix
(scoring.pack), each below 2^(53 - k) in magnitude: the packed value is exact.

Rank modes (see leaderboard/ranking.py): ordinal (ties by time, ZREVRANK), competition (1 + members
with strictly more points: one ZCOUNT on the board), dense (1 + distinct points values above: one
ZCOUNT on the board's points set). Reads take the mode as an argument; no read scans the board.

Errors, one way per scope (refuse and entry_error below), with the codes of leaderboard/errors.py:
- a call that cannot run answers 'ERR <code> <message>' and writes nothing: bad_request,
  library_mismatch (a call laid out by another release), backlog_full, idempotency_conflict,
  unknown_tournament, tournament_exists, tournament_ended, banned, points_out_of_range,
  invalid_player, invalid_actor, invalid_reason, invalid_points, invalid_name, invalid_avatar,
  invalid_country, invalid_board, board_exists, unknown_board, stale_board, too_many_boards,
  board_reorder (each function's Output says which it answers);
- one submission of a batch that cannot apply answers {'error', code, message} for that entry
  only and writes nothing for it: missing_id, invalid_id, banned, invalid_player, invalid_name,
  invalid_points, invalid_operator, invalid_timestamp, timestamp_in_future, timestamp_too_old,
  timestamp_outside_window, not_entered, period_closed, too_many_scopes, points_out_of_range,
  wrong_key_count, invalid_key_value, key_out_of_range, metadata_too_large.

Player ids, wherever they come in, follow one rule: valid.player.
]]

-- Text and validation: the rules every input passes, how a call refuses and the journal.
--
-- The library is one chunk assembled from lua/ in the order of lua/parts.txt. Lua 5.1 takes at
-- most 200 locals in a chunk, so each file keeps its helpers in a module table (valid.player,
-- int64.parse): the top-level locals are those tables and a few helpers every file calls, which
-- tests/test_library_layout.py counts. Top-level statements start at column 0 (what that count
-- reads); anything indented is inside a function.
local valid = {}

valid.MAX_ID_BYTES = 64
valid.MAX_NAME_BYTES = 64
valid.PLAYER_RULE = 'player must be 1-' .. valid.MAX_ID_BYTES .. ' bytes of UTF-8 without control, bidirectional or invisible characters'
valid.VALID_OPS = { best = true, incr = true, set = true }

-- Local helpers ---------------------------------------------------------------------------

function valid.utf8(s)
  if not s:find('[\128-\255]') then
    return true -- plain ASCII, the common case: one C-level scan instead of a Lua loop per byte
  end
  local i, n = 1, #s
  while i <= n do
    local c, c2 = s:byte(i, i + 1)
    -- the continuation bytes (10xxxxxx) a lead byte announces; nil: not a lead byte (C0 and C1
    -- start overlong two-byte forms, F5-FF code points past U+10FFFF)
    local extra = c < 0x80 and 0 or c >= 0xC2 and c <= 0xDF and 1 or c >= 0xE0 and c <= 0xEF and 2
      or c >= 0xF0 and c <= 0xF4 and 3 or nil
    if not extra or #s:match('^[\128-\191]*', i + 1) < extra
        -- overlong three/four-byte forms, UTF-16 surrogates and code points past U+10FFFF
        or (c == 0xE0 and c2 < 0xA0) or (c == 0xED and c2 > 0x9F) or (c == 0xF0 and c2 < 0x90) or (c == 0xF4 and c2 > 0x8F) then
      return false
    end
    i = i + extra + 1
  end
  return true
end

-- Valid UTF-8 without control characters: C0, DEL, C1, the line and paragraph separators and
-- the bidirectional overrides and isolates (they would reorder the text around a name on a
-- page). leaderboard/profiles.py applies the same rules before the call.
function valid.plain_text(s)
  if s:find('[%z\1-\31\127]') or s:find('\194[\128-\159]') or s:find('\226\128[\168-\174]')
      or s:find('\226\129[\166-\169]') then
    return false
  end
  return valid.utf8(s)
end

-- The player id rule, its one definition here (leaderboard/profiles.py is_player_id is the same,
-- tests/test_player_ids.py holds them equal): 1-64 bytes of plain text (above) without the code
-- points that show nothing either: U+061C, U+200B-U+200F (zero-width space, non-joiner, joiner,
-- the direction marks), U+2060-U+2064 (word joiner, invisible operators), U+FEFF. Names may hold
-- those (scripts and emoji need them); an id shown next to a name must not look like another.
function valid.player(s)
  if type(s) ~= 'string' or #s == 0 or #s > valid.MAX_ID_BYTES then
    return false
  end
  if not s:find('[%z\1-\31\127-\255]') then
    return true -- printable ASCII, the common case: one C-level scan
  end
  if s:find('\216\156') or s:find('\226\128[\139-\143]') or s:find('\226\129[\160-\164]')
      or s:find('\239\187\191') then
    return false
  end
  return valid.plain_text(s)
end

-- A non-negative integer written in plain decimal digits; anything else (sign, point,
-- exponent, nan, inf, hex) is refused before tonumber can be lenient about it.
function valid.parse_uint(s, max_digits)
  if type(s) ~= 'string' or #s == 0 or #s > max_digits or not s:match('^%d+$') then
    return nil
  end
  return tonumber(s)
end

-- The journal of state changes the submissions log does not carry (operator actions, profiles,
-- tournaments, closes): appended in the same atomic call as the change, so whoever made it
-- cannot leave it out. The scorer records the entries in the durable log and trims them
-- (scorer/journal.py); the cap only bounds a journal nobody records: changes are rare next to
-- submissions. 'at' is Redis's clock in microseconds, the clock of the log's 'applied' order.
local JOURNAL_MAXLEN = 100000

local function journal(key, fn, ...)
  local t = redis.call('TIME')
  redis.call('XADD', key, 'MAXLEN', '~', JOURNAL_MAXLEN, '*', 'fn', fn,
    'at', t[1] .. string.format('%06d', tonumber(t[2])), 'args', cjson.encode({ ... }))
end

-- How a call refuses (the header's "Errors"): a whole call with 'ERR <code> <message>', raised in
-- Python as leaderboard/errors.py's exception tree; one slip of a batch with its entry.
local function refuse(code, message)
  return redis.error_reply('ERR ' .. code .. ' ' .. message)
end

local function entry_error(code, message)
  return { 'error', code, message }
end

-- A function whose arguments another release lays out otherwise carries its call's layout first
-- (lb_ban, lb_correct, lb_close): a call of another layout is refused whole, before anything is
-- read or written (errors.LibraryMismatch); nil when it is this library's.
function valid.other_layout(got, want, fn)
  if got == want then
    return nil
  end
  return refuse('library_mismatch', 'the function library reads layout ' .. want .. ' of ' .. fn
    .. "'s call; this call is another release's")
end

-- A submission id: UTF-8 of 1 to MAX_ID_BYTES, without C0 control characters or DEL (the
-- activity entry joins ids with newlines: flush_activity); nil, or the entry error.
function valid.submission_id(id)
  if id == '' then
    return entry_error('missing_id', 'submission id is required')
  end
  if #id > valid.MAX_ID_BYTES or id:find('[%z\1-\31\127]') or not valid.utf8(id) then
    return entry_error('invalid_id', 'submission id must be valid UTF-8 of at most ' .. valid.MAX_ID_BYTES .. ' bytes, without control characters')
  end
end
