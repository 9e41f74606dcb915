#!lua name=leaderboard
--[[
Live leaderboard function library: atomic score submissions and read paths.

Key schema (every key of one game carries the hash tag {game}, so a Cluster keeps them in one
slot; the names are built by leaderboard/keys.py and reach every function through KEYS):

  lb:{g}:board:<window>:<period>:<scope>   ZSET    player -> packed score (points and time)
  lb:{g}:hist:<window>:<period>:<scope>    HASH    points bucket -> members of the board in it
  lb:{g}:points:<window>:<period>:<scope>  ZSET    each distinct points value on the board (member
                                                   and score: the value); dense-mode windows only;
                                                   on a lex board each distinct key part (score 0)
  lb:{g}:members:<window>:<period>:<scope> HASH    player -> member of a lex board (scope board:<id>)
  lb:{g}:meta:<window>:<period>:<scope>    HASH    player -> entry metadata of a defined board
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
  lb:{g}:scopes                            SET     every region and mode value ("region:eu") slips
                                                   named: at most max_scopes (LB_MAX_SCOPES)
  lb:{g}:submissions                       STREAM  the queue: entries not yet applied and acked (and
                                                   acked ones newer than a pending one, until lb_ack
                                                   trims them); an entry is the slip (id, player,
                                                   points, ts, name joined by tabs) and the optional
                                                   fields set, or (earlier releases) fields by name
  lb:{g}:queued                            SET     submission ids in the queue: lb_enqueue adds, the
                                                   scorer removes when it acknowledges them
  lb:{g}:bodies:<hour>                     HASH    submission id -> fingerprint of the request body it
                                                   was first filed with (the HTTP API's), bucketed by
                                                   the hour lb_enqueue took it; kept as long as seen
  lb:{g}:deadletters                       STREAM  slips the scorer refused: their fields and dead.id,
                                                   dead.code, dead.message, dead.at, dead.by (scorer)
  lb:{g}:refused:<hour>                    HASH    submission id -> "<code> <message>" of the
                                                   slips refused in that hour (scorer; EXPIREAT)
  lb:{g}:publisher                         STRING  the publish lease: the holder's owner token (PX)
  lb:{g}:published                         HASH    "<window>:<scope>" -> "<period>:<version>" last
                                                   published
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
  lb:{g}:journal                           STREAM  one entry per change of lb_ban, lb_unban,
                                                   lb_correct, lb_correct_defined, lb_profile, lb_tournament, lb_join,
                                                   lb_close, lb_board_put, lb_board_delete (and first badge awards, from the badge
                                                   worker): {fn, at (Redis TIME, us), args (JSON
                                                   array)}; the durable log's recorder deletes what
                                                   it recorded (MAXLEN ~ JOURNAL_MAXLEN)

A tournament is a window of its own, t-<id>, with one period labelled <id>: its boards, versions,
channels and latest snapshots are those of any window.

Channels (sharded pub/sub: SPUBLISH, received with SSUBSCRIBE; on a Cluster a channel lives on
the shard owning its slot, the game's, and on a single server it works the same):

  lb:{g}:snap:<window>:<scope>             snapshot JSON of the board's current period
  lb:{g}:announce                          {"type":"announce",...} when a player enters a top N
  lb:{g}:replay                            the same, from a rebuild replaying history (nobody
                                           listens: the caller names the channel in ARGV)

Functions (each documented where it is defined; Python wrappers in leaderboard/library.py):

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
  lb_top          top N with profiles (no-writes)       a board, profiles
  lb_around       entries around a player (no-writes)   a board, its points, profiles
  lb_ranks        ranks of listed players (no-writes)   a board, its points and hist
  lb_close        a period's close event, once          closedmark, closed, finals, versions,
                                                        journal; boards (read)
  lb_close_board  a defined board period's close event  its closedmark, closed, its finals,
                  (its own periods), once               versions, journal; the board and its
                                                        metadata (read)
  lb_tournament   create a tournament                   tournaments, journal
  lb_join         enter players in a tournament         tournaments (read), entrants, journal
  lb_ban          remove a player, leave a tombstone    banned, versions, activity, journal, the
                                                        boards given and their histograms and points
                                                        sets
  lb_ban_defined  remove a player from defined boards    versions, the boards given and their
                                                        members, points sets, metadata, histograms
  lb_unban        lift a ban                            banned, activity, journal
  lb_correct      set a player's points, with reason    banned (read), versions, activity, journal,
                                                        the boards given and their histograms and
                                                        points sets
  lb_correct_defined set or remove a player's entry on   banned (read), versions, activity, journal,
                  defined boards, with reason           the boards given and their members, points
                                                        sets, metadata, histograms
  lb_profile      set a player's profile fields         profiles, versions, journal, the boards
                                                        given (read)
  lb_rank_rebuild rebuild a board's companions          a board, its points and hist
  lb_board_put    create or update a board definition   boards, boardsver, journal, deletedboards
  lb_board_delete delete a board definition             boards, boardsver, journal, deletedboards

Score packing (see docs/data-model.md): score = points * 2^k + (2^k - 1 - t), where t is the
time since the window's start in the window's tie unit. An earlier arrival at the same points
leaves a larger remainder and so ranks higher. k and the unit come from the caller per window;
points must stay below 2^(53 - k) so the packed value is an exact double.

Rank modes (see leaderboard/ranking.py): ordinal (ties by time, ZREVRANK), competition (1 + members
with strictly more points: one ZCOUNT on the board), dense (1 + distinct points values above: one
ZCOUNT on the board's points set). Reads take the mode as an argument; no read scans the board.

Errors, one way per scope (refuse and entry_error below), with the codes of leaderboard/errors.py:
- a call that cannot run answers 'ERR <code> <message>' and writes nothing: bad_request
  (malformed input), library_mismatch (lb_submit: a call laid out by another release),
  backlog_full, unknown_tournament, tournament_exists, tournament_ended, banned,
  points_out_of_range, and the input codes of the moderation, profile and entry functions:
  invalid_player, invalid_actor, invalid_reason, invalid_points, invalid_name, invalid_avatar,
  invalid_country; the board definition functions' invalid_board, board_exists, unknown_board,
  stale_board;
- one submission of a batch that cannot apply answers {'error', code, message} for that entry
  only and writes nothing for it: missing_id, invalid_id, banned, invalid_player, invalid_name,
  invalid_points, invalid_operator, invalid_timestamp, timestamp_in_future, timestamp_too_old,
  timestamp_outside_window, not_entered (a tournament slip of a player not entered),
  period_closed (a slip of a closed period), too_many_scopes (past max_scopes),
  points_out_of_range; a defined board's slip: wrong_key_count, invalid_key_value,
  key_out_of_range, metadata_too_large.

Player ids, wherever they come in (lb_submit, lb_join, lb_ban, lb_unban, lb_correct, lb_profile),
follow one rule, valid_player: 1-64 bytes of UTF-8 without control, bidirectional or invisible
characters (leaderboard/profiles.py is_player_id is the same).
]]

local MAX_ID_BYTES = 64
local MAX_NAME_BYTES = 64
local PLAYER_RULE = 'player must be 1-' .. MAX_ID_BYTES .. ' bytes of UTF-8 without control, bidirectional or invisible characters'
local VALID_OPS = { best = true, incr = true, set = true }

-- Local helpers ---------------------------------------------------------------------------

local function valid_utf8(s)
  if not s:find('[\128-\255]') then
    return true -- plain ASCII, the common case: one C-level scan instead of a Lua loop per byte
  end
  local i, n = 1, #s
  while i <= n do
    local c = s:byte(i)
    local extra
    if c < 0x80 then
      extra = 0
    elseif c >= 0xC2 and c <= 0xDF then
      extra = 1
    elseif c >= 0xE0 and c <= 0xEF then
      extra = 2
    elseif c >= 0xF0 and c <= 0xF4 then
      extra = 3
    else
      return false
    end
    if i + extra > n then
      return false
    end
    for j = i + 1, i + extra do
      local cc = s:byte(j)
      if cc < 0x80 or cc > 0xBF then
        return false
      end
    end
    -- reject overlong three/four-byte forms, UTF-16 surrogates and code points past U+10FFFF
    if extra == 2 then
      local c2 = s:byte(i + 1)
      if (c == 0xE0 and c2 < 0xA0) or (c == 0xED and c2 > 0x9F) then
        return false
      end
    elseif extra == 3 then
      local c2 = s:byte(i + 1)
      if (c == 0xF0 and c2 < 0x90) or (c == 0xF4 and c2 > 0x8F) then
        return false
      end
    end
    i = i + extra + 1
  end
  return true
end

-- Valid UTF-8 without control characters: C0, DEL, C1, the line and paragraph separators and
-- the bidirectional overrides and isolates (they would reorder the text around a name on a
-- page). leaderboard/profiles.py applies the same rules before the call.
local function plain_text(s)
  if s:find('[%z\1-\31\127]') or s:find('\194[\128-\159]') or s:find('\226\128[\168-\174]')
      or s:find('\226\129[\166-\169]') then
    return false
  end
  return valid_utf8(s)
end

-- The player id rule, its one definition here (leaderboard/profiles.py is_player_id is the same,
-- tests/test_player_ids.py holds them equal): 1-64 bytes of plain text (above) without the code
-- points that show nothing either: U+061C, U+200B-U+200F (zero-width space, non-joiner, joiner,
-- the direction marks), U+2060-U+2064 (word joiner, invisible operators), U+FEFF. Names may hold
-- those (scripts and emoji need them); an id shown next to a name must not look like another.
local function valid_player(s)
  if type(s) ~= 'string' or #s == 0 or #s > MAX_ID_BYTES then
    return false
  end
  if not s:find('[%z\1-\31\127-\255]') then
    return true -- printable ASCII, the common case: one C-level scan
  end
  if s:find('\216\156') or s:find('\226\128[\139-\143]') or s:find('\226\129[\160-\164]')
      or s:find('\239\187\191') then
    return false
  end
  return plain_text(s)
end

-- A non-negative integer written in plain decimal digits; anything else (sign, point,
-- exponent, nan, inf, hex) is refused before tonumber can be lenient about it.
local function parse_uint(s, max_digits)
  if type(s) ~= 'string' or #s == 0 or #s > max_digits or not s:match('^%d+$') then
    return nil
  end
  return tonumber(s)
end

-- The journal of state changes the submissions log does not carry (operator actions, profiles,
-- tournaments, closes): one entry per change, appended in the same atomic call as the change, so
-- whoever made it (a scorer command, a gateway's server-role request) cannot leave it out. The
-- scorer records the entries in the durable log and acknowledges them, trimming what is recorded
-- (scorer/journal.py, lb_ack); the cap
-- only bounds a journal nobody records (no durable log configured): changes are rare next to
-- submissions. 'at' is Redis's clock in microseconds, the clock of the log's 'applied' order.
local JOURNAL_MAXLEN = 100000

local function journal(key, fn, ...)
  local t = redis.call('TIME')
  redis.call('XADD', key, 'MAXLEN', '~', JOURNAL_MAXLEN, '*', 'fn', fn,
    'at', t[1] .. string.format('%06d', tonumber(t[2])), 'args', cjson.encode({ ... }))
end

-- How a call refuses, one way per scope. A whole call that cannot run (malformed input, a full
-- queue, an operator's bad argument) answers an error reply 'ERR <code> <message>', which the
-- Python side raises as the exception tree of leaderboard/errors.py; it wrote nothing. One
-- submission of a batch that cannot apply answers its own entry {'error', code, message} and
-- writes nothing for it; the batch goes on.
local function refuse(code, message)
  return redis.error_reply('ERR ' .. code .. ' ' .. message)
end

local function entry_error(code, message)
  return { 'error', code, message }
end

-- An id: UTF-8 of at most MAX_ID_BYTES, without C0 control characters or DEL (the activity
-- entry joins ids with newlines: flush_activity).
local function text_field(value, what, code, required)
  if value == '' then
    if required then
      return entry_error(code, what .. ' is required')
    end
    return nil
  end
  if #value > MAX_ID_BYTES or value:find('[%z\1-\31\127]') or not valid_utf8(value) then
    return entry_error(code, what .. ' must be valid UTF-8 of at most ' .. MAX_ID_BYTES .. ' bytes, without control characters')
  end
  return nil
end

-- Rank modes, histogram and distinct points ------------------------------------------------
-- A board has companions, kept in the same atomic write as the board (board_score_changed): always
-- a histogram (HASH bucket -> members) for approximate deep ranks, and in dense mode only a set of
-- its distinct points values (ZSET value -> value): on a board where nearly every member has its own
-- points value that set costs about two thirds of the board's memory. ranking.py has the same buckets.

local RANK_MODES = { ordinal = true, dense = true, competition = true }
local SUB_BUCKETS = 16 -- buckets per power of two: each spans at most 1/16 of its lower bound

-- Integer-exact (doubles below 2^53): frexp gives points = m * 2^ex with m in [0.5, 1), so the
-- power of two is ex - 1 and the place inside it (points - 2^(ex-1)) * 16 / 2^(ex-1) is
-- 32m - 16, exact (a scaling by a power of two and a subtraction inside [16, 32)); x - x % 1 is
-- its floor, without a call.
local function bucket_of(points)
  if points <= 0 then
    return 0
  end
  local m, ex = math.frexp(points)
  local place = 2 * SUB_BUCKETS * m - SUB_BUCKETS
  return 1 + (ex - 1) * SUB_BUCKETS + (place - place % 1)
end

-- The points range [lo, hi) of a bucket.
local function bucket_bounds(b)
  if b == 0 then
    return 0, 1
  end
  local e, sub = math.floor((b - 1) / SUB_BUCKETS), (b - 1) % SUB_BUCKETS
  local base = 2 ^ e
  local hi = sub == SUB_BUCKETS - 1 and 2 * base or base + math.ceil((sub + 1) * base / SUB_BUCKETS)
  return base + math.ceil(sub * base / SUB_BUCKETS), hi
end

local function fmt_points(points)
  return string.format('%d', points)
end

-- The score encoding, its one place (the header's "Score packing"): points and the time since the
-- period's start, in the window's tie unit, packed into one exact double, and the points read
-- back. lowest_score is the smallest packed score holding `points`, so the scores holding exactly
-- `points` are [lowest_score(points), lowest_score(points + 1) - 1].
local function pack_score(points, t, scale)
  return points * scale + (scale - 1 - t)
end

local function score_points(score, scale)
  return math.floor(score / scale)
end

local function lowest_score(points, scale)
  return points * scale
end

--[[ board_score_changed: keep a board's histogram and distinct points right after a member's
packed score went from old to new (either nil: the member was added or removed). Call it AFTER the
board itself was written (ZADD / ZREM): whether the old points value is still held by someone is
read from the board. points_key: the board's points set in dense mode, nil otherwise. O(1) for the
histogram, O(log N) for the points set; nothing when the points stay the same (only the time part
moved). Any function that moves scores (submit, a correction, a ban) calls it, so dense ranks and
the histogram stay exact. `deltas` (lb_submit's batch): the histogram's changes are added up there
and written at the end of the batch (flush_histograms: three calls per histogram) instead of two
HINCRBYs per write; nothing in the batch reads the histogram in between. In a batch the board's
own write may still wait (held_board): only the dense mode's count reads the board, and its
caller flushes first.
]]
local function board_score_changed(board_key, hist_key, points_key, scale, old, new, deltas)
  local old_points = old and score_points(old, scale) or nil
  local new_points = new and score_points(new, scale) or nil
  if old_points == new_points then
    return
  end
  if new_points and points_key then
    redis.call('ZADD', points_key, new_points, fmt_points(new_points))
  end
  local old_bucket, new_bucket = old_points and bucket_of(old_points), new_points and bucket_of(new_points)
  if new_bucket ~= old_bucket then
    if deltas then
      local d = deltas[hist_key]
      if not d then
        d = {}
        deltas[hist_key] = d
        deltas[#deltas + 1] = hist_key -- written in first-touched order
      end
      if new_bucket then
        d[new_bucket] = (d[new_bucket] or 0) + 1
      end
      if old_bucket then
        d[old_bucket] = (d[old_bucket] or 0) - 1
      end
    else
      if new_bucket then
        redis.call('HINCRBY', hist_key, new_bucket, 1)
      end
      if old_bucket and redis.call('HINCRBY', hist_key, old_bucket, -1) <= 0 then
        redis.call('HDEL', hist_key, old_bucket)
      end
    end
  end
  if old_points and points_key and redis.call('ZCOUNT', board_key, lowest_score(old_points, scale), lowest_score(old_points + 1, scale) - 1) == 0 then
    redis.call('ZREM', points_key, fmt_points(old_points))
  end
end

-- The rank of a member holding `points`, in `mode`, given its ordinal rank (1-based).
local function mode_rank(board_key, points_key, scale, mode, points, ordinal)
  if mode == 'competition' then
    return redis.call('ZCOUNT', board_key, lowest_score(points + 1, scale), '+inf') + 1
  elseif mode == 'dense' then
    return redis.call('ZCOUNT', points_key, '(' .. fmt_points(points), '+inf') + 1
  end
  return ordinal
end

-- The histogram read once per call: for each bucket present, how many members sit in buckets
-- above it. O(B log B) for B buckets (at most 16 per power of two), then O(1) per player. The
-- board's best and worst points bound the top and bottom buckets: those are often filled only in
-- part, and spreading their members over the whole bucket would misplace them.
local function read_histogram(hist_key, board_key, scale)
  local best = redis.call('ZRANGE', board_key, -1, -1, 'WITHSCORES')
  local worst = redis.call('ZRANGE', board_key, 0, 0, 'WITHSCORES')
  if not best[2] then
    return nil
  end
  local flat = redis.call('HGETALL', hist_key)
  local buckets, counts = {}, {}
  for i = 1, #flat, 2 do
    local b = tonumber(flat[i])
    buckets[#buckets + 1] = b
    counts[b] = tonumber(flat[i + 1])
  end
  table.sort(buckets, function(x, y) return x > y end)
  local above, acc = {}, 0
  for _, b in ipairs(buckets) do
    above[b] = acc
    acc = acc + counts[b]
  end
  return {
    above = above, counts = counts,
    best = score_points(tonumber(best[2]), scale), worst = score_points(tonumber(worst[2]), scale),
  }
end

-- Approximate ordinal rank of a member with `points`: the members of every bucket above, plus its
-- place inside its own bucket estimated as if the bucket's members were spread evenly over the
-- bucket's points range. nil when the histogram does not know the bucket.
local function approx_rank(hist, points)
  local b = bucket_of(points)
  local count = hist.counts[b]
  if not count then
    return nil
  end
  local lo, hi = bucket_bounds(b)
  hi, lo = math.min(hi, hist.best + 1), math.max(lo, hist.worst)
  local inside = math.ceil(count * (hi - points) / (hi - lo))
  return hist.above[b] + math.max(1, math.min(count, inside))
end

-- Argument readers --------------------------------------------------------------------------

-- lb_submit's records, each read into locals named as lb_submit's Input names its fields.
local SETTINGS_FIELDS, PERIOD_FIELDS, LAYOUT_FIELDS, BOARD_FIELDS, SUBMISSION_FIELDS, FULL_FIELDS = 9, 11, 4, 9, 2, 9
-- The call layout lb_submit reads (leaderboard/batch.py's SUBMIT_LAYOUT): another is refused whole.
local SUBMIT_LAYOUT = '2'
-- A slip's parts (SLIP_PARTS): printable ASCII id and player and digits, as the common path takes
-- them (one scan checks all four), else any text between the tabs (the general path checks it).
local COMMON_SLIP, ANY_SLIP = '^([ -~]+)\t([ -~]+)\t(%d+)\t(%d+)\t(.*)$', '^([^\t]*)\t([^\t]*)\t([^\t]*)\t([^\t]*)\t(.*)$'

-- The period records: a count at pos, then the records. Both readers return nil for a malformed
-- record, so the call is refused before its first write.
local function read_periods(keys, args, pos)
  local periods, count = {}, tonumber(args[pos]) or 0
  pos = pos + 1
  for p = 1, count do
    local window, label, start_ms, end_ms, shift, unit_ms, expire_at, players_key, entrants_key, mode, closed_key =
      unpack(args, pos, pos + PERIOD_FIELDS - 1)
    start_ms, end_ms, shift, unit_ms = tonumber(start_ms), tonumber(end_ms), tonumber(shift), tonumber(unit_ms)
    expire_at, players_key = tonumber(expire_at), tonumber(players_key)
    entrants_key, closed_key = tonumber(entrants_key), tonumber(closed_key)
    if not (window and label and start_ms and end_ms and shift and unit_ms and expire_at and keys[players_key]
        and entrants_key and (entrants_key == 0 or keys[entrants_key]) and RANK_MODES[mode]
        and closed_key and (closed_key == 0 or keys[closed_key])) then
      return nil
    end
    periods[p] = {
      window = window,
      label = label,
      start_ms = start_ms,
      end_ms = end_ms,
      scale = 2 ^ shift,
      max_points = 2 ^ (53 - shift) - 1,
      unit_ms = unit_ms,
      expire_at = expire_at,
      hll = keys[players_key],
      entrants = entrants_key ~= 0 and keys[entrants_key] or nil,
      mode = mode,
      marker = closed_key ~= 0 and keys[closed_key] or nil,
      players = {}, listed = {}, -- applied in this batch, each once, for the distinct-player log
    }
    pos = pos + PERIOD_FIELDS
  end
  return periods, pos
end

-- The layout records (what submissions write to, shared by every submission of the batch with
-- the same boards and seen-id bucket): a count at pos, then each layout followed by its boards.
local function read_layouts(keys, periods, args, pos, defs)
  local layouts, count = {}, tonumber(args[pos]) or 0
  pos = pos + 1
  for l = 1, count do
    local seen_key, outcomes_key, seen_expire_at, board_count = unpack(args, pos, pos + LAYOUT_FIELDS - 1)
    local layout = { seen = keys[tonumber(seen_key)], outcomes = keys[tonumber(outcomes_key)],
      seen_expire_at = seen_expire_at, refs = {} }
    board_count = tonumber(board_count)
    if not (layout.seen and layout.outcomes and parse_uint(seen_expire_at, 12) and board_count) then
      return nil
    end
    pos = pos + LAYOUT_FIELDS
    for b = 1, board_count do
      local board_key, period, op, scope, hist_key, points_key, definition, members_key, meta_key =
        unpack(args, pos, pos + BOARD_FIELDS - 1)
      local ref = { key = tonumber(board_key), period = tonumber(period), op = op, scope = scope,
        hist = keys[tonumber(hist_key)], pts = keys[tonumber(points_key)], members = tonumber(members_key),
        meta = tonumber(meta_key) }
      if not (ref.key and keys[ref.key] and periods[ref.period] and ref.op and ref.scope and ref.hist and ref.pts) then
        return nil
      end
      definition = tonumber(definition)
      if definition and definition > 0 then -- a defined board's: its definition, members and metadata
        layout.def = defs[definition]
        if not (layout.def and keys[ref.members] and keys[ref.meta]) then
          return nil
        end
      end
      layout.refs[b] = ref
      pos = pos + BOARD_FIELDS
    end
    layouts[l] = layout
  end
  return layouts, pos
end

-- Defined boards: lex members ---------------------------------------------------------------
-- A board whose definition does not fit one exact double (leaderboard/boards.py: several keys,
-- negative values, the int64 range) keeps every member at score 0, so Redis orders the board by
-- the member itself, bytewise: per key 16 hex digits of the value with its sign bit flipped
-- (unsigned order is then signed order), complemented for a desc key; 12 hex digits of the time
-- it was reached (complemented for tie 'last'); the player id. Ascending order is best first:
-- rank = HGET (player -> member) + ZRANK, top = ZRANGE 0 N-1, competition rank = ZLEXCOUNT of
-- the members before the key part, dense rank = the same on the set of distinct key parts.
-- Lua numbers are doubles: a value is carried as two 32-bit halves (hi, lo) of its two's
-- complement, parsed from its decimal text and added without ever being one double.

local TWO32, TWO31 = 4294967296, 2147483648
local KEY_HEX, TIME_HEX = 16, 12
local TIME_SPAN = 2 ^ 48 - 1

-- '-9223372036854775808' .. '9223372036854775807' -> hi, lo; nil for anything else. Every step
-- stays below 2^37, exact in a double.
local function int64_parse(s)
  if type(s) ~= 'string' then
    return nil
  end
  local sign, digits = s:match('^(%-?)0*(%d+)$')
  if not digits or #digits > 19 then
    return nil
  end
  local hi, lo = 0, 0
  for i = 1, #digits do
    local t = lo * 10 + digits:byte(i) - 48
    local carry = math.floor(t / TWO32)
    lo, hi = t - carry * TWO32, hi * 10 + carry
    if hi >= TWO32 then
      return nil
    end
  end
  if sign == '' then
    if hi >= TWO31 then
      return nil
    end
    return hi, lo
  end
  if hi > TWO31 or (hi == TWO31 and lo > 0) then
    return nil
  end
  if lo == 0 then
    return (TWO32 - hi) % TWO32, 0
  end
  return TWO32 - 1 - hi, TWO32 - lo
end

local function int64_format(hi, lo)
  local sign = ''
  if hi >= TWO31 then -- negative: format the magnitude (two's complement negation)
    sign = '-'
    if lo == 0 then
      hi = (TWO32 - hi) % TWO32
    else
      hi, lo = TWO32 - 1 - hi, TWO32 - lo
    end
  end
  if hi == 0 then
    return sign .. string.format('%d', lo)
  end
  local digits = {}
  while hi > 0 or lo > 0 do
    local r = hi % 10
    local t = r * TWO32 + lo
    local d = t % 10
    hi, lo = (hi - r) / 10, (t - d) / 10
    digits[#digits + 1] = string.char(48 + d)
  end
  return sign .. string.reverse(table.concat(digits))
end

-- a + b, or nil when the sum leaves int64
local function int64_add(ahi, alo, bhi, blo)
  local lo = alo + blo
  local carry = lo >= TWO32 and 1 or 0
  local hi = (ahi + bhi + carry) % TWO32
  local an = ahi >= TWO31
  if an == (bhi >= TWO31) and an ~= (hi >= TWO31) then
    return nil
  end
  return hi, lo - carry * TWO32
end

-- The 16 hex digits of one key: ascending text order is the key's best-first order.
local function key_hex(hi, lo, desc)
  hi = (hi + TWO31) % TWO32 -- the sign bit flipped
  if desc then
    hi, lo = TWO32 - 1 - hi, TWO32 - 1 - lo
  end
  return string.format('%08x%08x', hi, lo)
end

local function key_of_hex(text, desc)
  local hi, lo = tonumber(text:sub(1, 8), 16), tonumber(text:sub(9, 16), 16)
  if desc then
    hi, lo = TWO32 - 1 - hi, TWO32 - 1 - lo
  end
  return (hi + TWO31) % TWO32, lo
end

local function time_hex(ts, last)
  return string.format('%012x', last and TIME_SPAN - ts or ts)
end

-- A member's rank in a mode: ordinal by its place, competition by the members before its key
-- part, dense by the distinct key parts before it. Every count is O(log N).
local function lex_rank(board, distinct, mode, member, key_len)
  if mode == 'ordinal' then
    return redis.call('ZRANK', board, member) + 1
  end
  local before = '(' .. member:sub(1, key_len)
  if mode == 'competition' then
    return redis.call('ZLEXCOUNT', board, '-', before) + 1
  end
  return redis.call('ZLEXCOUNT', distinct, '-', before) + 1
end

-- {member, profile JSON or false, metadata or false} per member, flat
local function lex_entries(profiles, meta, members, key_len)
  local out, players = {}, {}
  for i, member in ipairs(members) do
    players[i] = member:sub(key_len + TIME_HEX + 1)
  end
  if #players == 0 then
    return out
  end
  local found = redis.call('HMGET', profiles, unpack(players))
  local extra = redis.call('HMGET', meta, unpack(players))
  for i, member in ipairs(members) do
    out[#out + 1] = member
    out[#out + 1] = found[i] or false
    out[#out + 1] = extra[i] or false
  end
  return out
end

local function lex_key_len(text)
  local n = parse_uint(text, 1)
  return n and n >= 1 and n <= 5 and n * KEY_HEX or nil
end

-- Closed periods and the scope cap, each read once per batch --------------------------------

-- A period whose close event was added (lb_close sets its marker in the same call): its finals
-- are published, so no later slip may change its boards. Read once per period per batch.
local function period_closed(period)
  if period.marker and period.closed == nil then
    period.closed = redis.call('EXISTS', period.marker) == 1
  end
  return period.closed
end

-- The scopes set holds every region and mode value the game's slips named; a new one is added
-- by the slip that names it (record_scopes, after its plan), unless the set holds max_scopes.
local function known_scope(ctx, scope)
  local known = ctx.known[scope]
  if known == nil then
    known = redis.call('SISMEMBER', ctx.scopes, scope) == 1
    ctx.known[scope] = known
  end
  return known
end

local function scope_count(ctx)
  if not ctx.scope_count then
    ctx.scope_count = redis.call('SCARD', ctx.scopes)
  end
  return ctx.scope_count
end

local function record_scopes(ctx, scopes)
  for scope in pairs(scopes) do
    ctx.scope_count = scope_count(ctx) + redis.call('SADD', ctx.scopes, scope)
    ctx.known[scope] = true
  end
end

-- Reads made once per batch ----------------------------------------------------------------

-- Which of `items` a set (SMISMEMBER) or a hash (HMGET) holds, as a table item -> true: one call
-- per 1,000 items (unpack() is bounded by Lua's C stack) instead of one per submission.
local function held(command, key, items)
  local found = {}
  for i = 1, #items, 1000 do
    local last = math.min(i + 999, #items)
    local replies = redis.call(command, key, unpack(items, i, last))
    for j = 1, last - i + 1 do
      local reply = replies[j]
      if reply and reply ~= 0 then
        found[items[i + j - 1]] = true
      end
    end
  end
  return found
end

-- The batch's banned players (a set, as held's). Most games hold a few tombstones or none: a
-- tombstone hash with fewer fields than the batch has players is read whole (HKEYS) rather than
-- asked about each player (HMGET).
local function banned_among(key, players)
  local count = redis.call('HLEN', key)
  if count >= #players then
    return held('HMGET', key, players)
  end
  local found = {}
  if count > 0 then
    for _, player in ipairs(redis.call('HKEYS', key)) do
      found[player] = true
    end
  end
  return found
end

-- A tournament's entrants among the batch's players, read once per batch (the list never
-- shrinks while its tournament runs, and nothing in the batch adds to it).
local function entered(ctx, period)
  local found = period.entered
  if not found then
    found = held('SMISMEMBER', period.entrants, ctx.players)
    period.entered = found
  end
  return found[ctx.player] == true
end

-- A tournament slip of a defined board (plan_defined) whose player is not entered: the entry
-- error, as plan_submission refuses the game's boards' tournament slips; nil otherwise.
local function tournament_refusal(ctx, period, player)
  ctx.player = player
  if period.entrants and not entered(ctx, period) then
    return entry_error('not_entered', 'player is not entered in tournament ' .. period.label)
  end
end

-- The batch's boards, by key -----------------------------------------------------------------
-- Each board key the batch writes to has one record (ctx.held): its members' scores, read with one
-- ZMSCORE per layout's players the first time a slip of that layout plans on it (a player already
-- held keeps the batch's own view, which includes its deferred writes), and the batch's writes
-- to it gathered into one multi-member ZADD. Anything that reads the key itself (a rank, the
-- N-th score, a count) flushes those writes first, so it sees exactly what a ZADD per slip
-- left; the rest are flushed at the end of the batch. A member written twice keeps one pair,
-- the latest score: the board's final order depends only on the final scores.
local function held_board(ctx, key, layout)
  local held = ctx.held[key]
  if not held then
    held = { scores = {}, read = {}, pending = { n = 0 } }
    ctx.held[key] = held
    ctx.held[#ctx.held + 1] = key -- flushed in first-touched order
  end
  if not held.read[layout] then
    held.read[layout] = true
    local players, scores = layout.players, held.scores
    for i = 1, #players, 1000 do -- unpack() is bounded by Lua's C stack
      local last = math.min(i + 999, #players)
      local replies = redis.call('ZMSCORE', key, unpack(players, i, last))
      for j = 1, last - i + 1 do
        local player = players[i + j - 1]
        if scores[player] == nil then
          local score = replies[j]
          scores[player] = score and tonumber(score) or false
        end
      end
    end
  end
  return held
end

-- A write to the board, deferred until the key is read or the batch ends: the member's score
-- kept and the member listed in pending (its length in pending.n: an append costs less than a
-- new key in a growing hash). A member written twice is listed twice, and written with its
-- latest score both times: the order of a ZADD's members does not change the board it leaves.
local function defer_write(held, player, score)
  held.scores[player] = score
  local pending = held.pending
  local n = pending.n + 1
  pending.n, pending[n] = n, player
end

-- Before any read of the key: its deferred writes, in ZADDs of at most 500 members (unpack() is
-- bounded by Lua's C stack).
local function flush_board(ctx, key)
  local held = ctx.held[key]
  if not (held and held.pending.n > 0) then
    return
  end
  local pending, scores, writes, n = held.pending, held.scores, {}, 0
  for i = 1, pending.n do
    local player = pending[i]
    writes[n + 1], writes[n + 2] = scores[player], player
    n = n + 2
    if n == 1000 then
      redis.call('ZADD', key, unpack(writes, 1, n))
      n = 0
    end
  end
  -- emptied in place (the next writes list over the old ones): apply_common's board records hold it
  pending.n = 0
  if n > 0 then
    redis.call('ZADD', key, unpack(writes, 1, n))
  end
end

-- A member's 0-based rank (ZREVRANK) on a board of the batch, its deferred writes flushed first.
-- A rank within the top N is kept until a write may move it (forget_ranks, at every write): the
-- players of the top submit most, and each of their slips reads its rank for the activity entry.
local function board_rank(ctx, key, player)
  local known = ctx.ranks[key]
  local rank = known and known[player]
  if rank then
    return rank
  end
  flush_board(ctx, key)
  rank = redis.call('ZREVRANK', key, player)
  if rank and rank < ctx.top_n then
    if not known then
      known = {}
      ctx.ranks[key] = known
    end
    known[player] = rank
  end
  return rank
end

-- A write of a member at `old` (nil: new) to `score`, given the N-th score before it (false:
-- fewer than N members): only one that stays below the N-th score moves no rank of the top N.
local function forget_ranks(ctx, key, nth, old, score)
  if nth == false or score >= nth or (old and old >= nth) then
    ctx.ranks[key] = nil
  end
end

-- At the end of the batch: every board's remaining writes, then the expiry of the boards it
-- wrote (EXPIREAT on a key not yet created would do nothing).
local function flush_boards(ctx)
  for _, key in ipairs(ctx.held) do
    flush_board(ctx, key)
    local expire_at = ctx.held[key].expire_at
    if expire_at then
      redis.call('EXPIREAT', key, expire_at, 'NX')
    end
  end
end

-- Per-submission validation and planning (no writes) ---------------------------------------

-- The checks every slip passes, whatever board it names: its player and name (check_slip: nil,
-- or the error triple), then, after its values, its operator and time (check_time: the
-- timestamp, or nil and the error).
local function check_slip(sub)
  if not valid_player(sub.player) then
    return entry_error('invalid_player', PLAYER_RULE)
  end
  if sub.name ~= '' and (#sub.name > MAX_NAME_BYTES or not plain_text(sub.name)) then
    return entry_error('invalid_name', 'name must be valid UTF-8 of at most ' .. MAX_NAME_BYTES .. ' bytes, without control characters')
  end
end

local function check_time(sub, ctx)
  if sub.op ~= '' and not VALID_OPS[sub.op] then
    return nil, entry_error('invalid_operator', 'operator must be best, incr or set')
  end
  local ts = parse_uint(sub.ts, 15)
  if ts == nil then
    return nil, entry_error('invalid_timestamp', 'timestamp must be integer milliseconds since the epoch')
  end
  if ts > ctx.now + ctx.skew then
    return nil, entry_error('timestamp_in_future', 'timestamp is ahead of the server clock')
  end
  if ts < ctx.now - ctx.max_age then
    return nil, entry_error('timestamp_too_old', 'timestamp is older than the idempotency window')
  end
  return ts
end

-- A layout board's record for the batch: what does not change from slip to slip, set once (a
-- record per layout and key, as the read).
local function layout_board(keys, ref, period, layout, ctx)
  local board = { key = keys[ref.key], hist = ref.hist, pts = ref.pts, period = period, scope = ref.scope,
    own_op = ref.op }
  board.held = held_board(ctx, board.key, layout)
  ref.board = board
  return board
end

-- Returns the points, the timestamp and the new scopes (nil: none) with the boards planned in
-- ctx.boards[1 .. #sub.layout.refs], or nil and an error triple. Every check happens here, before
-- any write, so a refused submission can never leave a partial update behind. Each layout board
-- has one record for the batch, reused from one submission to the next: a table per board per
-- slip was a measurable share of the call.
local function plan_submission(keys, sub, periods, ctx)
  local refused = check_slip(sub)
  if refused then
    return nil, refused
  end
  local points = parse_uint(sub.points, 16)
  if points == nil then
    return nil, entry_error('invalid_points', 'points must be a non-negative integer, got ' .. string.format('%q', sub.points:sub(1, 40)))
  end
  local ts, late = check_time(sub, ctx)
  if not ts then
    return nil, late
  end

  local boards, new_scopes, new_count = ctx.boards, nil, 0
  ctx.player = sub.player
  for b, ref in ipairs(sub.layout.refs) do
    local period = periods[ref.period]
    if ts < period.start_ms or ts >= period.end_ms then
      return nil, entry_error('timestamp_outside_window', 'timestamp is outside the ' .. period.window .. ' window ' .. period.label)
    end
    if period.entrants and not entered(ctx, period) then
      return nil, entry_error('not_entered', 'player is not entered in tournament ' .. period.label)
    end
    if period.closed or (period.closed == nil and period_closed(period)) then -- read once per batch
      return nil, entry_error('period_closed', 'the ' .. period.window .. ' period ' .. period.label .. ' is closed: its finals are published')
    end
    if ref.scope ~= 'global' and not (new_scopes and new_scopes[ref.scope]) and not known_scope(ctx, ref.scope) then
      if ctx.max_scopes > 0 and scope_count(ctx) + new_count >= ctx.max_scopes then
        return nil, entry_error('too_many_scopes', 'the game has ' .. ctx.max_scopes .. ' region and mode values (LB_MAX_SCOPES): ' .. ref.scope .. ' would be one more')
      end
      new_scopes = new_scopes or {}
      new_scopes[ref.scope], new_count = true, new_count + 1
    end
    local board = ref.board or layout_board(keys, ref, period, sub.layout, ctx)
    local op = sub.op ~= '' and sub.op or ref.op
    local scale = period.scale
    local old = board.held.scores[sub.player] or nil
    local total = points
    if op == 'incr' and old then
      total = score_points(old, scale) + points
    end
    if total > period.max_points then
      return nil, entry_error('points_out_of_range', 'points must stay below ' .. string.format('%d', period.max_points + 1) .. ' on the ' .. period.window .. ' board')
    end
    boards[b] = board
    board.op, board.old, board.total = op, old, total
    board.score = pack_score(total, math.floor((ts - period.start_ms) / period.unit_ms), scale)
  end
  return points, ts, new_scopes
end

-- Defined boards: a slip's key values and their writes --------------------------------------
-- A slip naming a defined board (leaderboard/boards.py) carries 1-5 key values as decimal int64
-- text ('12,-81250') and optional metadata; its layout's boards are that board's, one per window.
-- A packed definition is planned here and written by apply_board like any board; a lex one is
-- written by apply_lex (members, not scores).

-- The definition records of a batch (lb_submit's Input names their fields): a count at pos, then
-- the records.
local DEFINITION_FIELDS = 6

local function read_definitions(args, pos)
  local defs, count = {}, tonumber(args[pos]) or 0
  pos = pos + 1
  for d = 1, count do
    local encoding, tie, metadata_bytes, operator, key_spec, top_n = unpack(args, pos, pos + DEFINITION_FIELDS - 1)
    local def = { lex = encoding == 'lex', last = tie == 'last', meta_bytes = tonumber(metadata_bytes),
      per_key = operator == 'keys', op = operator, keys = {}, top_n = parse_uint(top_n, 3) }
    if not ((encoding == 'lex' or encoding == 'packed') and (tie == 'first' or tie == 'last') and def.meta_bytes
        and def.top_n
        and (def.per_key or VALID_OPS[operator]) and type(key_spec) == 'string') then
      return nil
    end
    for dir, op, lo, hi in key_spec:gmatch('([da]),(%a*),(%-?%d+),(%-?%d+)') do
      local lo_hi, lo_lo = int64_parse(lo)
      local hi_hi, hi_lo = int64_parse(hi)
      if not (lo_hi and hi_hi) or (op ~= '' and not VALID_OPS[op]) then
        return nil
      end
      def.keys[#def.keys + 1] = { desc = dir == 'd', op = op ~= '' and op or nil,
        min = key_hex(lo_hi, lo_lo, false), max = key_hex(hi_hi, hi_lo, false) }
    end
    if #def.keys < 1 or #def.keys > 5 then
      return nil
    end
    defs[d] = def
    pos = pos + DEFINITION_FIELDS
  end
  return defs, pos
end

-- A slip's key values as {hi, lo} pairs, or nil and the entry error.
local function slip_values(def, text)
  local values = {}
  for part in (text ~= '' and text .. ',' or ''):gmatch('([^,]*),') do
    values[#values + 1] = part
  end
  if #values ~= #def.keys then
    return nil, entry_error('wrong_key_count', 'the board takes ' .. #def.keys .. ' key value(s), got ' .. #values)
  end
  for i, part in ipairs(values) do
    if not part:match('^%-?%d+$') then
      return nil, entry_error('invalid_key_value', 'key values must be decimal integers, got ' .. string.format('%q', part:sub(1, 40)))
    end
    local hi, lo = int64_parse(part)
    local key = def.keys[i]
    local asc = hi and key_hex(hi, lo, false)
    if not hi or asc < key.min or asc > key.max then
      return nil, entry_error('key_out_of_range', 'key value ' .. i .. ' is outside int64 or the key\'s min..max')
    end
    values[i] = { hi, lo }
  end
  return values
end

-- The stored values after an incr, or a write under per-key operators, of `new` over `old`
-- (leaderboard/boards.py combine), or nil and the entry error when an incr leaves a key's
-- bounds. op: the slip's ('' = the board's).
local function combine_values(def, op, old, new)
  local tuple_op = not def.per_key and (op ~= '' and op or def.op)
  local out = {}
  for i, key in ipairs(def.keys) do
    local kop = tuple_op or (op ~= '' and op) or key.op or 'best'
    if kop == 'set' then
      out[i] = new[i]
    elseif kop == 'incr' then
      local hi, lo = int64_add(old[i][1], old[i][2], new[i][1], new[i][2])
      local asc = hi and key_hex(hi, lo, false)
      if not hi or asc < key.min or asc > key.max then
        return nil, entry_error('key_out_of_range', 'key value ' .. i .. ' would leave int64 or the key\'s min..max')
      end
      out[i] = { hi, lo }
    else
      local better = key_hex(new[i][1], new[i][2], key.desc) < key_hex(old[i][1], old[i][2], key.desc)
      out[i] = better and new[i] or old[i]
    end
  end
  return out
end

-- A lex member's key values ({hi, lo} each), and the key part of values.
local function lex_values(def, member)
  local out = {}
  for i, k in ipairs(def.keys) do
    out[i] = { key_of_hex(member:sub((i - 1) * KEY_HEX + 1, i * KEY_HEX), k.desc) }
  end
  return out
end

local function lex_prefix(def, values)
  local parts = {}
  for i, k in ipairs(def.keys) do
    parts[i] = key_hex(values[i][1], values[i][2], k.desc)
  end
  return table.concat(parts)
end

local function values_text(values)
  local parts = {}
  for i, v in ipairs(values) do
    parts[i] = int64_format(v[1], v[2])
  end
  return table.concat(parts, ',')
end

-- A planned lex write's first key value and all its values, as text (what rows and
-- announcements show), made only where they are shown: formatting int64 costs a loop per digit.
local function lex_texts(board)
  local v = board.member and board.stored or lex_values(board.def, board.old)
  return int64_format(v[1][1], v[1][2]), values_text(v)
end

-- apply_board for a lex board: improved, the rank and previous rank (0: not read), the first key
-- value as text ('' when no rows are asked for).
local function apply_lex(board, player, name, ctx, want)
  local key, member, period, old, top_n = board.key, board.member, board.period, board.old, board.top_n
  -- A defined slip's activity entry carries no rank (its points are not the game's), so a rank
  -- is read only for rows or a kept outcome ('all'), or where the top N needs it.
  local need_rank = want == 'all'
  if not member then -- the stored values stay: so does the time they were reached
    local rank = need_rank and old and redis.call('ZRANK', key, old)
    rank = rank and rank + 1 or 0
    return false, rank, rank, need_rank and (lex_texts(board)) or ''
  end
  -- Whether a member is in the top N is a comparison with the N-th member (read once per batch
  -- and again after the top N changed), not a ZRANK per write: members order as text.
  local nth = ctx.nth[key]
  if nth == nil then
    nth = redis.call('ZRANGE', key, top_n - 1, top_n - 1)[1] or false
    ctx.nth[key] = nth
  end
  local was_top = old and (nth == false or old <= nth)
  local prev = need_rank and old and redis.call('ZRANK', key, old)
  local dense = period.mode == 'dense' -- the distinct key parts serve dense ranks only
  if old then
    redis.call('ZREM', key, old)
    if dense and board.old_prefix ~= board.prefix
        and redis.call('ZLEXCOUNT', key, '[' .. board.old_prefix, '(' .. board.old_prefix .. 'g') == 0 then
      redis.call('ZREM', board.distinct, board.old_prefix) -- nobody holds those values any more
    end
  end
  redis.call('ZADD', key, 0, member)
  if dense then
    redis.call('ZADD', board.distinct, 0, board.prefix)
  end
  redis.call('HSET', board.members, player, member)
  if board.meta_value ~= '' then
    redis.call('HSET', board.meta, player, board.meta_value)
  end
  -- better than the N-th before the write: in the top N; worse, and it was in it: read its rank
  local rank = need_rank and redis.call('ZRANK', key, member)
  local now_top = nth == false or member < nth
  if not now_top and was_top then
    rank = rank or redis.call('ZRANK', key, member)
    now_top = rank < top_n
  end
  if was_top or now_top then
    redis.call('HINCRBY', ctx.versions, period.window .. ':' .. period.label .. ':' .. board.scope, 1)
    ctx.nth[key] = nil
  end
  local total, values = '', nil
  if need_rank or (now_top and not was_top) then
    total, values = lex_texts(board)
  end
  if now_top and not was_top then
    redis.call('SPUBLISH', ctx.announce, cjson.encode({
      type = 'announce', board = board.scope, window = period.window, period = period.label, player = player,
      name = name ~= '' and name or nil, rank = lex_rank(key, board.distinct, period.mode, member, #board.prefix),
      score = total, keys = values,
    }))
  end
  if period.expire_at > 0 and not ctx.expiring[key] then
    for _, k in ipairs({ key, board.members, board.distinct, board.meta }) do
      redis.call('EXPIREAT', k, period.expire_at, 'NX')
    end
    ctx.expiring[key] = true
  end
  return not old or board.prefix < board.old_prefix, rank and rank + 1 or 0, prev and prev + 1 or 0, total
end

-- One defined board's planned write (no writes here).
local function plan_defined_board(keys, ref, period, def, sub, values, new_prefix, ts, ctx)
  local key, op = keys[ref.key], sub.op ~= '' and sub.op or def.op
  local t = math.floor((ts - period.start_ms) / period.unit_ms)
  if not def.lex then
    local sign, scale, k = def.keys[1].desc and 1 or -1, period.scale, def.keys[1]
    local value = values[1][1] * TWO32 + values[1][2] -- below 2^53: a packed definition's bound
    local held = held_board(ctx, key, sub.layout)
    local old = held.scores[sub.player] or nil
    local total = value
    if op == 'incr' and old then
      total = sign * score_points(old, scale) + value
      local asc = key_hex(math.floor(total / TWO32), total % TWO32, false)
      if total < 0 or asc < k.min or asc > k.max then
        return nil, entry_error('key_out_of_range', 'key value 1 would leave the key\'s min..max')
      end
    end
    local score = pack_score(sign * total, def.last and scale - 1 - t or t, scale) -- tie last: later is better
    if op == 'incr' and old and value == 0 then
      score = old -- adding zero: keep the time the total was first reached
    end
    return { key = key, held = held, hist = ref.hist, pts = ref.pts, period = period, scope = ref.scope, op = op, old = old,
      total = total, score = score, top_n = def.top_n, meta = keys[ref.meta], meta_value = sub.meta }
  end
  local members = keys[ref.members]
  local old = redis.call('HGET', members, sub.player)
  local stored, prefix, write = values, new_prefix, true
  local key_len = #def.keys * KEY_HEX
  local tuple_op = not def.per_key and (sub.op ~= '' and sub.op or def.op)
  if old and tuple_op ~= 'best' and tuple_op ~= 'set' then -- incr, or per-key operators
    local failure
    stored, failure = combine_values(def, sub.op, lex_values(def, old), values)
    if not stored then
      return nil, failure
    end
    prefix = lex_prefix(def, stored)
  end
  local head = prefix .. time_hex(ts, def.last)
  if old then
    -- best and set weigh the time with the values, as the board orders them (a packed board's
    -- score holds both); incr and per-key operators move the time when the values change
    local old_head = old:sub(1, key_len + TIME_HEX)
    if tuple_op == 'best' then
      write = head < old_head
    elseif tuple_op == 'set' then
      write = head ~= old_head
    else
      write = prefix ~= old:sub(1, key_len)
    end
  end
  return { lex = true, def = def, top_n = def.top_n, key = key, members = members, distinct = ref.pts,
    meta = keys[ref.meta], period = period, scope = ref.scope, old = old, old_prefix = old and old:sub(1, key_len),
    prefix = prefix, member = write and head .. sub.player or nil, meta_value = sub.meta, stored = stored }
end

-- plan_submission for a slip naming a defined board (sub.layout.def): its key values and
-- metadata instead of points; its boards planned in ctx.defined (not ctx.boards, whose records
-- plan_submission reuses field by field).
local function plan_defined(keys, sub, periods, ctx)
  local refused = check_slip(sub)
  if refused then
    return nil, refused
  end
  local def = sub.layout.def
  local values, bad = slip_values(def, sub.keys)
  if not values then
    return nil, bad
  end
  if #sub.meta > def.meta_bytes or not valid_utf8(sub.meta) then
    return nil, entry_error('metadata_too_large', 'metadata must be UTF-8 of at most ' .. def.meta_bytes .. ' bytes on this board')
  end
  local ts, late = check_time(sub, ctx)
  if not ts then
    return nil, late
  end
  local boards, new_prefix = ctx.defined, def.lex and lex_prefix(def, values)
  for b, ref in ipairs(sub.layout.refs) do
    local period = periods[ref.period]
    if ts < period.start_ms or ts >= period.end_ms then
      return nil, entry_error('timestamp_outside_window', 'timestamp is outside the ' .. period.window .. ' window ' .. period.label)
    end
    if period_closed(period) then
      return nil, entry_error('period_closed', 'the ' .. period.window .. ' period ' .. period.label .. ' is closed: its finals are published')
    end
    local outsider = tournament_refusal(ctx, period, sub.player); if outsider then return nil, outsider end
    local board, failure = plan_defined_board(keys, ref, period, def, sub, values, new_prefix, ts, ctx)
    if not board then
      return nil, failure
    end
    boards[b] = board
  end
  return '', ts, nil -- no points (the activity entry's are ''), no new scope
end

-- The score of the board's N-th entry, or false while the board has fewer than N entries (then
-- everyone on it is in the top N). Read once per batch and again only after the top N changed,
-- so whether a write touches the top N is a comparison, not a ZREVRANK per board.
local function nth_score(ctx, key)
  local nth = ctx.nth[key]
  if nth == nil then
    flush_board(ctx, key)
    local flat = redis.call('ZRANGE', key, ctx.top_n - 1, ctx.top_n - 1, 'REV', 'WITHSCORES')
    nth = flat[2] and tonumber(flat[2]) or false
    ctx.nth[key] = nth
  end
  return nth
end

-- Is a score in the top N, given the N-th score? An exact tie with the N-th entry is decided by
-- member order, which only ZREVRANK knows.
local function in_top(ctx, key, player, score, nth)
  if nth == false or score > nth then
    return true
  end
  return score == nth and board_rank(ctx, key, player) < ctx.top_n
end

-- A write changed the board's top N: bump its version; announce an entry (entered). Returns the
-- member's 0-based rank when it read it (or was given it).
local function touch_top(board, player, name, ctx, rank, entered_top)
  redis.call('HINCRBY', ctx.versions, board.period.window .. ':' .. board.period.label .. ':' .. board.scope, 1)
  ctx.nth[board.key] = nil -- the N-th entry may have changed
  if entered_top then
    rank = rank or board_rank(ctx, board.key, player)
    redis.call('SPUBLISH', ctx.announce, cjson.encode({
      type = 'announce', board = board.scope, window = board.period.window,
      period = board.period.label, player = player, name = name ~= '' and name or nil,
      rank = mode_rank(board.key, board.pts, board.period.scale, board.period.mode, board.total, rank + 1),
      score = board.total,
    }))
  end
  return rank
end

-- Writes for one planned board; returns improved (boolean), the rank and the previous rank
-- (1-based; 0 = not on the board before, or not read) and the points. Every redis.call costs more
-- than its command, so nothing is read or written that the outcome does not need: `want` says
-- which rank: 'all' (the caller wants rows: the rank, and the previous one of a changed member),
-- 'top' (the activity entry's: read only when the member is in the top N, else 0) or nil (none).
local function apply_board(board, player, name, ctx, want)
  local key, old, scale = board.key, board.old, board.period.scale
  local write
  if board.op == 'best' then
    write = old == nil or board.score > old
  elseif board.op == 'incr' and old and board.total == score_points(old, scale) then
    write = false -- adding zero: keep the time the total was first reached
  else
    write = old == nil or board.score ~= old
  end
  if not write then
    -- Nothing changes (a personal best not beaten: the common case).
    local rank = 0
    if want == 'all' or (want == 'top' and in_top(ctx, key, player, old, nth_score(ctx, key))) then
      rank = board_rank(ctx, key, player) + 1
    end
    return false, rank, rank, score_points(old, scale)
  end
  local prev = want == 'all' and old and board_rank(ctx, key, player) or nil
  local nth = nth_score(ctx, key)
  local was_top = old ~= nil and (prev and prev < ctx.top_n or (not prev and in_top(ctx, key, player, old, nth)))
  -- the comparison above already decided the write, so a plain ZADD (not GT) is right here
  defer_write(board.held, player, board.score)
  forget_ranks(ctx, key, nth, old, board.score)
  local dense = board.period.mode == 'dense'
  if dense then
    flush_board(ctx, key) -- board_score_changed counts the old points on the board
  end
  board_score_changed(key, board.hist, dense and board.pts or nil, scale, old, board.score, ctx.hist)
  local rank = want == 'all' and board_rank(ctx, key, player) or nil
  if was_top then
    rank = touch_top(board, player, name, ctx, rank, false)
    if want == 'top' and in_top(ctx, key, player, board.score, nth_score(ctx, key)) then
      rank = board_rank(ctx, key, player) -- still in the top N after the write (a set may drop out)
    end
  elseif rank and rank < ctx.top_n or (not rank and in_top(ctx, key, player, board.score, nth)) then
    rank = touch_top(board, player, name, ctx, rank, true)
  end
  if board.period.expire_at > 0 and not ctx.expiring[key] then
    board.held.expire_at = board.period.expire_at -- set once the board is written (flush_boards)
    if dense then -- written above
      redis.call('EXPIREAT', board.pts, board.period.expire_at, 'NX')
    end
    ctx.expiring[key] = true
    ctx.hist_expire[board.hist] = board.period.expire_at -- set once the histogram is written
  end
  return old == nil or board.score > old, rank and rank + 1 or 0, prev and prev + 1 or 0, board.total
end

-- apply_board for a packed defined board, whose top N is its definition's, and its metadata.
local function apply_packed(board, player, name, ctx, want)
  local old, score = board.old, board.score
  local written = old == nil or (board.op == 'best' and score > old) or (board.op ~= 'best' and score ~= old)
  local game_top = ctx.top_n
  ctx.top_n = board.top_n -- nth_score's cache is per board key: one top N per key holds
  local improved, rank, prev, total = apply_board(board, player, name, ctx, want)
  ctx.top_n = game_top
  if written and board.meta_value ~= '' then
    redis.call('HSET', board.meta, player, board.meta_value)
    if board.period.expire_at > 0 then
      redis.call('EXPIREAT', board.meta, board.period.expire_at, 'NX')
    end
  end
  return improved, rank, prev, total
end

-- The histogram changes of the batch (board_score_changed), three calls per histogram however
-- many buckets moved: the moved buckets' counts read (HMGET), the new counts written (HSET) and the
-- emptied buckets deleted (HDEL). A call per bucket was most of the histograms' cost.
local function flush_histograms(ctx)
  local deltas = ctx.hist
  for _, hist_key in ipairs(deltas) do
    local buckets = {}
    for bucket, delta in pairs(deltas[hist_key]) do
      if delta ~= 0 then
        buckets[#buckets + 1] = bucket
      end
    end
    local counts, set, emptied = {}, {}, {}
    for i = 1, #buckets, 1000 do -- unpack() is bounded by Lua's C stack
      local last = math.min(i + 999, #buckets)
      local replies = redis.call('HMGET', hist_key, unpack(buckets, i, last))
      for j = 1, last - i + 1 do
        counts[i + j - 1] = tonumber(replies[j]) or 0
      end
    end
    for i, bucket in ipairs(buckets) do
      local count = counts[i] + deltas[hist_key][bucket]
      if count > 0 then
        set[#set + 1] = bucket
        set[#set + 1] = count
      else
        emptied[#emptied + 1] = bucket
      end
    end
    for i = 1, #set, 1000 do
      redis.call('HSET', hist_key, unpack(set, i, math.min(i + 999, #set)))
    end
    for i = 1, #emptied, 1000 do
      redis.call('HDEL', hist_key, unpack(emptied, i, math.min(i + 999, #emptied)))
    end
    local expire_at = ctx.hist_expire[hist_key]
    if expire_at then
      redis.call('EXPIREAT', hist_key, expire_at, 'NX')
    end
  end
end

-- The profile's name, written only when it changed. Most named slips repeat the name the profile
-- holds: the per-batch cache answers repeats within a batch, and the stored JSON is searched for
-- the encoded name before any decode (cjson escapes quotes, so '"name":<encoded>' cannot occur
-- inside another field's value). A miss decodes and writes the profile as before.
local function update_profile_name(ctx, player, name)
  if ctx.names[player] == name then
    return
  end
  ctx.names[player] = name
  local raw = redis.call('HGET', ctx.profiles, player)
  if raw and raw:find('"name":' .. cjson.encode(name), 1, true) then
    return
  end
  local profile = raw and cjson.decode(raw) or {}
  if profile.name ~= name then
    profile.name = name
    redis.call('HSET', ctx.profiles, player, cjson.encode(profile))
  end
end

-- One PFADD per distinct-player log per batch instead of one per submission: the log's final
-- state does not depend on the order or grouping of the adds. Each player once per batch: a log
-- of a few thousand players is kept sparse by Redis, where an add costs a scan of the log (on a
-- stream where players come back often: 0.18 us a submission with a member per slip, 0.02 with
-- each of the batch's players once). Chunked because unpack() is bounded by Lua's C stack.
local function add_players(period, players)
  for i = 1, #players, 1000 do
    redis.call('PFADD', period.hll, unpack(players, i, math.min(i + 999, #players)))
  end
  if #players > 0 and period.expire_at > 0 then
    redis.call('EXPIREAT', period.hll, period.expire_at, 'NX')
  end
end

-- The players the general path applied, by period; those of the common slips, one list per
-- layout, added to each of the layout's periods.
local function count_players(periods, commons)
  for _, period in ipairs(periods) do
    add_players(period, period.players)
  end
  for _, common in ipairs(commons) do
    for _, period in ipairs(common.periods) do
      add_players(period, common.players)
    end
  end
end

-- The ids the batch applied, added to their seen buckets in one SADD per bucket (the duplicate
-- checks were made against the buckets as read before the batch, plus these).
local function mark_seen(marks)
  for _, mark in ipairs(marks) do
    local ids = mark.ids
    for i = 1, #ids, 1000 do
      redis.call('SADD', mark.key, unpack(ids, i, math.min(i + 999, #ids)))
    end
    if #ids > 0 then
      redis.call('EXPIREAT', mark.key, mark.expire_at, 'NX')
    end
  end
end

-- A status alone is a plain string in the reply: a table per entry was a measurable share of the call.
local DUPLICATE, OK = 'duplicate', 'ok'

-- A slip that asked to keep its outcome: its per-board rows, by its id, in the outcomes bucket of
-- its hour (kept as long as its seen bucket), for lb_status to answer with.
local function keep_outcome(ctx, sub, outcome)
  local key = sub.layout.outcomes
  redis.call('HSET', key, sub.id, cjson.encode(outcome))
  if not ctx.expiring[key] then
    redis.call('EXPIREAT', key, sub.layout.seen_expire_at, 'NX')
    ctx.expiring[key] = true
  end
end

-- A number's text as the caller sent it when it is already canonical (no leading zero: a text of
-- n > 1 digits holds at least 10^(n-1), arithmetic rather than a call).
local POW10 = {}
for n = 1, 17 do
  POW10[n] = 10 ^ (n - 1)
end

local function canonical(text, number)
  local least = POW10[#text]
  if not least or number >= least then -- not least: '' (a defined board's slip has no points)
    return text
  end
  return string.format('%d', number)
end

--[[ The activity entries of the batch (badges and feeds read them), one stream entry per call:
n, then a column per field (ACTIVITY_COLUMNS: leaderboard/activity.py reads the same), the
applied slips' values in batch order joined by newlines (no id, player or operator may hold a
control character: text_field, valid_player). An XADD per slip was the dearest rule of the call
(the command and its arguments' conversion: about 2 us per slip in bench.drain); the columns
are appended to here and written by flush_activity. The stream is trimmed to about activity_maxlen
submissions: MAXLEN ~ in entries of this call's size.
]]
local ACTIVITY_COLUMNS = { 'id', 'player', 'points', 'op', 'ts', 'improved', 'rank' }

local function log_activity(ctx, sub, points, ts, improved, rank)
  local a = ctx.act
  local n = a.n + 1
  a.n = n
  a.id[n], a.player[n], a.points[n], a.op[n] = sub.id, sub.player, canonical(sub.points, points), sub.op
  a.ts[n], a.improved[n], a.rank[n] = canonical(sub.ts, ts), improved and '1' or '0', rank == 0 and '0' or rank
end

local function flush_activity(ctx)
  local a = ctx.act
  if a.n == 0 then
    return
  end
  local fields = { 'XADD', ctx.activity, 'MAXLEN', '~', math.ceil(ctx.maxlen / a.n), '*', 'n', a.n }
  for _, column in ipairs(ACTIVITY_COLUMNS) do
    fields[#fields + 1] = column
    fields[#fields + 1] = table.concat(a[column], '\n')
  end
  redis.call(unpack(fields))
end

--[[ The common slip, in one pass: a slip to the game's own boards with their own operators (best
or set), no tournament, no dense rank mode, no rows and no kept outcome (nearly every slip of a
game). common_boards decides once per layout and batch whether its slips may take this path (its
record, or false) and works out what they all share: the boards' records, the window all its
periods share, the smallest points cap. apply_common then checks a slip and writes it board by
board, with no table per slip or board: the same checks, writes, histogram changes, top-N bumps
and announcements as plan_submission + apply_board (tests/test_properties_common.py holds the two
paths equal). A slip it cannot take whole (any refusal, which must write nothing) goes the
general way, which names the exact error.
apply_common runs for nearly every slip, so it takes the slip's parts as its pattern split them
(no record table) and does inline what the general path calls helpers for
(parse_uint, check_time, pack_score, nth_score, in_top's comparison, defer_write,
board_score_changed's histogram deltas, log_activity): entering and leaving Lua functions was
about 200 machine instructions a call, and writing them out took the slip's VM instructions
from 722 to 521 (docs/benchmarks.md, the bench.replay section).
]]
local function common_boards(keys, layout, periods, ctx)
  if layout.def or ctx.rows or #layout.refs == 0 then
    return false
  end
  local boards, in_periods, seen_periods = {}, {}, {}
  local lo, hi, max_points = ctx.now - ctx.max_age, ctx.now + ctx.skew, math.huge -- ts in [lo, hi]
  for b, ref in ipairs(layout.refs) do
    local period = periods[ref.period]
    if ref.op == 'incr' or period.mode == 'dense' or period.entrants or period_closed(period)
        or (ref.scope ~= 'global' and not known_scope(ctx, ref.scope)) then
      return false
    end
    local board = ref.board or layout_board(keys, ref, period, layout, ctx)
    boards[b] = board
    if not board.deltas then -- what apply_common's writes need, one table read each
      board.scores, board.pending, board.scale = board.held.scores, board.held.pending, period.scale
      board.start_ms, board.unit_ms = period.start_ms, period.unit_ms
      board.deltas = ctx.hist[board.hist] -- its histogram's changes (flush_histograms), shared with the general path
      if not board.deltas then
        board.deltas = {}
        ctx.hist[board.hist] = board.deltas
        ctx.hist[#ctx.hist + 1] = board.hist
      end
      if period.expire_at > 0 then -- its expiry, set once the board is written (flush_boards)
        board.held.expire_at = period.expire_at
        ctx.expiring[board.key] = true
        ctx.hist_expire[board.hist] = period.expire_at
      end
    end
    if not seen_periods[period] then -- the layout's distinct periods (count_players)
      seen_periods[period] = true
      in_periods[#in_periods + 1] = period
    end
    lo, hi = math.max(lo, period.start_ms), math.min(hi, period.end_ms - 1)
    max_points = math.min(max_points, period.max_points)
  end
  local common = { boards = boards, periods = in_periods, players = {}, listed = {}, lo = lo, hi = hi,
    max_points = max_points }
  ctx.commons[#ctx.commons + 1] = common
  return common
end

-- Returns DUPLICATE or OK, or nil (nothing written) when the slip must take the general path (a
-- refusal of any kind). Its id and player are printable ASCII and its points and ts digits (the
-- one scan of COMMON_SLIP: any other slip takes the general path).
local function apply_common(ctx, common, id, player, points_text, ts_text, name, mark)
  if #id > MAX_ID_BYTES or ctx.banned_players[player] then
    return nil
  end
  if mark.before[id] or mark.applied[id] then
    return DUPLICATE
  end
  if #player > MAX_ID_BYTES or (name ~= '' and (#name > MAX_NAME_BYTES or not plain_text(name)))
      or #points_text > 16 or #ts_text > 15 then
    return nil
  end
  local points, ts = tonumber(points_text), tonumber(ts_text)
  if points > common.max_points or ts < common.lo or ts > common.hi then
    return nil
  end
  mark.applied[id] = true
  local ids = mark.ids
  ids[#ids + 1] = id
  local improved_any, activity_rank, new_bucket = false, '0', nil -- a rank as text: table.concat formats a number
  local boards, nths = common.boards, ctx.nth
  for b = 1, #boards do
    local board = boards[b]
    local key, scores, scale = board.key, board.scores, board.scale
    local old = scores[player] or nil
    local t = (ts - board.start_ms) / board.unit_ms -- pack_score; x - x % 1 is floor(x) for x >= 0
    local score = points * scale + (scale - 1 - (t - t % 1))
    if old == nil or score > old or (score ~= old and board.own_op == 'set') then
      local nth = nths[key]
      if nth == nil then
        nth = nth_score(ctx, key)
      end
      local was_top = old ~= nil and (nth == false or old > nth or (old == nth and in_top(ctx, key, player, old, nth)))
      scores[player] = score -- defer_write
      local pending = board.pending
      local listed = pending.n + 1
      pending.n, pending[listed] = listed, player
      if nth == false or score >= nth or (old and old >= nth) then -- forget_ranks
        ctx.ranks[key] = nil
      end
      local old_points = old and (old - old % scale) / scale -- score_points
      if old_points ~= points then -- board_score_changed's deltas
        new_bucket = new_bucket or bucket_of(points)
        local old_bucket = old_points and bucket_of(old_points)
        if old_bucket ~= new_bucket then
          local d = board.deltas
          d[new_bucket] = (d[new_bucket] or 0) + 1
          if old_bucket then
            d[old_bucket] = (d[old_bucket] or 0) - 1
          end
        end
      end
      local rank
      if was_top then
        board.total = points -- what touch_top announces
        touch_top(board, player, name, ctx, nil, false)
        if b == 1 and in_top(ctx, key, player, score, nth_score(ctx, key)) then
          rank = board_rank(ctx, key, player)
        end
      elseif nth == false or score > nth or (score == nth and in_top(ctx, key, player, score, nth)) then
        board.total = points
        rank = touch_top(board, player, name, ctx, nil, true)
      end
      if b == 1 and rank and rank < ctx.top_n then
        activity_rank = rank + 1
      end
      improved_any = improved_any or old == nil or score > old
    elseif b == 1 and in_top(ctx, key, player, old, nth_score(ctx, key)) then
      activity_rank = board_rank(ctx, key, player) + 1
    end
  end
  if not common.listed[player] then -- listed once, counted in each of the layout's periods: count_players
    common.listed[player] = true
    local players = common.players
    players[#players + 1] = player
  end
  if name ~= '' then
    update_profile_name(ctx, player, name)
  end
  local a = ctx.act -- log_activity
  local k = a.n + 1
  a.n = k
  a.id[k], a.player[k], a.op[k], a.improved[k], a.rank[k] = id, player, '', improved_any and '1' or '0', activity_rank
  a.points[k] = points >= POW10[#points_text] and points_text or canonical(points_text, points)
  a.ts[k] = ts >= POW10[#ts_text] and ts_text or canonical(ts_text, ts)
  return OK
end

local function apply_submission(keys, sub, periods, ctx)
  local err = text_field(sub.id, 'submission id', sub.id == '' and 'missing_id' or 'invalid_id', true)
  if err then
    return err
  end
  -- The tombstone (read for the whole batch), before the dedupe, so a banned player's replayed or
  -- late slip writes nothing at all (not even its id).
  if ctx.banned_players[sub.player] then
    return entry_error('banned', 'player is banned from this game')
  end
  -- The duplicate check: the id was in its seen bucket before the batch, or an earlier slip of
  -- the batch applied it. A refused slip never marks its id.
  local mark = sub.layout.mark
  if mark.before[sub.id] or mark.applied[sub.id] then
    return DUPLICATE
  end
  local layout = sub.layout
  local defined = layout.def -- a defined board's slip: key values, its own planner and writes
  local points, ts, new_scopes = (defined and plan_defined or plan_submission)(keys, sub, periods, ctx)
  if not points then
    return ts -- the error triple
  end
  mark.applied[sub.id] = true
  mark.ids[#mark.ids + 1] = sub.id

  if new_scopes then
    record_scopes(ctx, new_scopes)
  end
  local boards = defined and ctx.defined or ctx.boards
  -- every rank of the slip when the caller wants rows or the slip asked to keep its outcome
  local all = (ctx.rows or sub.outcome) and 'all' or nil
  -- the rank on the game's first board goes to the activity entry (badges read it); a tournament
  -- slip is not on it, nor a defined board's
  local activity_rank = 0
  local first_want = all or (not boards[1].period.entrants and not defined and 'top' or nil)
  local rows = ctx.rows and {} or nil
  local outcome = sub.outcome and {} or nil
  local improved_any = false
  for b = 1, #sub.layout.refs do
    local board = boards[b]
    local apply = board.lex and apply_lex or defined and apply_packed or apply_board
    local improved, rank, prev, total = apply(board, sub.player, sub.name, ctx, b == 1 and first_want or all)
    improved_any = improved_any or improved
    if b == 1 and not board.period.entrants and not defined and rank <= ctx.top_n then
      activity_rank = rank
    end
    if rows then -- a lex board's points: its first key value, as text (int64)
      rows[b] = { improved and 1 or 0, rank, prev, board.lex and total or string.format('%d', total) }
    end
    if outcome then
      -- points as text: cjson writes numbers with 14 digits
      outcome[b] = { board = board.scope, window = board.period.window, period = board.period.label,
        improved = improved, rank = rank, previous_rank = prev,
        points = board.lex and total or string.format('%d', total) }
    end
    local period = board.period
    if not period.listed[sub.player] then -- listed once per batch: count_players
      period.listed[sub.player] = true
      period.players[#period.players + 1] = sub.player
    end
  end
  if sub.name ~= '' then
    update_profile_name(ctx, sub.player, sub.name)
  end
  log_activity(ctx, sub, points, ts, improved_any, activity_rank)
  if outcome then
    keep_outcome(ctx, sub, outcome)
  end
  if not rows then
    return OK -- the caller wants the status only: no rows to build and send
  end
  return { 'ok', rows }
end

-- Functions ---------------------------------------------------------------------------------

--[[ lb_submit: apply a batch of submissions atomically, one result per submission.
A slip is refused whole (per entry, nothing written) when a period it would write to is closed
(period_closed: lb_close set the period's marker, its finals are published) or when it names a
region or mode value the game has not seen while the scopes set holds max_scopes values
(too_many_scopes); a new value is added to the set by the first slip applied with it.
What is read for every slip is read once per batch: the ban tombstones of its players (banned_among),
its ids' seen buckets (SMISMEMBER), a tournament's entrants (SMISMEMBER), each board's scores of
the players of each layout writing to it (ZMSCORE: held_board); the boards' writes are gathered
into one ZADD per board (flushed earlier only before a read of that board), and the histograms
and the seen ids are written once per batch at its end.
Input:
  KEYS[1] versions hash, KEYS[2] activity stream, KEYS[3] profiles hash, KEYS[4] banned hash,
          KEYS[5] scopes set, KEYS[6..] the boards, their companions, the closed markers,
          distinct-player logs, seen-id and outcome buckets the batch touches
  ARGV    settings, period_count, periods, definition_count, definitions, layout_count, layouts
          (each followed by its board_count boards), submission_count, submissions: records of
          these fields, in order (leaderboard/batch.py lays them out; tests/test_submit_layout.py
          holds the two equal):
    settings    call_layout now_ms top_n activity_maxlen clock_skew_ms idempotency_ms announce rows max_scopes
    period      window label start_ms end_ms shift unit_ms expire_at players_key entrants_key mode closed_key
    definition  encoding tie metadata_bytes operator key_spec top_n
    layout      seen_key outcomes_key seen_expire_at board_count
    board       board_key period op scope hist_key points_key definition members_key meta_key
    submission  layout slip
    full        id player points op ts name outcome values meta
  a slip is the submission's parts `id player points ts name` (SLIP_PARTS) joined by TAB; slip ''
  is followed by the submission's full record (a slip naming op, outcome, values or meta, or with
  a TAB in a part); call_layout the call's layout (SUBMIT_LAYOUT: a call of another is refused whole
  with library_mismatch, as a scorer of another release lays it out);
  where *_key is a KEYS index (entrants_key 0: not a tournament, anyone may write; closed_key 0:
  not checked, a rebuild replaying history); announce the announcements' channel; rows '1' for
  per-board rows with every board's rank, '0' for the status only (ranks read only where written
  into the top N or for the activity entry of a member in the top N); max_scopes 0 = no cap;
  shift and unit_ms the score packing of the
  period's window; expire_at and seen_expire_at unix seconds (a period's 0 = never); mode the
  rank mode (ordinal, dense or competition: the rank an announcement names); a board's period
  and a submission's layout are 1-based indexes of those records; a board's op is its window's
  default operator, a submission's op '' = each board's own; name '' = none; ts in milliseconds;
  outcome '1': keep the slip's per-board rows in the layout's outcomes bucket (lb_status answers
  with them), '' = not; the bucket expires with the seen bucket.
  Defined boards (leaderboard/boards.py): a definition's encoding is packed or lex, tie first or
  last, operator the board's (or 'keys': each key has its own), key_spec per key
  'd|a,<op>,<min>,<max>' joined by ';' (direction, operator, int64 bounds), top_n the size of
  the top whose changes bump its version and are announced (the game's top_n: other boards); a
  board's definition is a 1-based index of those records (0: not a defined board; members_key and meta_key 0 too),
  its points_key then the set of distinct key parts (lex) and members_key its player -> member
  hash; a submission to a defined board has points '' and values its key values as decimal
  int64 text joined by ',' (values and meta '' otherwise)
Output:
  one entry per submission: {'ok', {{improved, rank, previous_rank, points}, ...}} in board
  order ('ok', a plain string, without rows; a defined board's points: its first key value),
  'duplicate', or
  {'error', code, message} (a defined board's slip also wrong_key_count, invalid_key_value,
  key_out_of_range, metadata_too_large)
  The call's activity entry (flush_activity) holds each applied slip; a slip's rank there is
  the first board's when the member is in its top N, else 0 (and 0 for a defined board's slip,
  whose points there are '').
  Whole-call errors: 'ERR library_mismatch ...' (another layout), 'ERR bad_request ...'.
]]
local function lb_submit(keys, args)
  local call_layout, now_ms, top_n, activity_maxlen, clock_skew_ms, idempotency_ms, announce, rows, max_scopes =
    unpack(args, 1, SETTINGS_FIELDS)
  if call_layout ~= SUBMIT_LAYOUT then -- a scorer of another release: nothing read, nothing written
    return refuse('library_mismatch', 'the function library reads layout ' .. SUBMIT_LAYOUT
      .. " of lb_submit's call; this call is another release's")
  end
  local ctx = {
    versions = keys[1], activity = keys[2], profiles = keys[3], banned = keys[4], scopes = keys[5],
    now = tonumber(now_ms), top_n = tonumber(top_n), maxlen = activity_maxlen,
    skew = tonumber(clock_skew_ms), max_age = tonumber(idempotency_ms), announce = announce,
    rows = rows == '1', max_scopes = parse_uint(max_scopes, 9), expiring = {}, nth = {}, ranks = {}, known = {},
    hist = {}, hist_expire = {}, names = {}, boards = {}, defined = {}, held = {}, commons = {},
    act = { n = 0, id = {}, player = {}, points = {}, op = {}, ts = {}, improved = {}, rank = {} },
  }
  ctx.maxlen = tonumber(ctx.maxlen)
  if not (ctx.now and ctx.top_n and ctx.maxlen and ctx.skew and ctx.max_age and ctx.max_scopes and ctx.scopes) then
    return refuse('bad_request', 'malformed batch header')
  end
  local periods, pos = read_periods(keys, args, SETTINGS_FIELDS + 1)
  local defs, layouts
  if periods then
    defs, pos = read_definitions(args, pos)
  end
  if defs then
    layouts, pos = read_layouts(keys, periods, args, pos, defs)
  end
  local count = layouts and parse_uint(args[pos], 9)
  if not count then
    return refuse('bad_request', 'malformed batch')
  end
  -- Every record read before the first write: its parts and its layout into columns (a full
  -- record's position in `full`; a slip the common path cannot take, 0), each layout's distinct
  -- players (whose scores are read on each of its boards) and its seen bucket's ids. Consecutive
  -- records nearly always share a layout: it is looked up again only when the index changes.
  local ids, players, points_texts, stamps, names, lays, full = {}, {}, {}, {}, {}, {}, {}
  local used, marks, at, last = {}, {}, pos + 1, nil
  local found, seen, distinct, listed
  for i = 1, count do
    local layout, slip = unpack(args, at, at + SUBMISSION_FIELDS - 1)
    local id, player, points, ts, name
    if slip ~= '' then
      if slip then
        id, player, points, ts, name = slip:match(COMMON_SLIP)
        if not id then
          id, player, points, ts, name = slip:match(ANY_SLIP)
          full[i] = 0
        end
      end
      at = at + SUBMISSION_FIELDS
    else -- the full record follows: its first six fields (op read again on the general path)
      full[i] = at + SUBMISSION_FIELDS
      local _
      id, player, points, _, ts, name = unpack(args, full[i], full[i] + 5)
      at = at + SUBMISSION_FIELDS + FULL_FIELDS
    end
    if layout ~= last then
      found = layouts[tonumber(layout)]
      if not (found and name) then
        return refuse('bad_request', 'malformed batch')
      end
      if not found.players then
        found.players, found.distinct = {}, {}
        used[#used + 1] = found
        local mark = marks[found.seen]
        if not mark then
          mark = { key = found.seen, expire_at = found.seen_expire_at, ids = {}, applied = {} }
          marks[found.seen] = mark
          marks[#marks + 1] = mark
        end
        found.mark = mark
      end
      last, seen, distinct, listed = layout, found.mark.ids, found.distinct, found.players
    elseif not name then
      return refuse('bad_request', 'malformed batch')
    end
    ids[i], players[i], points_texts[i], stamps[i], names[i], lays[i] = id, player, points, ts, name, found
    if not distinct[player] then
      distinct[player] = true
      listed[#listed + 1] = player
    end
    seen[#seen + 1] = id
  end
  if at ~= #args + 1 then
    return refuse('bad_request', 'malformed batch')
  end
  -- the batch's distinct players (ban tombstones, tournament entrants): one layout's are its own
  local batch_players = used[1] and used[1].players or {}
  if #used > 1 then
    batch_players, distinct = {}, {}
    for _, layout in ipairs(used) do
      for _, player in ipairs(layout.players) do
        if not distinct[player] then
          distinct[player] = true
          batch_players[#batch_players + 1] = player
        end
      end
    end
  end
  ctx.players = batch_players
  ctx.banned_players = banned_among(ctx.banned, batch_players)
  for _, mark in ipairs(marks) do
    mark.before, mark.ids = held('SMISMEMBER', mark.key, mark.ids), {}
  end
  -- one record table, refilled for each slip (nothing keeps it past its slip): a table per slip
  -- was a measurable share of the call
  local results, sub, current, common = {}, {}, nil, nil
  for i = 1, count do
    if lays[i] ~= current then
      current = lays[i]
      common = current.common
      if common == nil then -- decided once per layout and batch
        common = common_boards(keys, current, periods, ctx)
        current.common = common
      end
    end
    local record = full[i]
    local result = common and not record
      and apply_common(ctx, common, ids[i], players[i], points_texts[i], stamps[i], names[i], current.mark)
    if not result then
      sub.n, sub.id, sub.player, sub.points, sub.op, sub.ts, sub.name = i, ids[i], players[i], points_texts[i], '', stamps[i], names[i]
      sub.layout, sub.outcome, sub.keys, sub.meta = current, false, '', ''
      if record and record > 0 then
        local id, player, points, op, ts, name, outcome, values, meta = unpack(args, record, record + FULL_FIELDS - 1)
        sub.op, sub.outcome, sub.keys, sub.meta = op, outcome == '1', values, meta
      end
      result = apply_submission(keys, sub, periods, ctx)
    end
    results[i] = result
  end
  flush_boards(ctx)
  flush_histograms(ctx)
  flush_activity(ctx)
  mark_seen(marks)
  count_players(periods, ctx.commons)
  return results
end

--[[ The queue's length and trim. The scorer acknowledges entries without deleting them one by one
(lb_ack trims the stream below the oldest entry a group has still to apply), so the stream may
hold acknowledged entries newer than a pending one: its length is at least the backlog, and
exactly the backlog once nothing older is pending. The exact figure is the group's own count.
]]

-- XINFO's records (flat field, value lists) as tables; none when the stream or group is missing.
local function info_records(reply)
  if type(reply) ~= 'table' or reply.err then
    return {}
  end
  local records = {}
  for i, flat in ipairs(reply) do
    local record = {}
    for f = 1, #flat, 2 do
      record[flat[f]] = flat[f + 1]
    end
    records[i] = record
  end
  return records
end

-- Each consumer group of a stream as a table of its XINFO GROUPS fields; none without the stream.
local function stream_groups(stream)
  return info_records(redis.pcall('XINFO', 'GROUPS', stream))
end

-- Entries some group has still to apply: the most any group has not acknowledged (lag: not yet
-- delivered; pending: delivered, not acknowledged). The stream's length when there is no group
-- (nothing was trimmed then) or a group's lag is unknown (XDEL'd entries ahead of it): an upper bound.
local function backlog_of(stream, length)
  local groups, most = stream_groups(stream), 0
  for _, g in ipairs(groups) do
    if type(g.lag) ~= 'number' then
      return length
    end
    most = math.max(most, g.lag + g.pending)
  end
  return #groups > 0 and most or length
end

-- Stream ids "<ms>-<seq>" in order (ms and seq compared as numbers).
local function id_below(a, b)
  local ams, aseq = string.match(a, '^(%d+)-(%d+)$')
  local bms, bseq = string.match(b, '^(%d+)-(%d+)$')
  ams, bms = tonumber(ams), tonumber(bms)
  return ams < bms or (ams == bms and tonumber(aseq) < tonumber(bseq))
end

-- Trim a stream below the oldest entry any of its groups has still to apply: a group's oldest
-- pending entry, or (nothing pending) the one after its last delivered. Exact MINID: whole nodes
-- are freed, the first kept node is cut where the bound falls (no per-id search as XDEL makes).
local function trim_applied(stream)
  local bound
  for _, g in ipairs(stream_groups(stream)) do
    local first
    if g.pending > 0 then
      first = redis.call('XPENDING', stream, g.name, '-', '+', 1)[1][1]
    else
      local ms, seq = string.match(g['last-delivered-id'], '^(%d+)-(%d+)$')
      -- the next id; a sequence too long to count on in a double keeps its entry (one too many)
      first = #seq <= 14 and ms .. '-' .. string.format('%d', tonumber(seq) + 1) or g['last-delivered-id']
    end
    if not bound or id_below(first, bound) then
      bound = first
    end
  end
  if bound then
    redis.call('XTRIM', stream, 'MINID', bound)
  end
end

-- An entry's submission id: its slip up to the first tab, or its 'id' field; nil if it has none.
local function entry_id(args, at)
  local last = at + 2 * tonumber(args[at])
  for f = at + 1, last - 1, 2 do
    if args[f] == 'slip' then
      return string.match(args[f + 1], '^[^\t]+')
    elseif args[f] == 'id' then
      return args[f + 1]
    end
  end
  return nil
end

-- The request bodies' fingerprints, each against the one its id was first filed with (the
-- Idempotency-Key rule of the HTTP API): another one refuses the whole call before anything is
-- appended, since the id would be applied with the first body and this one dropped unseen.
-- Returns the ids filed for the first time (fingerprint by id), or nil and the refusal.
local function claim_bodies(keys, args, starts, count, pos)
  if not parse_uint(args[pos], 12) then
    return nil, refuse('bad_request', 'malformed body fingerprints')
  end
  local first = {}
  for i = 1, count do
    local fp = args[pos + i]
    if fp ~= '' then
      local id = entry_id(args, starts[i])
      if not id then
        return nil, refuse('bad_request', 'entry ' .. i .. ' has a body fingerprint but no submission id')
      end
      local known, stored = first[id], nil
      for k = 3, #keys do -- the newest bucket first: a retry comes soon after
        if known or stored then
          break
        end
        stored = redis.call('HGET', keys[k], id)
      end
      known = known or stored
      if known and known ~= fp then
        return nil, refuse('idempotency_conflict', 'submission ' .. id .. ' was filed with another body')
      end
      if not stored then
        first[id] = fp
      end
    end
  end
  return first
end

--[[ lb_enqueue: append submissions to the queue, unless that would overfill it.
The backlog check and the appends are one atomic call, so concurrent submitters cannot together
push the backlog past its cap. The stream's length bounds the backlog from above (see
backlog_of), so it is enough when it leaves room; only a stream that looks full is counted
exactly. Nothing is trimmed here: an entry waiting is never dropped to make room. A malformed
call (an entry cut short, arguments past the last) appends nothing. Each entry's
submission id (its 'slip' field up to the first tab, or its 'id' field) joins the queued set
(lb_status: pending) until the scorer acknowledges the entry. With body buckets (the HTTP API),
each entry's request body fingerprint is held to the first one filed under its id
(claim_bodies), and a first one is kept in the current hour's bucket.
Input:  KEYS[1] submissions stream, KEYS[2] queued set, KEYS[3 ..] (optional) the bodies buckets
        of the idempotency window, the current hour's first
        ARGV    backlog_max, entry_count, then per entry: field_count (pairs), field, value, ...;
                with body buckets then: their expire_at (unix s), one fingerprint per entry ('':
                none)
Output: the stream ids, in order; or 'ERR backlog_full ...' or 'ERR idempotency_conflict ...' and
        nothing is appended
]]
local function lb_enqueue(keys, args)
  local backlog_max = parse_uint(args[1], 12)
  local count = parse_uint(args[2], 9)
  if not backlog_max or not count then
    return refuse('bad_request', 'malformed enqueue header')
  end
  local length = redis.call('XLEN', keys[1])
  if length + count > backlog_max then
    length = backlog_of(keys[1], length)
    if length + count > backlog_max then
      return refuse('backlog_full', 'the submissions backlog holds ' .. length .. ' of ' .. backlog_max .. ' entries')
    end
  end
  if not keys[2] then
    return refuse('bad_request', 'the queued set is required')
  end
  -- every entry's shape is checked before the first append: a malformed call appends nothing
  local starts, pos = {}, 3
  for i = 1, count do
    local pairs_count = args[pos] == '1' and 1 or parse_uint(args[pos], 3)
    if not pairs_count or pairs_count < 1 or pos + 2 * pairs_count > #args then
      return refuse('bad_request', 'malformed entry ' .. i)
    end
    starts[i] = pos
    pos = pos + 2 * pairs_count + 1
  end
  local bodies = #keys > 2
  if pos + (bodies and count + 1 or 0) ~= #args + 1 then
    return refuse('bad_request', 'arguments past the last entry')
  end
  local first
  if bodies then
    local err
    first, err = claim_bodies(keys, args, starts, count, pos)
    if err then
      return err
    end
  end
  local ids, queued, n, stream = {}, {}, 0, keys[1]
  for i = 1, count do
    local at, id = starts[i], nil
    if args[at] == '1' and args[at + 1] == 'slip' then -- nearly every entry: a slip alone
      local slip = args[at + 2]
      ids[i] = redis.call('XADD', stream, '*', 'slip', slip)
      id = string.match(slip, '^[^\t]+')
    else
      local last = at + 2 * tonumber(args[at])
      ids[i] = redis.call('XADD', stream, '*', unpack(args, at + 1, last))
      -- a slip is an entry's first field (Submission.fields); an entry by name has its 'id' anywhere
      local f = at + 1
      while f < last and args[f] ~= 'slip' and args[f] ~= 'id' do
        f = f + 2
      end
      if f < last then
        id = args[f + 1]
        if args[f] == 'slip' then
          id = string.match(id, '^[^\t]+')
        end
      end
    end
    if id then
      n = n + 1
      queued[n] = id
    end
  end
  for i = 1, #queued, 1000 do -- chunked: unpack() is bounded by Lua's C stack
    redis.call('SADD', keys[2], unpack(queued, i, math.min(i + 999, #queued)))
  end
  if first and next(first) then
    for id, fp in pairs(first) do
      redis.call('HSET', keys[3], id, fp) -- a retry's: the same fingerprint again, a no-op
    end
    redis.call('EXPIREAT', keys[3], args[pos], 'NX')
  end
  return ids
end

--[[ lb_ack: acknowledge a group's entries, take their submission ids out of the queued set, and
trim the stream below the oldest entry any group has still to apply (trim_applied). One call per
batch instead of XACK + XDEL: XDEL looks up each id in its node, the trim frees whole nodes.
Every entry not acknowledged stays, so a replica that dies leaves its entries to be claimed.
Input:  KEYS[1] stream, KEYS[2] queued set (optional)
        ARGV    group, entry_count, the entries' stream ids, then submission ids to remove from
                the queued set
Output: the number of entries acknowledged
]]
local function lb_ack(keys, args)
  local count = parse_uint(args[2], 9)
  if not count or #args < 2 + count then
    return refuse('bad_request', 'malformed acknowledgement')
  end
  local acked = 0
  for i = 3, 2 + count, 1000 do -- chunked: unpack() is bounded by Lua's C stack
    acked = acked + redis.call('XACK', keys[1], args[1], unpack(args, i, math.min(i + 999, 2 + count)))
  end
  if keys[2] then
    for i = 3 + count, #args, 1000 do
      redis.call('SREM', keys[2], unpack(args, i, math.min(i + 999, #args)))
    end
  end
  trim_applied(keys[1])
  return acked
end

--[[ lb_status: what became of a submission, by its id: applied (its id is in a seen bucket;
with its per-board rows when it asked lb_submit to keep them), pending (in the queue), refused
(the scorer dead-lettered it: code and message), or unknown (never received, or older than the
idempotency window). Applied wins over pending (a copy sent twice: the first was applied),
pending over refused (a refused slip sent again).
Input:  KEYS[1] queued set, KEYS[2 .. seen_count + 1] seen buckets, the outcome buckets of the
        same hours in the same order, then refused buckets
        ARGV    submission id, seen_count
Output: {'applied'} or {'applied', rows JSON: [{board, window, period, improved, rank,
        previous_rank, points}, ...]}, {'pending'}, {'refused', code, message} or {'unknown'}
]]
local function lb_status(keys, args)
  local id, seen_count = args[1], parse_uint(args[2], 4)
  if type(id) ~= 'string' or id == '' or not seen_count or 2 * seen_count + 1 > #keys then
    return refuse('bad_request', 'submission id and seen bucket count required')
  end
  for k = 2, seen_count + 1 do
    if redis.call('SISMEMBER', keys[k], id) == 1 then
      local rows = redis.call('HGET', keys[k + seen_count], id)
      return rows and { 'applied', rows } or { 'applied' }
    end
  end
  if redis.call('SISMEMBER', keys[1], id) == 1 then
    return { 'pending' }
  end
  for k = #keys, 2 * seen_count + 2, -1 do -- the newest refusal first
    local raw = redis.call('HGET', keys[k], id)
    if raw then
      local code, message = raw:match('^(%S*) ?(.*)$')
      return { 'refused', code, message }
    end
  end
  return { 'unknown' }
end

--[[ lb_lease: take, renew or release a lease held under a unique owner token.
Renewal must check the holder and extend in one step: a plain SET XX would steal a lease that
expired and was taken by another replica in between.
Input:  KEYS[1] lease key; ARGV[1] owner token, ARGV[2] ttl_ms, ARGV[3] 'hold' or 'release'
Output: 1 if the caller holds the lease after the call, else 0
]]
local function lb_lease(keys, args)
  local owner, ttl = args[1], parse_uint(args[2], 9)
  if not owner or owner == '' or not ttl or ttl < 1 then
    return refuse('bad_request', 'lease needs an owner and a ttl in ms')
  end
  local holder = redis.call('GET', keys[1])
  if args[3] == 'release' then
    if holder == owner then
      redis.call('DEL', keys[1])
    end
    return 0
  end
  if holder == owner then
    redis.call('PEXPIRE', keys[1], ttl)
    return 1
  end
  if holder then
    return 0
  end
  redis.call('SET', keys[1], owner, 'PX', ttl)
  return 1
end

--[[ lb_publish: publish snapshots and store them as the latest, only while holding the lease.
The lease check and the writes are one atomic call: a publisher that stalled past its lease (and
was replaced) publishes nothing, so two replicas never publish in the same tick.
Input:  KEYS[1] lease, KEYS[2] published record (hash), KEYS[3..] each board's latest snapshot
        ARGV    owner, latest_ttl_s, then per board: channel, record field, record value, snapshot
Output: 1 published; 0 not the lease holder (nothing written)
]]
local PUBLISH_KEYS, PUBLISH_ARGS, PUBLISH_FIELDS = 2, 2, 4

local function lb_publish(keys, args)
  local owner, ttl = args[1], parse_uint(args[2], 9)
  if not ttl or ttl < 1 or #args ~= PUBLISH_ARGS + PUBLISH_FIELDS * (#keys - PUBLISH_KEYS) then
    return refuse('bad_request', 'malformed publish')
  end
  if redis.call('GET', keys[1]) ~= owner then
    return 0
  end
  local pos = PUBLISH_ARGS + 1
  for b = PUBLISH_KEYS + 1, #keys do
    local channel, field, value, snapshot = unpack(args, pos, pos + PUBLISH_FIELDS - 1)
    redis.call('SPUBLISH', channel, snapshot)
    redis.call('SET', keys[b], snapshot, 'EX', ttl)
    redis.call('HSET', keys[2], field, value)
    pos = pos + PUBLISH_FIELDS
  end
  return 1
end

--[[ lb_forget: remove the consumer names of replicas that are gone.
A consumer name stays in its group after its replica dies. Names idle (no read attempted) for
at least idle_ms and holding no pending entry are deleted; the check and the delete are one atomic
call, so a name is never deleted while it holds entries.
Input:  KEYS[1] stream;  ARGV group, idle_ms, the caller's own name (never deleted)
Output: the names removed
]]
local function lb_forget(keys, args)
  local idle_ms = tonumber(args[2])
  if not idle_ms then
    return refuse('bad_request', 'idle_ms must be a number')
  end
  local removed = {} -- no stream or no group yet: nothing to forget
  for _, c in ipairs(info_records(redis.pcall('XINFO', 'CONSUMERS', keys[1], args[1]))) do
    if c.pending == 0 and c.idle >= idle_ms and c.name ~= args[3] then
      redis.call('XGROUP', 'DELCONSUMER', keys[1], args[1], c.name)
      removed[#removed + 1] = c.name
    end
  end
  return removed
end

local function entries_with_profiles(profiles, flat)
  local out, players = {}, {}
  for i = 1, #flat, 2 do
    players[#players + 1] = flat[i]
  end
  local found = #players > 0 and redis.call('HMGET', profiles, unpack(players)) or {}
  for i, player in ipairs(players) do
    out[#out + 1] = player
    out[#out + 1] = flat[i * 2]
    out[#out + 1] = found[i] or false
  end
  return out
end

--[[ lb_top: the first N entries of a board, best first, joined with profiles.
Input:  KEYS[1] board, KEYS[2] profiles; ARGV[1] n
Output: flat {player, packed score, profile JSON or nil, ...}
]]
local function lb_top(keys, args)
  local n = parse_uint(args[1], 6)
  if not n or n < 1 or n > 1000 then
    return refuse('bad_request', 'n must be 1..1000')
  end
  local flat = redis.call('ZRANGE', keys[1], 0, n - 1, 'REV', 'WITHSCORES')
  return entries_with_profiles(keys[2], flat)
end

--[[ lb_around: the entries k above and k below a player, clamped at the board's edges.
Input:  KEYS[1] board, KEYS[2] profiles, KEYS[3] the board's points set;
        ARGV[1] player, ARGV[2] k, ARGV[3] rank mode, ARGV[4] shift (k of the score packing)
Output: {first ordinal rank (1-based), first rank in the mode, first percentile position (the
        ordinal rank in ordinal mode, else the competition rank), board size, player, packed score,
        profile JSON or nil, ...}; {} if unranked
]]
local function lb_around(keys, args)
  local k = parse_uint(args[2], 3)
  if not k or k > 100 then
    return refuse('bad_request', 'k must be 0..100')
  end
  local shift = parse_uint(args[4], 2)
  if not RANK_MODES[args[3]] or not shift or shift > 52 then
    return refuse('bad_request', 'rank mode and shift required')
  end
  local rank = redis.call('ZREVRANK', keys[1], args[1])
  if not rank then
    return {}
  end
  local start = math.max(0, rank - k)
  local flat = redis.call('ZRANGE', keys[1], start, rank + k, 'REV', 'WITHSCORES')
  local out = entries_with_profiles(keys[2], flat)
  local scale = 2 ^ shift
  local points = score_points(tonumber(flat[2]), scale)
  local first = mode_rank(keys[1], keys[3], scale, args[3], points, start + 1)
  local position = args[3] == 'dense' and mode_rank(keys[1], keys[3], scale, 'competition', points, nil) or first
  return { start + 1, first, position, redis.call('ZCARD', keys[1]), unpack(out) }
end

--[[ lb_ranks: rank and packed score of each listed player (a friends list, or the players
a gateway pushes own-rank updates to), plus the board size.
A player whose approximate rank (from the histogram) is beyond deep_from gets that approximation
(ordinal and competition modes; dense ranks are always exact): O(1) per player after one read of
the histogram, instead of O(log N). deep_from 0: every rank exact.
Input:  KEYS[1] board, KEYS[2] its points set, KEYS[3] its histogram;
        ARGV[1] rank mode, ARGV[2] shift, ARGV[3] deep_from, ARGV[4..] players
Output: {board size, then per player: rank (1-based) or nil, packed score or nil, position or nil
        (the ordinal rank in ordinal mode, else the competition rank: what a percentile counts),
        1 if approximate else 0} in ARGV order
]]
local function lb_ranks(keys, args)
  local mode, shift, deep_from = args[1], parse_uint(args[2], 2), parse_uint(args[3], 12)
  if not RANK_MODES[mode] or not shift or shift > 52 or not deep_from then
    return refuse('bad_request', 'rank mode, shift and deep_from required')
  end
  local board, scale = keys[1], 2 ^ shift
  local out = { redis.call('ZCARD', board) }
  local hist = deep_from > 0 and mode ~= 'dense' and out[1] > deep_from and read_histogram(keys[3], board, scale) or nil
  for i = 4, #args do
    local player = args[i]
    local score = redis.call('ZSCORE', board, player)
    local rank, position, approx
    if score then
      local points = score_points(tonumber(score), scale)
      approx = hist and approx_rank(hist, points)
      if approx and approx > deep_from then
        rank, position = approx, approx
      else
        approx = nil
        -- one O(log N) read per mode: ZREVRANK only where the ordinal rank is the answer
        local ordinal = mode == 'ordinal' and redis.call('ZREVRANK', board, player) + 1 or nil
        rank = mode_rank(board, keys[2], scale, mode, points, ordinal)
        position = mode == 'dense' and mode_rank(board, keys[2], scale, 'competition', points, nil) or rank
      end
    end
    out[#out + 1] = rank or false
    out[#out + 1] = score or false
    out[#out + 1] = position or false
    out[#out + 1] = approx and 1 or 0
  end
  return out
end

-- Defined boards: lex reads ---------------------------------------------------------------
-- (the encoding and its helpers: "Defined boards: lex members" above)

--[[ lb_lex_top: the first N entries of a lex board, best first.
Input:  KEYS[1] board, KEYS[2] profiles, KEYS[3] the board's metadata hash; ARGV[1] n, ARGV[2]
        the definition's key count
Output: flat {member, profile JSON or nil, metadata or nil, ...}
]]
local function lb_lex_top(keys, args)
  local n, key_len = parse_uint(args[1], 6), lex_key_len(args[2])
  if not n or n < 1 or n > 1000 or not key_len then
    return refuse('bad_request', 'n must be 1..1000, key count 1..5')
  end
  return lex_entries(keys[2], keys[3], redis.call('ZRANGE', keys[1], 0, n - 1), key_len)
end

--[[ lb_lex_ranks: rank and member of each listed player on a lex board, plus the board size.
Input:  KEYS[1] board, KEYS[2] its members hash (player -> member), KEYS[3] its distinct key
        parts; ARGV[1] rank mode, ARGV[2] key count, ARGV[3..] players
Output: {board size, then per player: member or nil, rank or nil, position or nil (the ordinal
        rank in ordinal mode, else the competition rank)} in ARGV order
]]
local function lb_lex_ranks(keys, args)
  local mode, key_len = args[1], lex_key_len(args[2])
  if not RANK_MODES[mode] or not key_len then
    return refuse('bad_request', 'rank mode and key count required')
  end
  local out = { redis.call('ZCARD', keys[1]) }
  local members = #args > 2 and redis.call('HMGET', keys[2], unpack(args, 3)) or {}
  for i = 3, #args do
    local member = members[i - 2]
    local rank, position
    if member then
      rank = lex_rank(keys[1], keys[3], mode, member, key_len)
      position = mode == 'dense' and lex_rank(keys[1], keys[3], 'competition', member, key_len) or rank
    end
    out[#out + 1] = member or false
    out[#out + 1] = rank or false
    out[#out + 1] = position or false
  end
  return out
end

--[[ lb_lex_around: the entries k above and k below a player on a lex board.
Input:  KEYS[1] board, KEYS[2] members hash, KEYS[3] distinct key parts, KEYS[4] profiles,
        KEYS[5] metadata hash; ARGV[1] player, ARGV[2] k, ARGV[3] rank mode, ARGV[4] key count
Output: {first ordinal rank, first rank in the mode, first position, board size, then flat
        member, profile JSON or nil, metadata or nil, ...}; {} if unranked
]]
local function lb_lex_around(keys, args)
  local k, key_len = parse_uint(args[2], 3), lex_key_len(args[4])
  if not k or k > 100 or not RANK_MODES[args[3]] or not key_len then
    return refuse('bad_request', 'k must be 0..100; rank mode and key count required')
  end
  local member = redis.call('HGET', keys[2], args[1])
  if not member then
    return {}
  end
  local ordinal = redis.call('ZRANK', keys[1], member)
  local start = math.max(0, ordinal - k)
  local members = redis.call('ZRANGE', keys[1], start, ordinal + k)
  local first = members[1]
  local rank = lex_rank(keys[1], keys[3], args[3], first, key_len)
  local position = args[3] == 'dense' and lex_rank(keys[1], keys[3], 'competition', first, key_len) or rank
  if args[3] == 'ordinal' then
    rank, position = start + 1, start + 1
  end
  return { start + 1, rank, position, redis.call('ZCARD', keys[1]), unpack(lex_entries(keys[4], keys[5], members, key_len)) }
end

-- Closed periods and tournaments ----------------------------------------------------------

--[[ lb_close: a period's close event with its final top N, added once however often (and by
however many replicas) it is asked for: the marker is set NX in the same atomic call that adds
the event, and from then on lb_submit refuses the period's slips (period_closed), so its boards
keep agreeing with the event and the finals. The versions fields of the period's boards are
removed either way (its boards are no longer published).
Input:  KEYS[1] marker, KEYS[2] closed stream, KEYS[3] finals list, KEYS[4] versions hash,
        KEYS[5] journal stream, KEYS[6..] the period's boards
        ARGV    window, period, start_ms, end_ms, shift, n, marker expire_at_s (0 = never),
                finals kept, stream maxlen, now_ms, rank mode (the ranks the event names), then
                per board: scope
Output: the close event's stream id, or false if the period was closed before
]]
local CLOSE_KEYS, CLOSE_ARGS = 5, 11

-- The close's common arguments (lb_close, lb_close_board: the same first ones), parsed; nil
-- when malformed. The journal and the event keep the caller's text of the numbers.
local function close_args(args)
  local c = { window = args[1], period = args[2], start_ms = args[3], end_ms = args[4], expire_at = args[7],
    kept = args[8], now_ms = args[10], mode = args[11], board = '' }
  c.top_n, c.expire_s, c.keep = parse_uint(args[6], 4), parse_uint(args[7], 12), parse_uint(args[8], 6)
  c.maxlen, c.now, c.shift = parse_uint(args[9], 9), parse_uint(args[10], 15), parse_uint(args[5], 2)
  if not (c.shift and c.top_n and c.top_n >= 1 and c.expire_s and c.keep and c.maxlen and c.now and RANK_MODES[c.mode]) then
    return nil
  end
  return c
end

-- Whether this call closes the period: its boards' version fields dropped either way, then the
-- marker set NX (a period closed before keeps its event).
local function take_close(keys, c, fields)
  for _, field in ipairs(fields) do
    redis.call('HDEL', keys[4], field)
  end
  if c.expire_s > 0 then
    return redis.call('SET', keys[1], c.now, 'NX', 'EXAT', c.expire_s)
  end
  return redis.call('SET', keys[1], c.now, 'NX')
end

-- The rank of the i-th entry of a final list (from rank 1) in the mode, given the rank and the
-- tie (what the mode compares) of the entry before it: a tie shares its rank outside ordinal mode.
local function final_rank(prev_rank, prev_tie, tie, i, mode)
  if prev_rank and prev_tie == tie and mode ~= 'ordinal' then
    return prev_rank
  elseif prev_rank and mode == 'dense' then
    return prev_rank + 1
  end
  return i
end

-- The close event, its entry in the finals (the newest `keep`) and the journal entry a rebuild
-- restores the marker and the finals from. A defined board's (c.board its scope) names the
-- board and carries its columns (key names, directions, display hints).
local function add_close(keys, c, top)
  local id = c.window .. ':' .. c.period .. (c.board ~= '' and ':' .. c.board or '')
  -- cjson writes an empty table as {}; a board with no entries is simply left out
  local top_json = next(top) and cjson.encode(top) or '{}'
  local fields = { 'id', id, 'window', c.window, 'period', c.period, 'start_ms', c.start_ms, 'end_ms', c.end_ms,
    'closed_ms', c.now_ms, 'top', top_json }
  if c.board ~= '' then
    fields[#fields + 1], fields[#fields + 2], fields[#fields + 3], fields[#fields + 4] = 'board', c.board, 'columns', c.columns
  end
  local event_id = redis.call('XADD', keys[2], 'MAXLEN', '~', c.maxlen, '*', unpack(fields))
  local final = ''
  if c.keep > 0 then
    local record = {
      id = id, window = c.window, period = c.period, start_ms = tonumber(c.start_ms), end_ms = tonumber(c.end_ms),
      closed_ms = c.now, event = event_id, top = cjson.decode(top_json),
    }
    if c.board ~= '' then
      record.board, record.columns = c.board, cjson.decode(c.columns)
    end
    final = cjson.encode(record)
    redis.call('LPUSH', keys[3], final)
    redis.call('LTRIM', keys[3], 0, c.keep - 1)
  end
  if c.board ~= '' then
    journal(keys[5], 'close', c.window, c.period, c.expire_at, c.kept, c.now_ms, final, c.board)
  else
    journal(keys[5], 'close', c.window, c.period, c.expire_at, c.kept, c.now_ms, final)
  end
  return event_id
end

local function lb_close(keys, args)
  local c = close_args(args)
  local boards = #keys - CLOSE_KEYS -- board b: KEYS[CLOSE_KEYS + b], its scope ARGV[CLOSE_ARGS + b]
  if not c or #args ~= CLOSE_ARGS + boards then
    return refuse('bad_request', 'malformed close')
  end
  local fields = {}
  for b = 1, boards do
    fields[b] = c.window .. ':' .. c.period .. ':' .. args[CLOSE_ARGS + b]
  end
  if not take_close(keys, c, fields) then
    return false
  end
  local scale = 2 ^ c.shift
  local top = {}
  for b = 1, boards do
    local flat = redis.call('ZRANGE', keys[CLOSE_KEYS + b], 0, c.top_n - 1, 'REV', 'WITHSCORES')
    local entries, rank, last = {}, nil, nil
    for i = 1, #flat, 2 do
      local points = score_points(tonumber(flat[i + 1]), scale)
      rank, last = final_rank(rank, last, points, (i + 1) / 2, c.mode), points
      entries[#entries + 1] = { rank = rank, player = flat[i], points = points }
    end
    top[args[CLOSE_ARGS + b]] = entries
  end
  return add_close(keys, c, top)
end

--[[ lb_close_board: lb_close for one defined board (scope board:<id>), whose periods are its
own (its time zone's days, its season's length): its own marker (lb_submit refuses the board's
later slips of the period), its own finals list, and entries with every key value as text (exact
over the whole int64 range), the rank in the board's mode and the entry's metadata. A lex board's
top is its first members (ZRANGE, as lb_lex_top), a packed one's its highest scores.
Input:  KEYS[1] marker, KEYS[2] closed stream, KEYS[3] finals list, KEYS[4] versions hash,
        KEYS[5] journal stream, KEYS[6] the board, KEYS[7] its metadata hash
        ARGV    window, period, start_ms, end_ms, shift (0: a lex board), n, marker expire_at_s
                (0 = never), finals kept, stream maxlen, now_ms, rank mode, scope, columns (JSON
                array of {name, direction, display}), directions ('d' or 'a' per key, e.g. 'da')
Output: the close event's stream id, or false if the period was closed before
]]
local function lb_close_board(keys, args)
  local c = close_args(args)
  local scope, columns, directions = args[12], args[13], args[14]
  if not c or #args ~= 14 or #keys ~= 7 or not (directions or ''):match('^[ad]+$') or #directions > 5
      or (c.shift > 0 and #directions ~= 1) or not (scope or ''):match('^board:') then
    return refuse('bad_request', 'malformed close')
  end
  c.board, c.columns = scope, columns
  if not take_close(keys, c, { c.window .. ':' .. c.period .. ':' .. scope }) then
    return false
  end
  local rows, key_len = {}, #directions * KEY_HEX
  if c.shift == 0 then
    for _, member in ipairs(redis.call('ZRANGE', keys[6], 0, c.top_n - 1)) do
      local values = {}
      for i = 1, #directions do
        local hi, lo = key_of_hex(member:sub((i - 1) * KEY_HEX + 1, i * KEY_HEX), directions:sub(i, i) == 'd')
        values[i] = int64_format(hi, lo)
      end
      rows[#rows + 1] = { player = member:sub(key_len + TIME_HEX + 1), keys = values, tie = member:sub(1, key_len) }
    end
  else
    local flat, scale = redis.call('ZRANGE', keys[6], 0, c.top_n - 1, 'REV', 'WITHSCORES'), 2 ^ c.shift
    for i = 1, #flat, 2 do
      local signed = score_points(tonumber(flat[i + 1]), scale)
      local value = directions == 'd' and signed or -signed
      rows[#rows + 1] = { player = flat[i], keys = { fmt_points(value) }, tie = signed }
    end
  end
  local entries = {}
  if #rows > 0 then
    local players = {}
    for i, row in ipairs(rows) do
      players[i] = row.player
    end
    local meta, rank, last = redis.call('HMGET', keys[7], unpack(players)), nil, nil
    for i, row in ipairs(rows) do
      rank, last = final_rank(rank, last, row.tie, i, c.mode), row.tie
      entries[i] = { rank = rank, player = row.player, keys = row.keys, meta = meta[i] or nil }
    end
  end
  return add_close(keys, c, next(entries) and { [scope] = entries } or {})
end

--[[ lb_tournament: create a tournament; its definition never changes afterwards.
Input:  KEYS[1] tournaments hash, KEYS[2] journal stream; ARGV id, start_ms, end_ms, now_ms
Output: 1 created; 0 it exists with the same bounds (a retried create); ERR tournament_exists
        when it exists with other bounds, ERR tournament_ended when end_ms is not after now
]]
local function lb_tournament(keys, args)
  local start_ms, end_ms, now = parse_uint(args[2], 15), parse_uint(args[3], 15), parse_uint(args[4], 15)
  if not (start_ms and end_ms and now) or start_ms >= end_ms or not args[1]:match('^[%w_-]+$') or #args[1] > 32 then
    return refuse('bad_request', 'malformed tournament')
  end
  local def = cjson.encode({ start_ms = start_ms, end_ms = end_ms })
  local old = redis.call('HGET', keys[1], args[1])
  if old then
    local was = cjson.decode(old)
    if was.start_ms == start_ms and was.end_ms == end_ms then
      return 0
    end
    return refuse('tournament_exists', 'tournament ' .. args[1] .. ' exists with other start and end')
  end
  if end_ms <= now then
    return refuse('tournament_ended', 'tournament ' .. args[1] .. ' would end in the past')
  end
  redis.call('HSET', keys[1], args[1], def)
  journal(keys[2], 'tournament', args[1], args[2], args[3])
  return 1
end

--[[ lb_join: enter players in a tournament, before it starts or while it runs.
Input:  KEYS[1] tournaments hash, KEYS[2] the tournament's entrants, KEYS[3] journal stream;
        ARGV    id, now_ms, entrants expire_at_s, players...
Output: how many players were newly entered; ERR unknown_tournament, ERR tournament_ended,
        ERR invalid_player (valid_player; nobody is entered)
]]
local function lb_join(keys, args)
  local now, expire_at = parse_uint(args[2], 15), parse_uint(args[3], 12)
  if not (now and expire_at) or #args < 4 then
    return refuse('bad_request', 'malformed join')
  end
  local raw = redis.call('HGET', keys[1], args[1])
  if not raw then
    return refuse('unknown_tournament', 'no tournament ' .. args[1])
  end
  if now >= cjson.decode(raw).end_ms then
    return refuse('tournament_ended', 'tournament ' .. args[1] .. ' has ended')
  end
  for i = 4, #args do
    if not valid_player(args[i]) then
      return refuse('invalid_player', PLAYER_RULE)
    end
  end
  local added = redis.call('SADD', keys[2], unpack(args, 4))
  redis.call('EXPIREAT', keys[2], expire_at)
  if added > 0 then
    journal(keys[3], 'join', args[1], args[3], unpack(args, 4))
  end
  return added
end

-- Board definitions --------------------------------------------------------------------------
-- A definition is validated in full by leaderboard/boards.py (one rule set, with its codes); an
-- update is a compare-and-set against the definition the caller read and checked it against
-- (boards.check_update refuses a change that would reorder a live board), so two operators
-- updating at once cannot both win, and neither can skip the check. Here: the shape the rest of
-- the library relies on (a JSON object naming its own id, bounded), the version counter every
-- process watches, and the journal entry a rebuild restores the definition from.

local MAX_DEFINITION_BYTES = 4096

local function definition_of(id, json)
  if not id:match('^[%w_-]+$') or #id > 32 then
    return nil, refuse('invalid_board', 'board id must be 1-32 characters of A-Z a-z 0-9 _ -')
  end
  if #json > MAX_DEFINITION_BYTES then
    return nil, refuse('invalid_board', 'a definition is at most ' .. MAX_DEFINITION_BYTES .. ' bytes of JSON')
  end
  local ok, def = pcall(cjson.decode, json)
  if not ok or type(def) ~= 'table' or def.id ~= id or type(def.keys) ~= 'table' or #def.keys < 1 or #def.keys > 5
      or type(def.version) ~= 'number' then
    return nil, refuse('invalid_board', 'a definition must be a JSON object with its id, 1-5 keys and a version')
  end
  return def
end

--[[ lb_board_put: create or update a board definition.
Input:  KEYS[1] boards hash, KEYS[2] boards version counter, KEYS[3] journal stream, KEYS[4]
        deleted definitions hash; ARGV id, definition JSON, the definition JSON the update was
        checked against ('' to create), the deleted definition of that id a create was checked
        against ('' for none: boards.check_recreate; its keys may still hold entries)
Output: the boards version counter after the change; 0 when creating a definition that exists
        exactly so (a retried create); ERR board_exists (create, another definition), ERR
        unknown_board (update of none), ERR stale_board (it, or the deleted one a create was
        checked against, changed since the caller read it), ERR invalid_board
]]
local function lb_board_put(keys, args)
  local id, json, expected, deleted = args[1], args[2], args[3], args[4]
  if not (id and json and expected and deleted) then
    return refuse('bad_request', 'malformed board put')
  end
  local def, err = definition_of(id, json)
  if not def then
    return err
  end
  local old = redis.call('HGET', keys[1], id)
  if expected == '' then
    if old then
      if old == json then
        return 0
      end
      return refuse('board_exists', 'board ' .. id .. ' exists; update it instead')
    end
    if (redis.call('HGET', keys[4], id) or '') ~= deleted then
      return refuse('stale_board', 'the deleted definition of board ' .. id .. ' changed since it was read; try again')
    end
  elseif not old then
    return refuse('unknown_board', 'no board ' .. id)
  elseif old ~= expected then
    return refuse('stale_board', 'board ' .. id .. ' changed since it was read; read it and try again')
  elseif def.version ~= cjson.decode(old).version + 1 then
    return refuse('invalid_board', 'an update carries the next version of the definition')
  end
  redis.call('HSET', keys[1], id, json)
  redis.call('HDEL', keys[4], id)  -- live again: the definition in the boards hash is the one to check
  journal(keys[3], 'board', id, json)
  return redis.call('INCR', keys[2])
end

--[[ lb_board_delete: delete a board definition (the board's keys expire as their windows say),
remembered in the deleted definitions hash: a create of that id is checked against it.
Input:  KEYS[1] boards hash, KEYS[2] boards version counter, KEYS[3] journal stream, KEYS[4]
        deleted definitions hash; ARGV id
Output: the boards version counter after the change; ERR unknown_board
]]
local function lb_board_delete(keys, args)
  local id = args[1]
  if not id then
    return refuse('bad_request', 'malformed board delete')
  end
  local old = redis.call('HGET', keys[1], id)
  if not old then
    return refuse('unknown_board', 'no board ' .. id)
  end
  redis.call('HDEL', keys[1], id)
  redis.call('HSET', keys[4], id, old)
  journal(keys[3], 'board_delete', id, old)
  return redis.call('INCR', keys[2])
end

-- Moderation and profiles -------------------------------------------------------------------
-- Operator actions (ban, unban, correct) and profile writes. The Python side names every board
-- a call touches (KEYS) with its version field (ARGV), as lb_submit's caller does; each function
-- checks all of its input before its first write, so a refused call changes nothing.

local MAX_REASON_BYTES = 256
local MAX_AVATAR_BYTES = 256

-- The player, actor and reason of a moderation action; nil when all are acceptable.
local function check_action(player, actor, reason, reason_required)
  if not valid_player(player) then
    return refuse('invalid_player', PLAYER_RULE)
  end
  if type(actor) ~= 'string' or #actor == 0 or #actor > MAX_ID_BYTES or not plain_text(actor) then
    return refuse('invalid_actor', 'actor must be 1-' .. MAX_ID_BYTES .. ' bytes of UTF-8 text')
  end
  if type(reason) ~= 'string' or (reason_required and #reason == 0) or #reason > MAX_REASON_BYTES
      or not plain_text(reason) then
    return refuse('invalid_reason', 'reason must be 1-' .. MAX_REASON_BYTES .. ' bytes of UTF-8 text')
  end
  return nil
end

-- Bump a board's top-N version when the player was or is now in its top N: the publisher
-- republishes exactly the boards whose snapshot can differ.
local function bump_if_top(versions, field, before, after, top_n)
  if (before and before < top_n) or (after and after < top_n) then
    redis.call('HINCRBY', versions, field, 1)
    return 1
  end
  return 0
end

--[[ lb_ban: remove a player from the boards given and leave a tombstone, so that no replayed
or later submission can put them back (lb_submit refuses it with the per-entry code 'banned').
Banning again updates the record and removes whatever is on the boards given.
Input:  KEYS[1] banned hash, KEYS[2] versions hash, KEYS[3] activity stream, KEYS[4] journal
        stream, then per board three keys: the board, its histogram, its points set
        ARGV    player, actor, reason, now_ms, activity_maxlen, top_n, then per board its
                version field "<window>:<period>:<scope>", its window's shift (-1: unknown, the
                companions are left alone) and rank mode
Output: {boards the player was removed from, of those the boards whose top N changed}
]]
local BAN_FIXED, BAN_KEYS, BAN_ARGS, BAN_FIELDS = 4, 3, 6, 3

local function lb_ban(keys, args)
  local player, actor, reason, now_ms, activity_maxlen, top_n = unpack(args, 1, BAN_ARGS)
  local err = check_action(player, actor, reason, true)
  if err then
    return err
  end
  local now, maxlen = parse_uint(now_ms, 15), parse_uint(activity_maxlen, 12)
  top_n = parse_uint(top_n, 6)
  local count = (#keys - BAN_FIXED) / BAN_KEYS
  if not (now and maxlen and top_n) or count < 0 or count ~= math.floor(count) or #args ~= BAN_ARGS + BAN_FIELDS * count then
    return refuse('bad_request', 'malformed ban')
  end
  local boards = {}
  for i = 1, count do -- every record checked before the first write
    local k, pos = BAN_FIXED + BAN_KEYS * (i - 1), BAN_ARGS + BAN_FIELDS * (i - 1)
    local field, shift, mode = unpack(args, pos + 1, pos + BAN_FIELDS)
    shift = tonumber(shift)
    if not shift or not RANK_MODES[mode] then
      return refuse('bad_request', 'malformed ban')
    end
    boards[i] = { field = field, shift = shift, key = keys[k + 1], hist = keys[k + 2],
                  pts = mode == 'dense' and keys[k + 3] or nil }
  end
  redis.call('HSET', keys[1], player, cjson.encode({ by = actor, reason = reason, at = now }))
  local removed, touched = 0, 0
  for _, board in ipairs(boards) do
    local rank = redis.call('ZREVRANK', board.key, player)
    if rank then
      local old = tonumber(redis.call('ZSCORE', board.key, player))
      redis.call('ZREM', board.key, player)
      if board.shift >= 0 then
        board_score_changed(board.key, board.hist, board.pts, 2 ^ board.shift, old, nil)
      end
      removed = removed + 1
      touched = touched + bump_if_top(keys[2], board.field, rank, nil, top_n)
    end
  end
  redis.call('XADD', keys[3], 'MAXLEN', '~', maxlen, '*', 'action', 'ban', 'player', player,
    'by', actor, 'reason', reason, 'boards', removed)
  -- the durable log folds a ban as "off every board": the boards given need not be journaled
  journal(keys[4], 'ban', player, actor, reason, now_ms)
  return { removed, touched }
end

--[[ lb_ban_defined: remove a player from defined boards (lb_ban's part for them, called after
it: its tombstone already keeps the player's new slips out), or, in a rebuild, replay a ban's
effect on them. Journals nothing: the journaled ban is lb_ban's. A lex board loses the member,
its player -> member field, its metadata and, on a dense board, its key part when nobody else
holds it; a packed one the member, its metadata and its share of the companions.
Input:  KEYS[1] versions hash, then per board five keys: the board, its members hash, its points
        set (distinct key parts, or distinct points), its metadata hash, its histogram
        ARGV    player, then per board: its version field, top N, rank mode, key part length
                (0: a packed board), its window's shift (packed)
Output: {boards the player was removed from, of those the boards whose top N changed}
]]
local function lb_ban_defined(keys, args)
  local player = args[1]
  local count = (#keys - 1) / 5
  if not valid_player(player) or count ~= math.floor(count) or #args ~= 1 + 5 * count then
    return refuse('bad_request', 'malformed ban')
  end
  local removed, touched = 0, 0
  for i = 1, count do
    local k, a = 1 + 5 * (i - 1), 1 + 5 * (i - 1)
    local board, members, distinct, meta, hist = unpack(keys, k + 1, k + 5)
    local field, top_n, mode, key_len, shift = unpack(args, a + 1, a + 5)
    top_n, key_len, shift = tonumber(top_n), tonumber(key_len), tonumber(shift)
    if not (top_n and key_len and shift and RANK_MODES[mode]) then
      return refuse('bad_request', 'malformed ban')
    end
    local rank
    if key_len > 0 then
      local member = redis.call('HGET', members, player)
      rank = member and redis.call('ZRANK', board, member)
      if member then
        redis.call('ZREM', board, member)
        redis.call('HDEL', members, player)
        local prefix = member:sub(1, key_len)
        if mode == 'dense' and redis.call('ZLEXCOUNT', board, '[' .. prefix, '(' .. prefix .. 'g') == 0 then
          redis.call('ZREM', distinct, prefix) -- nobody holds those values any more
        end
      end
    else
      rank = redis.call('ZREVRANK', board, player)
      if rank then
        local old = tonumber(redis.call('ZSCORE', board, player))
        redis.call('ZREM', board, player)
        board_score_changed(board, hist, mode == 'dense' and distinct or nil, 2 ^ shift, old, nil)
      end
    end
    if rank then
      redis.call('HDEL', meta, player)
      removed = removed + 1
      touched = touched + bump_if_top(keys[1], field, rank, nil, top_n)
    end
  end
  return { removed, touched }
end

--[[ lb_unban: lift a ban. The scores the ban removed stay removed; the player starts again.
Input:  KEYS[1] banned hash, KEYS[2] activity stream, KEYS[3] journal stream
        ARGV    player, actor, reason ('' allowed), activity_maxlen
Output: 1 if the player was banned, 0 if not (then nothing is recorded)
]]
local function lb_unban(keys, args)
  local err = check_action(args[1], args[2], args[3], false)
  if err then
    return err
  end
  local maxlen = parse_uint(args[4], 12)
  if not maxlen or #args ~= 4 then
    return refuse('bad_request', 'malformed unban')
  end
  if redis.call('HDEL', keys[1], args[1]) == 0 then
    return 0
  end
  redis.call('XADD', keys[2], 'MAXLEN', '~', maxlen, '*', 'action', 'unban', 'player', args[1],
    'by', args[2], 'reason', args[3])
  journal(keys[3], 'unban', args[1], args[2], args[3])
  return 1
end

local CORRECT_FIXED, CORRECT_KEYS, CORRECT_ARGS, CORRECT_FIELDS = 4, 3, 7, 7

--[[ lb_correct: set a player's points on the boards given (a correction, with its reason).
A player already on a board keeps the time part of their score (ties stay ordered as they were
reached); a player not on it is placed as of now (clamped into the board's period).
Input:  KEYS[1] banned hash, KEYS[2] versions hash, KEYS[3] activity stream, KEYS[4] journal
        stream, then per board CORRECT_KEYS keys (board, histogram, points set)
        ARGV    player, points, actor, reason, now_ms, activity_maxlen, top_n, then per board
                its version field "<window>:<period>:<scope>", start_ms, end_ms, shift, unit_ms,
                expire_at_s (0 = never), rank mode
Output: per board {previous points or -1 (not on it), rank after (1-based)}
        ERR banned when the player is banned (lift the ban first); ERR points_out_of_range
]]
local function lb_correct(keys, args)
  local err = check_action(args[1], args[3], args[4], true)
  if err then
    return err
  end
  local points = parse_uint(args[2], 16)
  if points == nil then
    return refuse('invalid_points', 'points must be a non-negative integer')
  end
  local now, maxlen, top_n = parse_uint(args[5], 15), parse_uint(args[6], 12), parse_uint(args[7], 6)
  local count = (#keys - CORRECT_FIXED) / CORRECT_KEYS
  if not (now and maxlen and top_n) or count < 1 or count ~= math.floor(count)
      or #args ~= CORRECT_ARGS + CORRECT_FIELDS * count then
    return refuse('bad_request', 'malformed correction')
  end
  local player = args[1]
  if redis.call('HEXISTS', keys[1], player) == 1 then
    return refuse('banned', 'player is banned from this game; unban first')
  end
  local plans = {}
  for b = 1, count do -- every board checked before the first write
    local pos, k = CORRECT_ARGS + CORRECT_FIELDS * (b - 1), CORRECT_FIXED + CORRECT_KEYS * (b - 1)
    local field, start_ms, end_ms, shift, unit_ms, expire_at, mode = unpack(args, pos + 1, pos + CORRECT_FIELDS)
    start_ms, end_ms, shift = tonumber(start_ms), tonumber(end_ms), tonumber(shift)
    unit_ms, expire_at = tonumber(unit_ms), tonumber(expire_at)
    if not (start_ms and end_ms and shift and unit_ms and expire_at and RANK_MODES[mode]) or end_ms <= start_ms then
      return refuse('bad_request', 'malformed correction')
    end
    local scale = 2 ^ shift
    if points > 2 ^ (53 - shift) - 1 then
      return refuse('points_out_of_range', 'points must stay below ' .. string.format('%d', 2 ^ (53 - shift)) .. ' on board ' .. field)
    end
    local board, hist, pts = keys[k + 1], keys[k + 2], mode == 'dense' and keys[k + 3] or nil
    local old = redis.call('ZSCORE', board, player)
    old = old and tonumber(old) or nil
    local tie
    if old then
      tie = old % scale
    else
      local at = math.min(math.max(now, start_ms), end_ms - 1)
      tie = scale - 1 - math.floor((at - start_ms) / unit_ms)
    end
    plans[b] = { old = old, score = points * scale + tie, scale = scale, field = field, expire_at = expire_at,
                 board = board, hist = hist, pts = pts }
  end
  local rows = {}
  for b = 1, count do
    local plan = plans[b]
    local before = plan.old and redis.call('ZREVRANK', plan.board, player) or nil
    redis.call('ZADD', plan.board, plan.score, player)
    board_score_changed(plan.board, plan.hist, plan.pts, plan.scale, plan.old, plan.score)
    if plan.expire_at > 0 then
      -- after board_score_changed: EXPIREAT on a key not yet created would do nothing
      redis.call('EXPIREAT', plan.board, plan.expire_at, 'NX')
      redis.call('EXPIREAT', plan.hist, plan.expire_at, 'NX')
      if plan.pts then
        redis.call('EXPIREAT', plan.pts, plan.expire_at, 'NX')
      end
    end
    local after = redis.call('ZREVRANK', plan.board, player)
    bump_if_top(keys[2], plan.field, before, after, top_n)
    rows[#rows + 1] = { plan.old and string.format('%d', score_points(plan.old, plan.scale)) or -1, after + 1 }
  end
  redis.call('XADD', keys[3], 'MAXLEN', '~', maxlen, '*', 'action', 'correct', 'player', player,
    'by', args[3], 'reason', args[4], 'value', string.format('%d', points), 'boards', #rows)
  -- player, points, actor, reason, now_ms and the board records: all a replay of it needs
  journal(keys[4], 'correct', args[1], args[2], args[3], args[4], args[5], unpack(args, CORRECT_ARGS + 1))
  return rows
end

--[[ lb_correct_defined: set a player's key values on defined boards, or take the player off
them (a correction, with its reason): lb_correct's part for boards whose entries are key values.
A player already on a board keeps the time their entry was reached (ties stay ordered as they
were reached); a player not on it is placed as of now (clamped into the board's period). A lex
board's member, its player -> member field and, on a dense board, its distinct key parts follow;
a packed board's companions (histogram, distinct points) too. Metadata is kept, set or cleared.
Input:  KEYS[1] banned hash, KEYS[2] versions hash, KEYS[3] activity stream, KEYS[4] journal
        stream, then per board five keys: the board, its members hash, its points set (distinct
        key parts, or distinct points), its metadata hash, its histogram
        ARGV    how ('correct'; 'replay': a rebuild replaying a journaled one, not journaled
                again), player, values ("v1,v2,..."; '' takes the player off), metadata mode
                ('keep' or 'set'), metadata ('' clears), actor, reason, now_ms, activity_maxlen,
                then one definition record (lb_submit's: 1, then its DEFINITION_FIELDS), then
                per board its version field, start_ms, end_ms, shift (packed), unit_ms,
                expire_at_s (0 = never), rank mode
Output: per board {previous values ("v1,v2,...") or '' (not on it), rank after (1-based; 0: off it)}
        ERR banned (lift the ban first); ERR wrong_key_count, invalid_key_value,
        key_out_of_range, metadata_too_large; ERR invalid_player, invalid_actor, invalid_reason
]]
local CORRECT_DEFINED_ARGS, CORRECT_DEFINED_FIELDS = 9, 7

local function lb_correct_defined(keys, args)
  local how, player, corrected, meta_mode, meta_value, actor, reason = unpack(args, 1, 7)
  if how ~= 'correct' and how ~= 'replay' then
    return refuse('bad_request', 'malformed correction')
  end
  local err = check_action(player, actor, reason, true)
  if err then
    return err
  end
  local now, maxlen = parse_uint(args[8], 15), parse_uint(args[9], 12)
  local defs, pos = read_definitions(args, CORRECT_DEFINED_ARGS + 1)
  local count = (#keys - 4) / 5
  if not (now and maxlen and defs and #defs == 1 and (meta_mode == 'keep' or meta_mode == 'set'))
      or count < 1 or count ~= math.floor(count) or #args ~= pos - 1 + CORRECT_DEFINED_FIELDS * count then
    return refuse('bad_request', 'malformed correction')
  end
  local def, values = defs[1], nil
  if corrected ~= '' then
    local bad
    values, bad = slip_values(def, corrected)
    if not values then
      return refuse(bad[2], bad[3])
    end
  end
  if meta_mode == 'set' and (#meta_value > def.meta_bytes or not valid_utf8(meta_value)) then
    return refuse('metadata_too_large', 'metadata must be UTF-8 of at most ' .. def.meta_bytes .. ' bytes on this board')
  end
  if redis.call('HEXISTS', keys[1], player) == 1 then
    return refuse('banned', 'player is banned from this game; unban first')
  end
  local key_len = def.lex and #def.keys * KEY_HEX or 0
  local plans = {}
  for b = 1, count do -- every board checked before the first write
    local a, k = pos - 1 + CORRECT_DEFINED_FIELDS * (b - 1), 4 + 5 * (b - 1)
    local field, start_ms, end_ms, shift, unit_ms, expire_at, mode = unpack(args, a + 1, a + CORRECT_DEFINED_FIELDS)
    start_ms, end_ms, shift = tonumber(start_ms), tonumber(end_ms), tonumber(shift)
    unit_ms, expire_at = tonumber(unit_ms), tonumber(expire_at)
    if not (start_ms and end_ms and shift and unit_ms and unit_ms > 0 and expire_at and RANK_MODES[mode])
        or end_ms <= start_ms then
      return refuse('bad_request', 'malformed correction')
    end
    local plan = { field = field, mode = mode, scale = 2 ^ shift, expire_at = expire_at, board = keys[k + 1],
      members = keys[k + 2], distinct = keys[k + 3], meta = keys[k + 4], hist = keys[k + 5] }
    local at = math.min(math.max(now, start_ms), end_ms - 1) -- a new entry's reached time
    if def.lex then
      plan.old = redis.call('HGET', plan.members, player)
      if values then
        local reached = plan.old and plan.old:sub(key_len + 1, key_len + TIME_HEX) or time_hex(at, def.last)
        plan.prefix = lex_prefix(def, values)
        plan.member = plan.prefix .. reached .. player
      end
    else
      local old = redis.call('ZSCORE', plan.board, player)
      plan.old = old and tonumber(old) or nil
      if values then
        local sign = def.keys[1].desc and 1 or -1
        local tie = plan.old and plan.old % plan.scale -- floored: a negated value's tie part too
        if not tie then
          local t = math.floor((at - start_ms) / unit_ms)
          tie = def.last and t or plan.scale - 1 - t
        end
        plan.score = sign * (values[1][1] * TWO32 + values[1][2]) * plan.scale + tie
      end
    end
    plans[b] = plan
  end
  local rows = {}
  for _, plan in ipairs(plans) do
    local before, after, previous
    if def.lex then
      local old = plan.old
      before = old and redis.call('ZRANK', plan.board, old)
      previous = old and values_text(lex_values(def, old)) or ''
      if old then
        redis.call('ZREM', plan.board, old)
      end
      if plan.member then
        redis.call('ZADD', plan.board, 0, plan.member)
        redis.call('HSET', plan.members, player, plan.member)
        if plan.mode == 'dense' then
          redis.call('ZADD', plan.distinct, 0, plan.prefix)
        end
        after = redis.call('ZRANK', plan.board, plan.member)
      elseif old then
        redis.call('HDEL', plan.members, player)
      end
      local old_prefix = old and old:sub(1, key_len)
      if plan.mode == 'dense' and old_prefix and old_prefix ~= plan.prefix
          and redis.call('ZLEXCOUNT', plan.board, '[' .. old_prefix, '(' .. old_prefix .. 'g') == 0 then
        redis.call('ZREM', plan.distinct, old_prefix) -- nobody holds those values any more
      end
    else
      before = plan.old and redis.call('ZREVRANK', plan.board, player)
      previous = plan.old and string.format('%d', (def.keys[1].desc and 1 or -1) * score_points(plan.old, plan.scale)) or ''
      if plan.score then
        redis.call('ZADD', plan.board, plan.score, player)
        after = redis.call('ZREVRANK', plan.board, player)
      elseif plan.old then
        redis.call('ZREM', plan.board, player)
      end
      if plan.old or plan.score then
        board_score_changed(plan.board, plan.hist, plan.mode == 'dense' and plan.distinct or nil, plan.scale,
          plan.old, plan.score)
      end
    end
    if not values then
      redis.call('HDEL', plan.meta, player)
    elseif meta_mode == 'set' then
      if meta_value == '' then
        redis.call('HDEL', plan.meta, player)
      else
        redis.call('HSET', plan.meta, player, meta_value)
      end
    end
    if values and plan.expire_at > 0 then
      -- after the writes: EXPIREAT on a key not yet created would do nothing
      for _, key in ipairs({ plan.board, plan.members, plan.distinct, plan.meta, plan.hist }) do
        redis.call('EXPIREAT', key, plan.expire_at, 'NX')
      end
    end
    bump_if_top(keys[2], plan.field, before, after, def.top_n)
    rows[#rows + 1] = { previous, after and after + 1 or 0 }
  end
  redis.call('XADD', keys[3], 'MAXLEN', '~', maxlen, '*', 'action', 'correct', 'player', player,
    'by', actor, 'reason', reason, 'value', corrected, 'boards', #rows)
  if how == 'correct' then
    -- every argument but how: all a rebuild's replay of it needs, the board records included
    journal(keys[4], 'correct_defined', unpack(args, 2))
  end
  return rows
end

local PROFILE_CHECKS = {
  name = function(v)
    return #v <= MAX_NAME_BYTES and plain_text(v)
  end,
  avatar = function(v)
    return #v <= MAX_AVATAR_BYTES and v:match('^https://[%w%-%.]+') ~= nil
      and v:match("^[%w%-%._~:/%?#%[%]@!%$&'%(%)%*%+,;=%%]+$") ~= nil
  end,
  country = function(v)
    return v:match('^[A-Z][A-Z]$') ~= nil
  end,
}

local PROFILE_RULES = {
  name = 'name must be 1-' .. MAX_NAME_BYTES .. ' bytes of UTF-8 text without control characters',
  avatar = 'avatar must be an https:// URL of at most ' .. MAX_AVATAR_BYTES .. ' bytes',
  country = 'country must be an ISO 3166-1 alpha-2 code in capitals',
}

--[[ lb_profile: set (or, with '', clear) fields of a player's profile: name, avatar, country.
Fields not named are kept. A change bumps the version of each board given on whose top N the
player stands, so the next snapshot carries it.
Input:  KEYS[1] profiles hash, KEYS[2] versions hash, KEYS[3] journal stream, KEYS[4..] boards
        (the current ones)
        ARGV    player, top_n, board_count, per board its version field, then field, value, ...
Output: the profile JSON after the call
]]
local function lb_profile(keys, args)
  if not valid_player(args[1]) then
    return refuse('invalid_player', PLAYER_RULE)
  end
  local top_n, nboards = parse_uint(args[2], 6), parse_uint(args[3], 6)
  if not (top_n and nboards) or nboards ~= #keys - 3 or (#args - 3 - nboards) % 2 ~= 0 then
    return refuse('bad_request', 'malformed profile')
  end
  local changes = {}
  for i = 4 + nboards, #args, 2 do
    local field, value = args[i], args[i + 1]
    local check = PROFILE_CHECKS[field]
    if not check then
      return refuse('bad_request', 'profile fields are name, avatar and country')
    end
    if value ~= '' and not check(value) then
      return refuse('invalid_' .. field, PROFILE_RULES[field])
    end
    changes[field] = value
  end
  local player = args[1]
  local raw = redis.call('HGET', keys[1], player)
  local profile = raw and cjson.decode(raw) or {}
  local changed = false
  for field, value in pairs(changes) do
    local new = value ~= '' and value or nil
    if profile[field] ~= new then
      profile[field] = new
      changed = true
    end
  end
  if not changed then
    return raw or '{}'
  end
  local encoded = next(profile) and cjson.encode(profile) or '{}'
  if encoded == '{}' then
    redis.call('HDEL', keys[1], player)
  else
    redis.call('HSET', keys[1], player, encoded)
  end
  for b = 4, #keys do
    local rank = redis.call('ZREVRANK', keys[b], player)
    bump_if_top(keys[2], args[b], rank, nil, top_n)
  end
  journal(keys[3], 'profile', player, unpack(args, 4 + nboards))
  return encoded
end

--[[ lb_rank_rebuild: rebuild a board's histogram, and in dense mode its distinct points, from the
board itself. For boards written before they had companions, and after a window's mode changed to
dense (the points set is kept only in dense mode): O(N), one atomic call, so no write interleaves;
a few seconds per million members, during which Redis serves nothing else. The companions get the
board's expiry; outside dense mode the points set is deleted.
Input:  KEYS[1] board, KEYS[2] its points set, KEYS[3] its histogram; ARGV[1] shift, ARGV[2] mode
Output: {members, distinct points values (0 outside dense mode), histogram buckets}
]]
local function lb_rank_rebuild(keys, args)
  local shift = parse_uint(args[1], 2)
  if not shift or shift > 52 or not RANK_MODES[args[2]] then
    return refuse('bad_request', 'shift (0..52) and rank mode required')
  end
  local dense = args[2] == 'dense'
  local board, scale = keys[1], 2 ^ shift
  redis.call('DEL', keys[2], keys[3])
  local counts, distinct, buckets, values = {}, {}, 0, 0
  local size, step = redis.call('ZCARD', board), 10000
  for start = 0, size - 1, step do
    local flat = redis.call('ZRANGE', board, start, start + step - 1, 'WITHSCORES')
    for i = 2, #flat, 2 do
      local points = score_points(tonumber(flat[i]), scale)
      local b = bucket_of(points)
      if not counts[b] then
        counts[b], buckets = 0, buckets + 1
      end
      counts[b] = counts[b] + 1
      if dense and not distinct[points] then
        distinct[points], values = true, values + 1
      end
    end
  end
  local batch = {}
  local function flush(cmd, key)
    if #batch > 0 then
      redis.call(cmd, key, unpack(batch))
      batch = {}
    end
  end
  for b, n in pairs(counts) do
    batch[#batch + 1], batch[#batch + 2] = b, n
    if #batch >= 2000 then flush('HSET', keys[3]) end
  end
  flush('HSET', keys[3])
  for points in pairs(distinct) do
    batch[#batch + 1], batch[#batch + 2] = points, fmt_points(points)
    if #batch >= 2000 then flush('ZADD', keys[2]) end
  end
  flush('ZADD', keys[2])
  local expire = redis.call('PEXPIRETIME', board)
  if expire > 0 then
    redis.call('PEXPIREAT', keys[2], expire)
    redis.call('PEXPIREAT', keys[3], expire)
  end
  return { size, values, buckets }
end

redis.register_function('lb_board_put', lb_board_put)
redis.register_function('lb_board_delete', lb_board_delete)
redis.register_function('lb_submit', lb_submit)
redis.register_function('lb_enqueue', lb_enqueue)
redis.register_function('lb_ack', lb_ack)
redis.register_function('lb_lease', lb_lease)
redis.register_function('lb_forget', lb_forget)
redis.register_function('lb_publish', lb_publish)
redis.register_function('lb_close', lb_close)
redis.register_function('lb_close_board', lb_close_board)
redis.register_function('lb_tournament', lb_tournament)
redis.register_function('lb_join', lb_join)
redis.register_function { function_name = 'lb_top', callback = lb_top, flags = { 'no-writes' } }
redis.register_function { function_name = 'lb_around', callback = lb_around, flags = { 'no-writes' } }
redis.register_function { function_name = 'lb_ranks', callback = lb_ranks, flags = { 'no-writes' } }
redis.register_function { function_name = 'lb_status', callback = lb_status, flags = { 'no-writes' } }
redis.register_function { function_name = 'lb_lex_top', callback = lb_lex_top, flags = { 'no-writes' } }
redis.register_function { function_name = 'lb_lex_ranks', callback = lb_lex_ranks, flags = { 'no-writes' } }
redis.register_function { function_name = 'lb_lex_around', callback = lb_lex_around, flags = { 'no-writes' } }
redis.register_function('lb_ban', lb_ban)
redis.register_function('lb_ban_defined', lb_ban_defined)
redis.register_function('lb_unban', lb_unban)
redis.register_function('lb_correct', lb_correct)
redis.register_function('lb_correct_defined', lb_correct_defined)
redis.register_function('lb_profile', lb_profile)
redis.register_function('lb_rank_rebuild', lb_rank_rebuild)
